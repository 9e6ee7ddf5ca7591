"""deploy/: every file parses, both schedules fire exactly on quarter starts, and every command
line names only flags the CLI accepts."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from croniter import croniter

from autotune.cli.main import app as cli_app

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "kubernetes"
SYSTEMD = DEPLOY / "systemd"
FROM = datetime(2026, 2, 14, 12, 0, tzinfo=UTC)  # mid-quarter, so no firing is "now"
QUARTER_STARTS = [datetime(year, month, 1, 2, 0, tzinfo=UTC)
                  for year in (2026, 2027, 2028) for month in (1, 4, 7, 10)][1:9]

# The flags the manifests may use of `autotune quarterly`; checked against the real CLI below.
QUARTERLY_FLAGS = frozenset({"--deployment", "--period", "--days", "--force", "--max-trials",
                             "--max-gpu-hours", "--deadline", "--ray-address", "--help"})


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _kind(kind: str) -> dict[str, Any]:
    found = [d for p in sorted(K8S.glob("*.yaml")) for d in _docs(p) if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((SYSTEMD / name).read_text())
    return parser


def test_every_yaml_parses_into_kubernetes_objects() -> None:
    paths = sorted(DEPLOY.rglob("*.yaml"))
    assert {p.name for p in paths} >= {"cronjob-quarterly.yaml", "raycluster.yaml", "api.yaml"}
    for path in paths:
        docs = _docs(path)
        assert docs, path
        for doc in docs:
            assert {"apiVersion", "kind", "metadata"} <= set(doc), path
            assert doc["metadata"]["namespace"] == "autotune", path


def test_cronjob_fires_on_quarter_starts_only_and_never_overlaps() -> None:
    cron = _kind("CronJob")
    spec = cron["spec"]
    assert spec["schedule"] == "0 2 1 1,4,7,10 *"
    assert spec["concurrencyPolicy"] == "Forbid" and spec["timeZone"] == "Etc/UTC"
    it = croniter(spec["schedule"], FROM)
    firings = [it.get_next(datetime) for _ in range(8)]
    assert firings == QUARTER_STARTS


def test_the_quarter_start_check_would_catch_a_wrong_schedule() -> None:
    for wrong in ("0 2 1 3,6,9,12 *", "0 2 * 1,4,7,10 *", "2 0 1 1,4,7,10 *", "0 2 1 */4 *"):
        it = croniter(wrong, FROM)
        assert [it.get_next(datetime) for _ in range(8)] != QUARTER_STARTS, wrong


def test_cronjob_runs_against_the_kuberay_head_service() -> None:
    cluster = _kind("RayCluster")
    container = _kind("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"][
        "containers"][0]
    env = {e["name"]: e for e in container["env"]}
    address = env["AUTOTUNE_RAY_ADDRESS"]["value"]
    # KubeRay names the head's service <cluster>-head-svc; 10001 is the Ray client port.
    assert re.fullmatch(rf"ray://{cluster['metadata']['name']}-head-svc(\.autotune\.svc)?:10001",
                        address), address
    argv = container["command"] + container["args"]
    assert argv[argv.index("--ray-address") + 1] == "$(AUTOTUNE_RAY_ADDRESS)"
    assert env["AUTOTUNE_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "autotune", "key": "database-url"}


def test_raycluster_has_gpu_worker_groups() -> None:
    spec = _kind("RayCluster")["spec"]
    gpus = []
    for group in spec["workerGroupSpecs"]:
        container = group["template"]["spec"]["containers"][0]
        limits = container["resources"]["limits"]
        gpus.append(int(limits["nvidia.com/gpu"]))
        assert container["resources"]["requests"]["nvidia.com/gpu"] == limits["nvidia.com/gpu"]
    assert max(gpus) >= 8 and all(g >= 1 for g in gpus)
    assert spec["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"


def test_api_deployment_probes_secrets_and_service() -> None:
    pod = _kind("Deployment")["spec"]["template"]["spec"]
    api = pod["containers"][0]
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in api["env"] if "valueFrom" in e}
    assert refs == {"AUTOTUNE_DATABASE_URL": {"name": "autotune", "key": "database-url"},
                    "AUTOTUNE_API__TOKEN": {"name": "autotune", "key": "api-token"}}
    secret = _kind("Secret")
    assert set(secret["stringData"]) == {"database-url", "api-token"}
    port = api["command"][api["command"].index("--port") + 1]
    assert api["ports"][0]["containerPort"] == int(port)
    service = _kind("Service")
    assert service["spec"]["selector"] == _kind("Deployment")["spec"]["selector"]["matchLabels"]


def _systemd_next(expr: str, iterations: int) -> list[datetime]:
    out = subprocess.run(["systemd-analyze", "calendar", f"--iterations={iterations}",
                          f"--base-time={FROM:%Y-%m-%d %H:%M:%S} UTC", expr],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    stamps = re.findall(r"(?:Next elapse|Iter\. #\d+): \w{3} (\S+ \S+) UTC", out)
    return [datetime.strptime(s, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC) for s in stamps]


def _parse_next(expr: str, iterations: int) -> list[datetime]:
    """Fallback where systemd-analyze is missing: the one form we use, `*-MM,MM-DD HH:MM:SS UTC`."""
    m = re.fullmatch(r"\*-([\d,]+)-(\d{2}) (\d{2}):(\d{2}):(\d{2}) UTC", expr)
    assert m, f"unexpected OnCalendar form {expr!r}"
    months, day = [int(x) for x in m[1].split(",")], int(m[2])
    hour, minute, second = int(m[3]), int(m[4]), int(m[5])
    found: list[datetime] = []
    for year in range(FROM.year, FROM.year + 3):
        for month in months:
            when = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
            if when > FROM and len(found) < iterations:
                found.append(when)
    return found


def test_systemd_timer_fires_on_quarter_starts_and_catches_up() -> None:
    timer = _unit("autotune-quarterly.timer")["Timer"]
    assert timer["Persistent"] == "true"
    assert timer["Unit"] == "autotune-quarterly.service"
    expr = timer["OnCalendar"]
    nxt = _systemd_next if shutil.which("systemd-analyze") else _parse_next
    assert nxt(expr, 4) == QUARTER_STARTS[:4]


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_systemd_check_would_catch_a_wrong_calendar() -> None:
    assert _systemd_next("*-01,04,07,10-01 00:00:00 UTC", 4) != QUARTER_STARTS[:4]
    assert _systemd_next("quarterly", 4) != QUARTER_STARTS[:4]  # systemd's is 00:00 local


# -- command lines -------------------------------------------------------------------------------
def _command_lines() -> Iterator[tuple[str, list[str]]]:
    for path in sorted(K8S.glob("*.yaml")):
        for doc in _docs(path):
            yield from ((f"{path.name}:{doc['kind']}", argv) for argv in _containers(doc))
    for path in sorted(SYSTEMD.glob("*.service")):
        service = _unit(path.name)["Service"]
        for key in ("ExecStartPre", "ExecStart"):
            if key in service:
                yield f"{path.name}:{key}", shlex.split(service[key])


def _containers(node: Any) -> Iterator[list[str]]:
    if isinstance(node, dict):
        if "image" in node and "command" in node:
            yield list(node["command"]) + list(node.get("args", []))
        for value in node.values():
            yield from _containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _containers(value)


def _cli_command(path: list[str]) -> Any:
    """The (click) command of `autotune PATH...`, None if there is none. Typer ships its own
    click, so groups are recognised by their `commands`, not by class."""
    command: Any = typer.main.get_command(cli_app)
    for name in path:
        subcommands = getattr(command, "commands", None)
        if subcommands is None or name not in subcommands:
            return None
        command = subcommands[name]
    return command


def _accepted_flags(path: list[str]) -> frozenset[str]:
    command = _cli_command(path)
    assert command is not None, f"`autotune {' '.join(path)}` is not a CLI command"
    return frozenset(opt for p in command.params for opt in (*p.opts, *p.secondary_opts)
                     if opt.startswith("--")) | {"--help"}


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    """(subcommand path, flags) of an `autotune ...` command line."""
    assert Path(argv[0]).name == "autotune", argv
    rest = argv[1:]
    path = [rest.pop(0)]
    if path[0] == "db":
        path.append(rest.pop(0))
    flags = [a.split("=", 1)[0] for a in rest if a.startswith("--")]
    return path, flags


def test_command_lines_name_only_flags_the_cli_accepts() -> None:
    seen: set[str] = set()
    for where, argv in _command_lines():
        path, flags = _split(argv)
        seen.add(" ".join(path))
        unknown = set(flags) - _accepted_flags(path)
        assert not unknown, f"{where}: `autotune {' '.join(path)}` has no {sorted(unknown)}"
    assert seen == {"quarterly", "api", "db upgrade"}


def test_the_quarterly_command_has_the_scheduler_flags() -> None:
    assert QUARTERLY_FLAGS <= _accepted_flags(["quarterly"])


def test_the_flag_check_would_catch_a_wrong_flag() -> None:
    assert "--listen" not in _accepted_flags(["api"])
    assert {"--host", "--port"} <= _accepted_flags(["api"])
    assert "--ray" not in _accepted_flags(["quarterly"])
    with pytest.raises(AssertionError, match="not a CLI command"):
        _accepted_flags(["serve"])

"""A scriptable CLI: `--json` on tune, publish, report, campaigns and quarterly prints one JSON
object on stdout (an error too, with today's message and exit code); a re-run that asks for
another campaign than the stored one is refused naming what differs, or starts a new one with
--new-campaign (another sampler is a warning line); --version; shell completion."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import AUTOTUNE, run_cli

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier

# The demo deployment on the simulator, small: 3 trials, one config confirmed over two seeds.
FAST = ["--trials", "3", "--confirm-top", "1", "--confirm-repeats", "2"]


def _one_object(proc: subprocess.CompletedProcess[str]) -> dict:
    """stdout is exactly one JSON object (whatever the tables wrote went to stderr)."""
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout[-2000:]
    value = json.loads(lines[0])
    assert isinstance(value, dict)
    return value


def _rows(url: str) -> dict[str, int]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return {t: conn.exec_driver_sql(f"SELECT COUNT(*) FROM {t}").scalar_one()
                    for t in ("autotune_deployments", "autotune_campaigns", "studies",
                              "autotune_publications")}
    finally:
        engine.dispose()


@pytest.fixture
def env(migrated_sqlite: str) -> dict[str, str]:
    return {"AUTOTUNE_DATABASE_URL": migrated_sqlite}


def test_each_command_prints_one_json_object(env: dict[str, str], tmp_path: Path) -> None:
    tuned = run_cli("tune", *FAST, "--json", env=env)
    assert tuned.returncode == 0, tuned.stderr[-2000:]
    result = _one_object(tuned)
    assert "Winner beside the baselines" in tuned.stderr  # the tables, on stderr
    assert (result["campaign"], result["deployment"], result["status"]) == (
        "demo", "demo", "completed")
    assert result["already_completed"] is False and result["published"] is False
    assert result["trials"]["measured"] == 3 and result["trials"]["max_trials"] == 3
    assert result["winner_basis"] == "confirmed"
    winner = result["winner"]
    confirmed = next(c for c in result["confirmations"] if c["winner"])
    assert winner["trial"] == confirmed["trial"]
    assert winner["capacity_output_tok_s"]["confirmed_lcb"] == confirmed["lcb_output_tok_s"]
    assert "--max-num-seqs" in winner["engine_args"] and winner["config"]["max_num_seqs"] >= 1
    roles = {b["role"] for b in result["baselines"]}
    assert {"vllm-default", "guide-heuristic"} <= roles
    for base in result["baselines"]:
        search = base["capacity_output_tok_s"]["search"]
        if search:  # the same figure the terminal's comparison table prints
            expected = 100 * (winner["capacity_output_tok_s"]["search"] / search - 1)
            assert base["winner_gain_pct"]["search"] == pytest.approx(expected)

    published = run_cli("publish", "--campaign", "demo", "--json", env=env)
    assert published.returncode == 0, published.stderr
    [pub] = _one_object(published)["publications"]
    assert (pub["campaign"], pub["deployment"], pub["trial"]) == ("demo", "demo", winner["trial"])
    assert pub["config"] == winner["config"]

    again = run_cli("tune", *FAST, "--json", env=env)  # the stored result, now published
    assert again.returncode == 0, again.stderr[-2000:]
    stored = _one_object(again)
    assert stored["already_completed"] is True and stored["published"] is True
    assert stored["published_trial"] == winner["trial"]

    listed = run_cli("campaigns", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    [row] = _one_object(listed)["campaigns"]
    assert (row["campaign"], row["status"], row["trials"]) == ("demo", "completed", 3)

    out = tmp_path / "report"
    reported = run_cli("report", "--campaign", "demo", "--out", str(out), "--json", env=env)
    assert reported.returncode == 0, reported.stderr
    written = _one_object(reported)
    assert Path(written["index"]) == out / "index.html" and (out / "index.html").is_file()

    quarterly = run_cli("quarterly", "--deployment", "demo", "--period", "2026Q4",
                        "--max-trials", "3", "--confirm-top", "1", "--confirm-repeats", "2",
                        "--json", env=env)
    assert quarterly.returncode in (0, 4), quarterly.stderr[-2000:]
    decided = _one_object(quarterly)
    assert decided["exit_code"] == quarterly.returncode
    assert decided["outcome"] in ("published", "kept_incumbent", "no_feasible")
    assert decided["already_decided"] is False
    assert decided["result"]["campaign"] == decided["campaign"] == "2026Q4"
    assert decided["result"]["decision"]["outcome"] == decided["outcome"]
    noop = run_cli("quarterly", "--deployment", "demo", "--period", "2026Q4", "--json", env=env)
    assert noop.returncode == 0 and _one_object(noop)["already_decided"] is True


@pytest.mark.parametrize("args, code, kind, fragment", [
    (["tune", *FAST, "--slo", "ttft_p99<2s"], 2, "ConfigError", "cannot read SLO term"),
    (["report", "--campaign", "nope", "--out", "x"], 2, "NotFoundError", "no campaign named"),
    (["publish", "--campaign", "nope"], 2, "NotFoundError", "no campaign named"),
    (["tune", "--trails", "3"], 2, "UsageError", "No such option: --trails"),
])
def test_a_failing_json_run_prints_one_error_object(env: dict[str, str], args: list[str],
                                                    code: int, kind: str, fragment: str) -> None:
    before = _rows(env["AUTOTUNE_DATABASE_URL"])
    plain = run_cli(*args, env=env)
    proc = run_cli(*args, "--json", env=env)
    assert proc.returncode == plain.returncode == code, proc.stderr
    error = _one_object(proc)["error"]
    assert (error["exit_code"], error["type"]) == (code, kind)
    assert fragment in error["message"]
    # The same one line on stderr as without --json.
    assert proc.stderr.strip() == plain.stderr.strip() == f"autotune: error: {error['message']}"
    assert _rows(env["AUTOTUNE_DATABASE_URL"]) == before


def test_quarterly_json_error_keeps_its_exit_code(tmp_path: Path) -> None:
    """An unreachable database is an infrastructure failure to the scheduler: exit 5."""
    env = {"AUTOTUNE_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/none"}
    proc = run_cli("quarterly", "--deployment", "demo", "--json", env=env)
    assert proc.returncode == 5, proc.stderr
    error = _one_object(proc)["error"]
    assert error["exit_code"] == 5
    assert proc.stderr.strip() == f"autotune: error: {error['message']}"


def test_a_rerun_that_differs_is_refused_or_starts_a_new_campaign(env: dict[str, str]) -> None:
    url = env["AUTOTUNE_DATABASE_URL"]
    first = run_cli("tune", *FAST, env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    before = _rows(url)

    slo = run_cli("tune", *FAST, "--slo", "ttft_p99<=1s", env=env)
    assert slo.returncode == 2, slo.stderr
    [line] = [x for x in slo.stderr.splitlines() if x.startswith("autotune: error")]
    assert "SLO ttft_p99<=2000ms,tpot_p99<=50ms (asked ttft_p99<=1000ms)" in line, line
    assert "--new-campaign" in line and "'demo.2'" in line
    assert "Top trials" not in slo.stdout  # the old result is not printed as if it were this
    assert _rows(url) == before

    space = run_cli("tune", *FAST, "--space", "batch", "--json", env=env)
    assert space.returncode == 2
    assert "search_space 'chat' (asked 'batch')" in _one_object(space)["error"]["message"]
    layout = run_cli("tune", *FAST, "--gpus", "4", env=env)  # another deployment spec
    assert layout.returncode == 2 and "gpu_count 8 (asked 4)" in layout.stderr
    assert _rows(url) == before

    # Another sampler changes which configs are proposed, not what was measured: the stored
    # result, with one warning line saying the sampler asked for was not used.
    sampler = run_cli("tune", *FAST, "--sampler", "random", "--json", env=env)
    assert sampler.returncode == 0, sampler.stderr[-2000:]
    assert _one_object(sampler)["already_completed"] is True
    assert [x for x in sampler.stderr.splitlines() if x.startswith("autotune: warning")] == [
        "autotune: warning: campaign 'demo' was run with --sampler tpe; its result is shown as "
        "it is (give --new-campaign to search with --sampler random)"]
    same = run_cli("tune", *FAST, env=env)
    assert same.returncode == 0 and "warning" not in same.stderr, same.stderr[-2000:]
    assert _rows(url) == before

    fresh = run_cli("tune", *FAST, "--slo", "ttft_p99<=1s", "--new-campaign", "--json", env=env)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    made = _one_object(fresh)
    assert (made["campaign"], made["slo_ms"], made["already_completed"]) == (
        "demo.2", {"ttft_p99_ms": 1000.0}, False)
    assert "starting campaign 'demo.2'" in fresh.stderr


def test_version() -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"autotune {version('autotune')}"


def test_bash_completion_script_completes_commands_and_options() -> None:
    script = run_cli("completion", "bash")
    assert script.returncode == 0, script.stderr
    assert "complete -o default -F _autotune_completion autotune" in script.stdout
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash on this machine")
    # Source the script in a real bash and run its function as bash would on <TAB>.
    complete = ('source /dev/stdin; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); '
                '_autotune_completion "$AUTOTUNE"; printf "%s\\n" "${COMPREPLY[@]}"')
    for words, expected in ((["autotune", "qua"], "quarterly"),
                            (["autotune", "tune", "--new-c"], "--new-campaign")):
        proc = subprocess.run([bash, "-c", complete, "bash", *words], input=script.stdout,
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "AUTOTUNE": AUTOTUNE})
        assert proc.stdout.split() == [expected], (words, proc.stdout, proc.stderr)
    unknown = run_cli("completion", "tcsh")
    assert unknown.returncode == 2 and "no completion for shell 'tcsh'" in unknown.stderr

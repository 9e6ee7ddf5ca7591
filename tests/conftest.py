from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.settings import ENGINE_PYTHON_ENV, engine_python_env

ROOT = Path(__file__).resolve().parents[1]
AUTOTUNE = str(Path(sys.executable).with_name("autotune"))
# An admin URL on the machine's PostgreSQL; each test gets a database of its own.
PG_ADMIN_URL = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/postgres")


# `make test` runs the suite on every core (pytest-xdist). The tests of each group run one after
# the other on one worker while the other workers share the rest: two vLLM CPU engines at once
# would share the same cores and start-up timeouts, and local Ray clusters the same CPUs and
# ports. By node id prefix: the scheduler sees node ids, not marks (and xdist's own
# `--dist loadgroup` marks are lost on pytest 9.2, whose node ids it can no longer suffix).
SERIAL_GROUPS = {
    "vllm-engines": (
        "tests/integration/test_multifidelity.py", "tests/integration/test_vllm_campaign.py",
        "tests/capture/test_proxy_vllm.py", "tests/workers/sim/test_calibrate_vllm.py",
        "tests/workers/vllm/test_engine.py", "tests/workers/vllm/test_gpu.py",
        "tests/cli/test_bench_sweep.py::test_a_real_cpu_engine_sweep_and_its_cpu_cost_fit",
    ),
    "ray": (
        "tests/integration/test_campaign.py", "tests/workers/test_ray_progress.py",
        "tests/workers/test_ray_failures.py",
        "tests/cli/test_progress_log.py::test_piped_tune_on_ray_logs_each_workers_steps",
    ),
}


def serial_group(nodeid: str) -> str | None:
    """The group a test runs in, one at a time; None: any worker, any time."""
    for group, prefixes in SERIAL_GROUPS.items():
        if nodeid.startswith(prefixes):
            return group
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Load balancing test by test, except that a serial group is one unit of work."""
    from xdist.scheduler import LoadScopeScheduling

    class SerialGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return serial_group(nodeid) or nodeid

    return SerialGroups(config, log)  # type: ignore[arg-type]


# The public traces vendored in the repository (traces/, with their sources and licences).
TRACES_DIR = ROOT / "traces"


def public_trace(name: str) -> Path:
    """A real public trace from traces/."""
    path = TRACES_DIR / name
    assert path.exists(), f"{path} is missing: the repository vendors it"
    return path


def engine_python() -> str:
    """The interpreter of the vLLM CPU build's venv (`make engine-venv`)."""
    path = engine_python_env() or ""
    if not path or not Path(path).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{ENGINE_PYTHON_ENV} is not set to the vLLM CPU venv; run `make test`")
        pytest.skip("vLLM CPU build not installed (make engine-venv)")
    return path


def vllm_processes() -> list[str]:
    """Command lines of vLLM processes still running on this machine: API servers, and the
    engine cores and workers they start (which rename themselves VLLM::EngineCore and so on).
    A script that only imports vllm (another test checking vLLM's parser) is not one."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            server = " -m vllm.entrypoints" in cmd or "/vllm serve " in cmd
            if (server or cmd.startswith("VLLM::")) and state != "Z":
                found.append(cmd)
    return found


def get_json(url: str, deadline_s: float = 60) -> dict:
    """GET a JSON document from a local server that may still be starting."""
    import json
    import time
    import urllib.request

    deadline = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.loads(r.read())  # type: ignore[no-any-return]
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AUTOTUNE, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=cwd)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'autotune.db'}"


@pytest.fixture
def migrated_sqlite(sqlite_url: str) -> str:
    from autotune.storage.db import upgrade

    upgrade(sqlite_url)
    return sqlite_url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.integration)])
def database_url(request: pytest.FixtureRequest) -> str:
    """An empty database, once on SQLite and once on the real PostgreSQL server: for what
    must hold on both backends autotune supports."""
    name = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    return str(request.getfixturevalue(name))


def _pg_connect():  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty database on the real PostgreSQL server, dropped afterwards."""
    import psycopg

    try:
        admin = _pg_connect()
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"PostgreSQL not reachable at {PG_ADMIN_URL}: {exc}")
    name = f"autotune_test_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()

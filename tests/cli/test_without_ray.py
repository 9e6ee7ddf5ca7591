"""Ray is an optional extra (`autotune[ray]`): without it the core works, and every path that
needs it says so in one line and exits 2, having written nothing.

Ray is made absent by a `ray` package first on PYTHONPATH that fails its import the way a
missing one does, so these tests run in the dev venv, which has the real Ray.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli

MISSING = "needs Ray, which is not installed: pip install 'autotune[ray]'"


@pytest.fixture(scope="module")
def no_ray(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    stub = tmp_path_factory.mktemp("no-ray")
    (stub / "ray").mkdir()
    (stub / "ray" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'ray'\", name='ray')\n")
    return {"PYTHONPATH": str(stub)}


@pytest.fixture(scope="module")
def tuned(no_ray: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database where the demo deployment was tuned inline, without Ray."""
    db = tmp_path_factory.mktemp("db") / "a.db"
    env = {**no_ray, "AUTOTUNE_DATABASE_URL": f"sqlite:///{db}"}
    assert run_cli("db", "upgrade", env=env).returncode == 0
    proc = run_cli("tune", "--trials", "3", "--confirm-top", "0", "--max-scale", "64", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return db


def _campaigns(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT name, status FROM autotune_campaigns ORDER BY id").fetchall()


def _assert_missing_ray(proc) -> None:  # type: ignore[no-untyped-def]
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("autotune: error: ") and MISSING in lines[0], \
        proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == "", proc.stdout


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def test_the_stub_hides_ray(no_ray: dict[str, str]) -> None:
    proc = _python("import ray", no_ray)
    assert proc.returncode == 1 and "No module named 'ray'" in proc.stderr, proc.stderr


# Every module but the Ray executor and its progress relay, which only it imports (and the
# migrations' env.py, which runs only under alembic).
CORE = """
import importlib, pkgutil
import autotune
names = [m.name for m in pkgutil.walk_packages(autotune.__path__, "autotune.")]
assert {"autotune.workers.sim.backend", "autotune.api.app", "autotune.search.spaces"} <= set(names)
for name in names:
    if name not in ("autotune.workers.ray_executor", "autotune.workers.ray_progress",
                    "autotune.migrations.env"):
        importlib.import_module(name)
"""


def test_the_core_imports_without_ray(no_ray: dict[str, str]) -> None:
    proc = _python(CORE, no_ray)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_tune_executor_ray_without_ray(no_ray: dict[str, str], tuned: Path) -> None:
    before = _campaigns(tuned)
    proc = run_cli("tune", "--trials", "3", "--campaign", "on-ray", "--executor", "ray",
                   env={**no_ray, "AUTOTUNE_DATABASE_URL": f"sqlite:///{tuned}"})
    _assert_missing_ray(proc)
    assert _campaigns(tuned) == before


@pytest.mark.parametrize("how", ["flag", "setting"])
def test_quarterly_on_a_ray_cluster_without_ray(no_ray: dict[str, str], tuned: Path,
                                                how: str) -> None:
    before = _campaigns(tuned)
    args = ["--ray-address", "127.0.0.1:1"] if how == "flag" else []
    env = {**no_ray, "AUTOTUNE_DATABASE_URL": f"sqlite:///{tuned}", "USER": "scheduler"}
    if how == "setting":
        env["AUTOTUNE_RAY_ADDRESS"] = "127.0.0.1:1"
    proc = run_cli("quarterly", "--deployment", "demo", "--period", "2030Q1", "--max-trials", "3",
                   *args, env=env)
    _assert_missing_ray(proc)
    assert _campaigns(tuned) == before

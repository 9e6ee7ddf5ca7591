"""`autotune dashboard` serves optuna-dashboard on the campaign's own storage."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.workers.vllm.process import free_port
from tests.conftest import AUTOTUNE, get_json, run_cli

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, int]]:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    env = {"AUTOTUNE_DATABASE_URL": url}
    assert run_cli("db", "upgrade", env=env).returncode == 0
    tune = run_cli("tune", "--campaign", "c9", "--trials", "4", env=env)
    assert tune.returncode == 0, tune.stderr
    port = free_port()
    proc = subprocess.Popen([AUTOTUNE, "dashboard", "--port", str(port)],
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        yield url, port
    finally:
        proc.terminate()
        proc.wait(timeout=20)




def test_dashboard_shows_the_campaign_with_constraints(served: tuple[str, int]) -> None:
    _, port = served
    studies = get_json(f"http://127.0.0.1:{port}/api/studies")["study_summaries"]
    assert [s["study_name"] for s in studies] == ["demo:c9"]
    detail = get_json(f"http://127.0.0.1:{port}/api/studies/{studies[0]['study_id']}?after=0")
    trials = detail["trials"]
    assert len(trials) >= 4
    for t in trials:
        # SLO ceilings, error rate, engine start, interaction rules: the list the dashboard reads.
        assert len(t["constraints"]) == 5
        assert any(a["key"] == "role" for a in t["user_attrs"])
    assert detail["best_trials"], "a feasible best trial is shown"

"""`autotune dashboard` serves optuna-dashboard on the campaign's own storage."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import AUTOTUNE, run_cli


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, int]]:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    env = {"AUTOTUNE_DATABASE_URL": url}
    assert run_cli("db", "upgrade", env=env).returncode == 0
    tune = run_cli("tune", "--campaign", "c9", "--trials", "4", env=env)
    assert tune.returncode == 0, tune.stderr
    port = _free_port()
    proc = subprocess.Popen([AUTOTUNE, "dashboard", "--port", str(port)],
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        yield url, port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _get_json(url: str, deadline_s: float = 30) -> dict:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.loads(r.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_dashboard_shows_the_campaign_with_constraints(served: tuple[str, int]) -> None:
    _, port = served
    studies = _get_json(f"http://127.0.0.1:{port}/api/studies")["study_summaries"]
    assert [s["study_name"] for s in studies] == ["demo:c9"]
    detail = _get_json(f"http://127.0.0.1:{port}/api/studies/{studies[0]['study_id']}?after=0")
    trials = detail["trials"]
    assert len(trials) >= 4
    for t in trials:
        # SLO ceilings, error rate, engine start, interaction rules: the list the dashboard reads.
        assert len(t["constraints"]) == 5
        assert any(a["key"] == "role" for a in t["user_attrs"])
    assert detail["best_trials"], "a feasible best trial is shown"

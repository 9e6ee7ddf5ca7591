"""Resume through the real command: `autotune tune` killed with SIGKILL mid-campaign and started
again, on PostgreSQL (three kills) and SQLite (one); a second live job on a campaign is refused.

The simulator is paced (AUTOTUNE_SIM__REPLAY_DELAY_S) so a trial lasts about a second, and the
lease is short (AUTOTUNE_CAMPAIGN_LEASE_S) so a restart takes a dead job's campaign over quickly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from autotune.storage.models import Campaign, Trial
from tests.campaign_checks import check_complete
from tests.conftest import run_cli
from tests.procs import MARK, mark_fixture, start_tune, wait_gone  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration

TRIALS = 10
TUNE = ["tune", "--deployment", "llama", "--campaign", "r1", "--model", "Llama-3.1-8B",
        "--gpu", "H100-80GB", "--gpus", "1", "--max-model-len", "8192",
        "--slo", "ttft_p99<=2s,tpot_p99<=100ms", "--trials", str(TRIALS), "--max-scale", "8",
        "--bisect-steps", "0"]


class Progress:
    """What the database shows of a running campaign: our rows, Optuna's RUNNING trials."""

    def __init__(self, url: str) -> None:
        self.engine = sa.create_engine(url)

    def rows(self) -> int:
        with self.engine.connect() as conn:
            return conn.scalar(sa.select(sa.func.count()).select_from(Trial)) or 0

    def running(self) -> set[int]:
        with self.engine.connect() as conn:
            if not sa.inspect(conn).has_table("trials"):
                return set()
            return set(conn.scalars(sa.text("SELECT number FROM trials WHERE state = 'RUNNING'")))

    def close(self) -> None:
        self.engine.dispose()


def _env(url: str, mark: str) -> dict[str, str]:
    return {"AUTOTUNE_DATABASE_URL": url, MARK: mark, "AUTOTUNE_CAMPAIGN_LEASE_S": "2",
            "AUTOTUNE_SIM__REPLAY_DELAY_S": "0.3", "AUTOTUNE_LOG_LEVEL": "WARNING"}


def _kill_when(proc: subprocess.Popen[bytes], mark: str, ready: Callable[[], bool],
               timeout_s: float = 120) -> None:
    """SIGKILL the job the moment `ready()` holds, and wait until nothing of it is left."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert proc.poll() is None, "the job ended before it could be killed"
        assert time.monotonic() < deadline, "the moment to kill never came"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert not wait_gone(mark)


def _steady_trial(progress: Progress, other_than: set[int],
                  running_s: float = 0.5) -> Callable[[], bool]:
    """True once a trial (not one of `other_than`) has been RUNNING for `running_s`: an engine
    trial mid-measurement (a paced simulated one runs for a second or more), not a rule
    rejection. A rejection is told within milliseconds, but its dozen SQLite commits can keep it
    RUNNING for 100 ms on a busy machine, and a kill then can land between its row and its tell
    (repaired as told, not re-queued)."""
    since: dict[int, float] = {}

    def ready() -> bool:
        now, t = progress.running() - other_than, time.monotonic()
        for number in set(since) - now:
            del since[number]
        for number in now:
            since.setdefault(number, t)
        return any(t - first >= running_s for first in since.values())
    return ready


def _finish(url: str, mark: str, log: Path) -> None:
    done = run_cli(*TUNE, env=_env(url, mark), timeout=300)
    log.with_suffix(".out").write_text(done.stdout)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming the campaign" in done.stderr
    assert "Winner beside the baselines" in done.stdout


def test_killed_three_times_on_postgres(postgres_url: str, mark: str, tmp_path: Path) -> None:
    env = _env(postgres_url, mark)
    assert run_cli("db", "upgrade", env=env).returncode == 0
    progress = Progress(postgres_url)
    try:
        # 1: mid-trial, after a few trials are stored.
        job = start_tune(TUNE, env, tmp_path / "job1")
        steady = _steady_trial(progress, set())
        _kill_when(job, mark, lambda: progress.rows() >= 3 and steady())
        stale = progress.running()
        # 2: the instant another row lands (between our row and Optuna's tell, or just after).
        job = start_tune(TUNE, env, tmp_path / "job2")
        before = progress.rows()
        _kill_when(job, mark, lambda: progress.rows() > before)
        # 3: mid-trial again, in a trial the third job started.
        stale |= progress.running()
        job = start_tune(TUNE, env, tmp_path / "job3")
        steady = _steady_trial(progress, stale)
        _kill_when(job, mark, steady)
        assert progress.rows() < TRIALS  # there was work left for the last job
    finally:
        progress.close()
    _finish(postgres_url, mark, tmp_path / "job4")
    _, trials = check_complete(postgres_url, "llama", "r1", TRIALS)
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert len(failed) >= 2, "the mid-trial kills left no trial to re-queue"


def test_killed_once_on_sqlite(sqlite_url: str, mark: str, tmp_path: Path) -> None:
    env = _env(sqlite_url, mark)
    assert run_cli("db", "upgrade", env=env).returncode == 0
    progress = Progress(sqlite_url)
    try:
        job = start_tune(TUNE, env, tmp_path / "job1")
        steady = _steady_trial(progress, set())
        _kill_when(job, mark, lambda: progress.rows() >= 2 and steady())
    finally:
        progress.close()
    _finish(sqlite_url, mark, tmp_path / "job2")
    _, trials = check_complete(sqlite_url, "llama", "r1", TRIALS)
    assert any(t.state.name == "FAIL" for t in trials)


def test_a_second_live_job_is_refused(sqlite_url: str, mark: str, tmp_path: Path) -> None:
    env = _env(sqlite_url, mark)
    assert run_cli("db", "upgrade", env=env).returncode == 0
    progress = Progress(sqlite_url)
    first = start_tune(TUNE, env, tmp_path / "first")
    try:
        deadline = time.monotonic() + 120
        while progress.rows() < 1:
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        second = run_cli(*TUNE, env=env, timeout=120)
        assert first.poll() is None, "the first job ended before the second was refused"
        assert second.returncode == 2
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and "is being run by another live job" in lines[0], lines
        assert first.wait(timeout=300) == 0, (tmp_path / "first.err").read_text()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        progress.close()
    check_complete(sqlite_url, "llama", "r1", TRIALS)
    engine = sa.create_engine(sqlite_url)
    with engine.connect() as conn:  # the refused job changed nothing on the campaign
        assert conn.scalar(sa.select(Campaign.executor)) == "inline"
    engine.dispose()

"""The Ray executor under failure and contention, through `autotune tune --executor ray`: a
worker process killed mid-trial is an infrastructure failure retried once, and two trials never
share a GPU. A local Ray with logical GPUs and the paced simulator; the kill is a real SIGKILL
of the actor's process, found by its Ray process title."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from autotune.storage.models import Trial
from tests.campaign_checks import check_complete
from tests.conftest import run_cli
from tests.procs import MARK, mark_fixture, marked, start_tune  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration

TRIALS = 8


def _tune(campaign: str) -> list[str]:
    return ["tune", "--deployment", "llama", "--campaign", campaign, "--model", "Llama-3.1-8B",
            "--gpu", "H100-80GB", "--gpus", "1", "--max-model-len", "8192",
            "--slo", "ttft_p99<=2s,tpot_p99<=100ms", "--trials", str(TRIALS),
            "--max-scale", "8", "--bisect-steps", "0", "--executor", "ray", "--parallel", "4"]


def _env(url: str, mark: str, **extra: str) -> dict[str, str]:
    return {"AUTOTUNE_DATABASE_URL": url, MARK: mark, "AUTOTUNE_SIM__REPLAY_DELAY_S": "0.5",
            **extra}


LOOPBACK = ("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")


def _listening(pids: set[int]) -> list[str]:
    """Local addresses these processes listen on (TCP)."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3] for line in out.splitlines()
            if any(f"pid={pid}," in line for pid in pids)]


def _measured(url: str) -> list[Trial]:
    engine = sa.create_engine(url)
    try:
        with Session(engine) as s:
            return [t for t in s.scalars(sa.select(Trial))
                    if t.state != "rejected" and t.repeat_of is None]
    finally:
        engine.dispose()


def test_a_worker_killed_mid_trial_is_retried_and_the_campaign_completes(
        migrated_sqlite: str, mark: str, tmp_path: Path) -> None:
    job = start_tune(_tune("lost"), _env(migrated_sqlite, mark), tmp_path / "job")
    try:
        deadline = time.monotonic() + 180
        while True:  # wait for trials side by side, then kill one of their processes
            actors = [pid for pid, cmd in marked(mark).items() if "TrialActor.run" in cmd]
            if len(actors) >= 2:
                break
            assert job.poll() is None, (tmp_path / "job.err").read_text()[-3000:]
            assert time.monotonic() < deadline, "no two trials ever ran side by side"
            time.sleep(0.1)
        listening = _listening(set(marked(mark)))
        assert listening and all(a.startswith(LOOPBACK) for a in listening), listening
        victim = actors[0]
        os.kill(victim, signal.SIGKILL)
        assert job.wait(timeout=300) == 0, (tmp_path / "job.err").read_text()[-3000:]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    err = (tmp_path / "job.err").read_text()
    lost = re.findall(r"trial (\d+): Ray worker lost.*retrying once", err)
    assert len(lost) == 1, err[-3000:]
    rows, _ = check_complete(migrated_sqlite, "llama", "lost", TRIALS)
    retried = rows[int(lost[0])]
    assert retried.failure_class != "infrastructure"  # the second attempt was measured
    assert victim not in {t.worker.get("pid") for t in rows.values()}


def test_never_two_engines_on_one_gpu(migrated_sqlite: str, mark: str, tmp_path: Path) -> None:
    # Four trials asked for, two logical GPUs, one GPU per trial.
    done = run_cli(*_tune("gpus"), env=_env(migrated_sqlite, mark,
                                              AUTOTUNE_RAY_LOGICAL_GPUS="2"), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    trials = _measured(migrated_sqlite)
    assert len(trials) == TRIALS
    spans = []
    for t in trials:
        assert t.worker.get("gpus") in ("0", "1"), t.worker  # one GPU, granted by Ray
        assert t.started_at is not None
        spans.append((t.started_at, t.started_at + timedelta(seconds=t.start_s + t.measure_s),
                      t.worker["gpus"], t.number))
    overlapping = [(a, b) for i, a in enumerate(spans) for b in spans[i + 1:]
                   if a[0] < b[1] and b[0] < a[1]]
    assert overlapping, "no trials ran side by side: nothing was checked"
    shared = [(a[3], b[3], a[2]) for a, b in overlapping if a[2] == b[2]]
    assert not shared, f"trials ran at once on one GPU: {shared}"

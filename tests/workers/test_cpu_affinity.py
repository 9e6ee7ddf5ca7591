"""Keeping a CPU engine's other processes off its worker's cores, on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from autotune.workers.vllm.cpu_affinity import isolate_workers, on_cores
from autotune.workers.vllm.process import group_pids

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                                reason="needs two cores to keep one for a worker")

# A group like an engine's: the leader (an API server) with a thread of its own, and a child that
# binds itself to one core the way vLLM's CPU worker binds its OpenMP thread.
_LEADER = """
import os, subprocess, sys, threading, time
bind = sys.argv[1] == "bind"
child = ("import os, time\\n" + ("os.sched_setaffinity(0, {%d})\\n" % min(os.sched_getaffinity(0))
                                  if bind else "") + "time.sleep(60)")
subprocess.Popen([sys.executable, "-c", child])
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
time.sleep(60)
"""


def _group(bind: bool) -> subprocess.Popen[bytes]:
    leader = subprocess.Popen([sys.executable, "-c", _LEADER, "bind" if bind else "free"],
                              start_new_session=True)
    bound = {frozenset({min(os.sched_getaffinity(0))})}
    deadline = time.monotonic() + 20
    # Up when the leader has its child and its thread, and a binding child has bound itself.
    while (len(group_pids(leader.pid)) < 2 or len(os.listdir(f"/proc/{leader.pid}/task")) < 2
           or (bind and bound not in _affinities(leader.pid).values())):
        assert time.monotonic() < deadline, "the test's process group did not come up"
        time.sleep(0.05)
    return leader


def _affinities(pgid: int) -> dict[int, set[frozenset[int]]]:
    return {pid: {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")}
            for pid in group_pids(pgid)}


@pytest.fixture
def groups():
    started: list[subprocess.Popen[bytes]] = []
    yield lambda bind: started.append(_group(bind)) or started[-1]
    for leader in started:
        os.killpg(leader.pid, 9)
        leader.wait()


def test_everything_but_the_bound_worker_moves_off_its_core(groups) -> None:
    leader = groups(True)
    allowed = os.sched_getaffinity(0)
    worker_core = min(allowed)
    rest = isolate_workers(leader.pid)
    assert rest == allowed - {worker_core}
    seen = _affinities(leader.pid)
    workers = [pid for pid in seen if seen[pid] == {frozenset({worker_core})}]
    assert len(workers) == 1 and workers[0] != leader.pid
    for pid, affs in seen.items():
        if pid != workers[0]:  # the leader's threads too, not only its main one
            assert affs == {frozenset(rest)}, (pid, affs)


def test_nothing_changes_when_no_worker_is_bound(groups) -> None:
    leader = groups(False)
    before = _affinities(leader.pid)
    assert isolate_workers(leader.pid) == set()
    assert _affinities(leader.pid) == before


def test_on_cores_moves_the_calling_thread_and_restores_it() -> None:
    before = os.sched_getaffinity(0)
    core = max(before)
    with on_cores({core}):
        assert os.sched_getaffinity(0) == {core}
    assert os.sched_getaffinity(0) == before
    with on_cores(set()):  # nothing to keep to: left alone
        assert os.sched_getaffinity(0) == before

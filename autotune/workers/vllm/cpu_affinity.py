"""Keep a CPU-build engine's worker cores for its worker.

vLLM's CPU build binds each worker's OpenMP threads to cores (VLLM_CPU_OMP_THREADS_BIND=auto; on
a 2-core VM: one worker on core 0) but leaves the API server and the engine-core process, which
polls without sleeping, free to run anywhere, and the replay client too. Whenever the kernel put
one of them on the worker's core the decode step doubled, so everything else is kept to the
other cores (the measurements: docs/benchmarks/replay-client.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from autotune.workers.vllm.process import group_pids

log = logging.getLogger("autotune.vllm")


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:  # it exited meanwhile
        return []


def _affinity(tid: int) -> set[int] | None:
    try:
        return os.sched_getaffinity(tid)
    except OSError:
        return None


def isolate_workers(pgid: int) -> set[int]:
    """Pin every thread of the group's processes that vLLM did not bind onto the cores its
    workers were not bound to; returns those cores (empty: no worker is bound to a part of the
    machine, or nothing is left beside it, and nothing was changed)."""
    if not hasattr(os, "sched_setaffinity"):
        return set()
    allowed = os.sched_getaffinity(0)
    pids = group_pids(pgid)
    bound = {pid: aff for pid in pids if (aff := _affinity(pid)) is not None and aff < allowed}
    worker_cores = set().union(*bound.values()) if bound else set()
    rest = allowed - worker_cores
    if not worker_cores or not rest:
        return set()
    for pid in pids:
        if pid in bound:
            continue
        for tid in _threads(pid):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, rest)
    log.info("engine worker(s) on cores %s; API server, engine core and client kept to %s",
             sorted(worker_cores), sorted(rest))
    return rest


@contextlib.contextmanager
def on_cores(cores: set[int]) -> Iterator[None]:
    """Run the calling thread (and the processes it starts meanwhile) on `cores`, if any."""
    if not cores:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)

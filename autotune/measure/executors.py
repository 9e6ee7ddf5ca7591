"""The executor plug-in point: where trials run.

An executor takes TrialSpecs and hands back TrialOutcomes; the study controller keeps at most
`slots` trials in flight. Implementations are found by name through the `autotune.executors`
entry-point group: `inline` (here: one trial at a time in this process) and `ray`
(autotune.workers.ray_executor: one Ray actor per trial, asking for the trial's GPUs).

Contract:
- `open(slots, gpus_per_trial)` acquires resources; `close()` releases them and is safe to
  call twice. `slots` is the wish; the executor sets `self.slots` to what it can run at once.
- `submit(spec)` never blocks on the trial itself.
- `wait()` blocks until at least one submitted trial has finished and returns those outcomes.
  A trial that crashed in the worker comes back as an outcome with a failure_class
  ("worker_error" for a bug, "infrastructure" for a lost worker), never as an exception.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import traceback
from abc import ABC, abstractmethod
from importlib.metadata import entry_points
from typing import Any

from autotune.domain.records import TrialOutcome
from autotune.errors import ConfigError
from autotune.measure.backends import load_backend
from autotune.measure.capacity import run_trial
from autotune.measure.trial_spec import TrialSpec
from autotune.vocabulary import FailureClass

log = logging.getLogger("autotune.executors")


class Executor(ABC):
    name: str = ""

    def __init__(self, **options: object) -> None:
        self.options = options
        self.slots = 1

    @abstractmethod
    def open(self, slots: int, gpus_per_trial: int) -> None: ...

    @abstractmethod
    def submit(self, spec: TrialSpec) -> None: ...

    @abstractmethod
    def wait(self) -> list[TrialOutcome]: ...

    @abstractmethod
    def close(self) -> None: ...


def _worker_info() -> dict[str, object]:
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}


def execute_trial(spec: TrialSpec) -> TrialOutcome:
    """Run one trial where this is called (in-process or inside a worker); never raises."""
    started, worker = time.time(), _worker_info()
    where: dict[str, Any] = {"started_at_epoch_s": started, "worker": worker}
    t0 = time.monotonic()
    try:
        return run_trial(spec, load_backend(spec.backend, **spec.backend_options)).model_copy(
            update=where)
    except Exception as exc:  # a bug in a backend must cost one trial, not the campaign
        log.error("%s trial %d crashed in the worker: %s", spec.study_name, spec.trial_number,
                  traceback.format_exc())
        return TrialOutcome.failed(spec.trial_number, FailureClass.WORKER_ERROR,
                                   f"{type(exc).__name__}: {exc}",
                                   measure_s=time.monotonic() - t0, started_at_epoch_s=started,
                                   worker=worker)


class InlineExecutor(Executor):
    """Runs trials one after another in this process: no parallelism, no Ray."""

    name = "inline"

    def open(self, slots: int, gpus_per_trial: int) -> None:
        self.slots = 1
        self._queue: list[TrialSpec] = []

    def submit(self, spec: TrialSpec) -> None:
        self._queue.append(spec)

    def wait(self) -> list[TrialOutcome]:
        return [execute_trial(self._queue.pop(0))] if self._queue else []

    def close(self) -> None:
        self._queue = []


def load_executor(name: str, **options: object) -> Executor:
    eps = {ep.name: ep for ep in entry_points(group="autotune.executors")}
    if name not in eps:
        raise ConfigError(f"unknown executor {name!r}; available: {', '.join(sorted(eps))}")
    return eps[name].load()(**options)  # type: ignore[no-any-return]

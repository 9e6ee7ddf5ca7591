"""Progress events: what a campaign is doing while no trial has finished yet.

The controller, the confirmation and the capacity search `emit` events; whoever runs them
chooses where the events go with `reporting(sink)` (a context variable, so a trial run inline in
the controller's thread reports its replay steps too). A trial run on a Ray worker runs in
another process: there the executor sets a sink that carries the events back, and hands them to
the driver's sink (autotune.workers.ray_progress). Without a sink, `emit` does nothing.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

LOGGER = "autotune.progress"


@dataclass(frozen=True)
class TrialStarted:
    study: str
    number: int
    role: str
    fidelity: str
    gpu_hours_spent: float  # by the search before this trial (the budget's view)


@dataclass(frozen=True)
class ReplayStep:
    """A replay starting inside a trial's capacity search."""

    study: str  # a confirmation run's study ends in ':confirm' and `number` is the run's id
    number: int
    phase: str  # "ladder" or "bisect"
    step: int  # 1-based within the phase
    of: int  # the phase's steps (the ladder's rungs; the bisection's most steps)
    rate_scale: float  # multiplier of the trace's recorded arrival rate
    offered_req_s: float  # the request rate this replay offers


@dataclass(frozen=True)
class ConfirmRun:
    """A confirmation run starting (capacity None) or finished."""

    study: str
    run: int  # 1-based
    of: int
    trial: int  # the confirmed trial's number
    role: str
    seed: int
    capacity_output_tok_s: float | None = None
    failure: str | None = None


@dataclass(frozen=True)
class SearchStopped:
    study: str
    reason: str
    trials: int
    gpu_hours: float


Event = TrialStarted | ReplayStep | ConfirmRun | SearchStopped
Sink = Callable[[Event], None]

_sink: ContextVar[Sink | None] = ContextVar("autotune_progress_sink", default=None)


def emit(event: Event) -> None:
    sink = _sink.get()
    if sink is not None:
        sink(event)


@contextmanager
def reporting(sink: Sink) -> Iterator[None]:
    token = _sink.set(sink)
    try:
        yield
    finally:
        _sink.reset(token)


def describe(event: Event) -> str:
    """The event as one log line."""
    if isinstance(event, TrialStarted):
        return f"{event.study} trial {event.number} ({event.role}, {event.fidelity}): started"
    if isinstance(event, ReplayStep):
        confirming = event.study.endswith(":confirm")  # numbered from 1, as ConfirmRun says
        return (f"{event.study} {'run' if confirming else 'trial'} "
                f"{event.number + confirming}: {event.phase} step {event.step}/{event.of}, "
                f"x{event.rate_scale:.3g} ({event.offered_req_s:.3g} req/s offered)")
    if isinstance(event, ConfirmRun):
        head = (f"{event.study} run {event.run}/{event.of}: trial {event.trial} ({event.role}), "
                f"seed {event.seed}")
        if event.capacity_output_tok_s is None and event.failure is None:
            return f"{head}: started"
        return (f"{head}: finished, capacity {event.capacity_output_tok_s or 0:,.0f} output tok/s"
                + (f" ({event.failure})" if event.failure else ""))
    return (f"{event.study}: search stopped ({event.reason}) after {event.trials} trials, "
            f"{event.gpu_hours:.3g} GPU-hours")


def progress_logger() -> logging.Logger:
    """The logger progress lines go to: INFO reaches stderr at the default level (WARNING),
    as a log line; a level raised above WARNING (ERROR) silences them too."""
    logger = logging.getLogger(LOGGER)
    root = logging.getLogger().getEffectiveLevel()
    logger.setLevel(logging.INFO if root <= logging.WARNING else root)
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False  # the root's handler would print it twice at INFO
    return logger


def duration_text(seconds: float) -> str:
    """Seconds as 45s, 12m05s or 3h20m."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"

"""Progress events of trials on Ray workers, carried back to the driver.

A trial's capacity search runs in its worker process, where `autotune.measure.progress.emit` has no
sink of the driver's. The worker sends each event to a small inbox actor, fire and forget (a
lost event, or an inbox that is gone, never holds up or fails a trial); the driver keeps one
`take` call pending on the inbox and waits on it alongside its trials, so an event reaches the
driver's sink as soon as it arrives, with no polling interval. Before a trial returns, its
worker waits briefly for its last event to be delivered: the driver reads a trial's steps
before its outcome.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

import ray
from ray.exceptions import RayError

from autotune.measure import progress

log = logging.getLogger("autotune.executors.ray")

# Events kept for a driver that does not read them (a few per replay, so many trials' worth):
# the oldest go first; memory stays bounded.
INBOX_EVENTS = 10_000
# How long a worker waits at a trial's end for its last event to reach the inbox.
FLUSH_S = 5.0


@ray.remote(num_cpus=0)
class ProgressInbox:
    """Events from the workers, held until the driver takes them (an asyncio actor: a pending
    `take` does not block `put`)."""

    def __init__(self, limit: int = INBOX_EVENTS) -> None:
        self._events: deque[progress.Event] = deque(maxlen=limit)
        self._arrived = asyncio.Event()

    async def put(self, event: progress.Event) -> None:
        self._events.append(event)
        self._arrived.set()

    async def take(self, wait: bool) -> list[progress.Event]:
        """Every event held, in arrival order; with `wait`, once there is at least one (it may
        still come back empty when another `take` got there first)."""
        if wait:
            await self._arrived.wait()
        self._arrived.clear()
        events = list(self._events)
        self._events.clear()
        return events


class WorkerRelay:
    """The worker's sink: sends events to the inbox without waiting for them."""

    def __init__(self, inbox: Any) -> None:
        self.inbox = inbox
        self._last: Any = None

    def send(self, event: progress.Event) -> None:
        try:
            self._last = self.inbox.put.remote(event)
        except Exception as exc:  # a progress line is never worth a trial
            log.debug("progress event not sent: %s", exc)

    def flush(self) -> None:
        """Wait (at most FLUSH_S) until the inbox has the events sent; an inbox that is gone
        or slow only loses them. Actor calls from one caller run in order: the last one done
        means all are."""
        if self._last is not None:
            try:
                ray.wait([self._last], timeout=FLUSH_S)
            except Exception as exc:
                log.debug("progress events not flushed: %s", exc)


class DriverInbox:
    """The driver's end: one pending `take` to wait on beside the trials, and the events it
    brought, for the trials still running."""

    def __init__(self) -> None:
        self.actor: Any = ProgressInbox.remote()  # type: ignore[attr-defined]
        self._pending: Any = None

    def pending(self) -> list[Any]:
        """The ref to include in ray.wait: ready when events arrive (none once it is gone)."""
        if self.actor is None:
            return []
        if self._pending is None:
            self._pending = self.actor.take.remote(True)
        return [self._pending]

    def received(self, ready: list[Any]) -> list[progress.Event]:
        """The events of the pending `take`, if it is among `ready`."""
        if self._pending is None or self._pending not in ready:
            return []
        ref, self._pending = self._pending, None
        return self._get(ref)

    def drain(self) -> list[progress.Event]:
        """Every event delivered so far, without waiting for more."""
        if self.actor is None:
            return []
        return self._get(self.actor.take.remote(False))

    def _get(self, ref: Any) -> list[progress.Event]:
        try:
            return list(ray.get(ref, timeout=FLUSH_S))
        except RayError as exc:  # the inbox died or hangs: trials go on without their steps
            log.warning("progress of trials on Ray workers is no longer reported: %s",
                        str(exc).strip().splitlines()[0] if str(exc).strip() else exc)
            self.close()
            return []

    def close(self) -> None:
        if self.actor is not None:
            try:
                ray.kill(self.actor)
            except (RayError, ValueError) as exc:  # gone already
                log.debug("progress inbox not killed: %s", exc)
        self.actor = self._pending = None

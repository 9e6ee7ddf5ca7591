"""A job's lease on a campaign row: which job runs the campaign, and the proof that it lives.

A campaign row names the job that runs it (`lease_owner`, a token unique to the job) and a
counter that job bumps every `lease_s / 3` seconds from a heartbeat thread (`lease_renewals`).
Another job tells a dead owner from a live one by watching the counter, never by comparing
two machines' clocks (autotune.campaign.claim), and takes the row over with one
compare-and-set UPDATE (claims.take_over). A live owner that cannot write for `lease_s` (a
stalled database) may lose the campaign; its next heartbeat sees that and it stops before
writing another result.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from typing import Any

from sqlalchemy import Engine, update

from autotune.errors import StorageError
from autotune.storage import repo
from autotune.storage.db import session_scope
from autotune.storage.models import Campaign

log = logging.getLogger("autotune.resume")


def owner_token() -> str:
    """A token unique to this job: host, process and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    """This job's hold on one campaign row; renewed by a daemon thread until `finish`."""

    def __init__(self, engine: Engine, campaign_id: int, owner: str, lease_s: float) -> None:
        self.engine, self.campaign_id, self.owner, self.lease_s = engine, campaign_id, owner, lease_s
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _mine(self) -> Any:
        return update(Campaign).where(Campaign.id == self.campaign_id,
                                      Campaign.lease_owner == self.owner)

    def renew(self) -> bool:
        with session_scope(self.engine) as s:
            rows = s.execute(self._mine().values(lease_renewals=Campaign.lease_renewals + 1,
                                                 lease_heartbeat_at=repo.now())).rowcount  # type: ignore[attr-defined]
        if not rows:
            self.lost = True
        return bool(rows)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._beat, name=f"lease-{self.campaign_id}",
                                        daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                if not self.renew():
                    log.error("campaign %d: another job took the campaign over; stopping",
                              self.campaign_id)
                    return
            except Exception as exc:  # a database blip: keep trying until the lease runs out
                log.warning("campaign %d: lease heartbeat failed: %s", self.campaign_id, exc)

    def check(self) -> None:
        """Raise before a write if another job has taken the campaign over."""
        if self.lost:
            raise StorageError(f"campaign {self.campaign_id} was taken over by another job "
                               f"(this one could not renew its lease for {self.lease_s:g} s); "
                               "this job stops without writing more")

    def finish(self, status: str, message: str | None, wall_s: float) -> None:
        """Record how the campaign ended and let go of it (only if it is still ours)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with session_scope(self.engine) as s:
            rows = s.execute(self._mine().values(
                status=status, message=message, finished_at=repo.now(), wall_s=wall_s,
                lease_owner=None)).rowcount  # type: ignore[attr-defined]
        if not rows:
            log.error("campaign %d: not ours any more; its status was left to its new owner",
                      self.campaign_id)

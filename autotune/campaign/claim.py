"""Claiming a campaign: create it, resume it where its job died, or refuse it to a second job.

A job that finds the campaign held by another (autotune.storage.lease) watches the holder's
counter for one lease period: if it moves, the holder is alive and the job is refused; if it
does not, the holder is dead and the job takes the campaign over (storage.claims.take_over).
A resume must ask for the campaign as stored (resume_settings.check_same_settings).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from autotune.campaign.resume_settings import check_same_settings
from autotune.errors import CampaignBusyError, ConfigError, StorageError
from autotune.storage import claims
from autotune.storage.lease import Lease, owner_token

if TYPE_CHECKING:
    from autotune.campaign.study.request import CampaignRequest

log = logging.getLogger("autotune.resume")


@dataclass
class Claim:
    campaign_id: int
    lease: Lease
    created: bool  # a new campaign (False: a resumed one)

    def abandon(self) -> None:
        """Undo the claim when the job cannot start: a new campaign leaves no trace."""
        claims.release(self.lease.engine, self.campaign_id, self.lease.owner,
                       delete=self.created)


def _create(engine: Engine, request: CampaignRequest, owner: str) -> int | None:
    r = request
    return claims.create_campaign(
        engine, r.deployment, owner, r.backend_options.get("model_path"),
        name=r.campaign, slo=r.slo.to_dict(), trace_ref=r.trace_ref,
        trace_digest=r.trace.digest, backend=r.backend, executor=r.executor,
        search_space=r.search_space, study_name=r.study_name, max_trials=r.max_trials,
        seed=r.seed, screen_backend=r.screen.backend if r.screen else None,
        screen_top=r.screen.top if r.screen else None)


def claim_campaign(engine: Engine, request: CampaignRequest, lease_s: float) -> Claim:
    """Create the campaign, or take over one whose job is dead; refuse one a live job runs."""
    owner = owner_token()
    created = _create(engine, request, owner)
    if created is not None:
        return Claim(created, Lease(engine, created, owner, lease_s), created=True)
    c = claims.find(engine, request.deployment.name, request.campaign)
    if c is None:
        raise StorageError(f"campaign {request.campaign!r} could neither be created nor "
                           "found; check the database")
    if c.status == "completed":
        raise ConfigError(f"campaign {request.campaign!r} of deployment "
                          f"{request.deployment.name!r} is already completed")
    check_same_settings(c, request)
    c_id, seen = c.id, (c.lease_owner, c.lease_renewals)
    if seen[0] is not None:
        # Owned: alive if its counter moves within one lease period, dead if it does not.
        deadline = time.monotonic() + lease_s
        while time.monotonic() < deadline:
            time.sleep(min(lease_s / 6, max(deadline - time.monotonic(), 0)))
            now = claims.holder(engine, c_id)
            assert now is not None
            if now != seen:
                break
    if not claims.take_over(engine, c_id, request.executor, owner, seen):
        now = claims.holder(engine, c_id)
        holder = now[0] if now is not None else None
        who = f"another live job ({holder})" if holder else "another job that has just let go"
        raise CampaignBusyError(f"campaign {request.campaign!r} of deployment "
                                f"{request.deployment.name!r} is being run by {who}; wait for it "
                                "to finish or stop it, then run this again")
    log.warning("%s: resuming the campaign (previous job %s)", request.study_name,
                seen[0] or "stopped")
    return Claim(c_id, Lease(engine, c_id, owner, lease_s), created=False)

"""The writes and reads by which a job claims a campaign row: create it held by the job, read
who holds it, take it over from a dead holder, let go of it. When to do which is the
campaign's policy (autotune.campaign.claim); each statement here is atomic on SQLite and
PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, select, update
from sqlalchemy.exc import IntegrityError

from autotune.domain.deployment import DeploymentSpec
from autotune.storage import repo
from autotune.storage.db import session_scope
from autotune.storage.models import Campaign, Deployment


def create_campaign(engine: Engine, deployment: DeploymentSpec, owner: str,
                    model_path: str | None, **columns: Any) -> int | None:
    """A new running campaign held by `owner` (its deployment created if new); returns its id,
    or None where a campaign of that name exists (created by another job a moment ago)."""
    try:
        with session_scope(engine) as s:
            dep = repo.ensure_deployment(s, deployment)
            # The model its real engines load is what its published YAML will name.
            if model_path:
                dep.model_path = str(model_path)
            c = Campaign(deployment_id=dep.id, **columns, status="running",
                         started_at=repo.now(), lease_owner=owner, lease_renewals=0,
                         lease_heartbeat_at=repo.now())
            s.add(c)
            s.flush()
            return c.id
    except IntegrityError:  # another job created it a moment ago: treat it as existing
        return None


def find(engine: Engine, deployment: str, name: str) -> Campaign | None:
    """The campaign `name` of a deployment, detached with its columns loaded."""
    with session_scope(engine) as s:
        return s.scalar(select(Campaign).join(Deployment).where(
            Campaign.name == name, Deployment.name == deployment))


def holder(engine: Engine, campaign_id: int) -> tuple[str | None, int] | None:
    """Who holds the campaign and how often it has renewed (lease_owner, lease_renewals);
    None where the row is gone."""
    with session_scope(engine) as s:
        c = s.get(Campaign, campaign_id)
        return (c.lease_owner, c.lease_renewals) if c is not None else None


def take_over(engine: Engine, campaign_id: int, executor: str, owner: str,
              seen: tuple[str | None, int]) -> bool:
    """Hold the campaign for `owner` if its holder and counter are still `seen` (one
    compare-and-set: of two jobs taking it over at once, one wins); False if they moved."""
    with session_scope(engine) as s:
        rows = s.execute(update(Campaign).where(
            Campaign.id == campaign_id, Campaign.lease_owner.is_(None) if seen[0] is None
            else Campaign.lease_owner == seen[0], Campaign.lease_renewals == seen[1]).values(
            lease_owner=owner, lease_renewals=seen[1] + 1, lease_heartbeat_at=repo.now(),
            status="running", message=None, finished_at=None, executor=executor)).rowcount  # type: ignore[attr-defined]
    return bool(rows)


def release(engine: Engine, campaign_id: int, owner: str, *, delete: bool) -> None:
    """Let go of a campaign `owner` still holds: delete its row (one just created, which must
    leave no trace) or leave it unheld."""
    with session_scope(engine) as s:
        c = s.get(Campaign, campaign_id)
        if c is not None and c.lease_owner == owner:
            if delete:
                s.delete(c)
            else:
                c.lease_owner = None

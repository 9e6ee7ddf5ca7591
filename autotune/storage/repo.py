"""Queries and writes on the project's tables, one function per thing the system asks."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from autotune.domain import catalogue
from autotune.domain.deployment import DeploymentSpec
from autotune.domain.trial_record import TrialRecord
from autotune.errors import ConfigError, NotFoundError, SettingError
from autotune.storage.models import (
    Campaign,
    Confirmation,
    Deployment,
    Publication,
    TraceFile,
    Trial,
)

if TYPE_CHECKING:
    from autotune.traffic.trace import Trace

TRACE_KINDS = ("imported", "captured")
_SPEC_FIELDS = ("model", "gpu", "gpu_count", "tensor_parallel_size", "max_model_len",
                "traffic_profile", "allow_accuracy_affecting")


def now() -> datetime:
    return datetime.now(UTC)


def spec_of(dep: Deployment) -> DeploymentSpec:
    return DeploymentSpec(name=dep.name, **{f: getattr(dep, f) for f in _SPEC_FIELDS})


def get_deployment(session: Session, name: str) -> Deployment:
    dep = session.scalar(select(Deployment).where(Deployment.name == name))
    if dep is None:
        raise NotFoundError(f"no deployment named {name!r}; tune one first with "
                            f"`autotune tune --deployment {name} ...`")
    return dep


def ensure_deployment(session: Session, spec: DeploymentSpec) -> Deployment:
    """The deployment with this name, created if new; refuses a different spec under one name."""
    dep = session.scalar(select(Deployment).where(Deployment.name == spec.name))
    if dep is None:
        dep = Deployment(name=spec.name, created_at=now(),
                         **{f: getattr(spec, f) for f in _SPEC_FIELDS})
        session.add(dep)
        session.flush()
        return dep
    stored = spec_of(dep)
    diffs = [f"{f} {getattr(stored, f)!r} (asked {getattr(spec, f)!r})" for f in _SPEC_FIELDS
             if getattr(stored, f) != getattr(spec, f)]
    if diffs:
        raise SettingError("deployment {name!r} already exists with {diffs}; use its stored "
                           "settings or another {deployment} name", name=spec.name,
                           diffs=", ".join(diffs))
    return dep


def find_campaign(session: Session, name: str, deployment: str | None = None) -> Campaign:
    query = select(Campaign).join(Deployment).where(Campaign.name == name)
    if deployment:
        query = query.where(Deployment.name == deployment)
    found = list(session.scalars(query))
    if not found:
        where = f" for deployment {deployment!r}" if deployment else ""
        raise NotFoundError(f"no campaign named {name!r}{where}; list them with "
                            "`autotune campaigns`")
    if len(found) > 1:
        names = ", ".join(sorted(c.deployment.name for c in found))
        raise SettingError("campaign {name!r} exists for several deployments ({names}); "
                           "add {deployment}", name=name, names=names)
    return found[0]


def list_campaigns(session: Session) -> list[Campaign]:
    return list(session.scalars(select(Campaign).order_by(Campaign.started_at)))


def measured_trials(campaign: Campaign) -> list[Trial]:
    """The trials measured by the campaign's backend: all of them, except a multi-fidelity
    campaign's screening trials (simulated: never published, never ranked with real ones)."""
    return [t for t in campaign.trials if t.fidelity == campaign.backend]


def best_trial(campaign: Campaign) -> Trial | None:
    feasible = [t for t in measured_trials(campaign) if t.feasible]
    return max(feasible, key=lambda t: t.capacity_output_tok_s) if feasible else None


CONFIRMED, BEST_SINGLE, NONE_CONFIRMED, NO_FEASIBLE = (
    "confirmed", "best_single_measurement", "none_confirmed", "no_feasible")


@dataclass(frozen=True)
class Winner:
    """Which trial a campaign publishes, and on what grounds: the one function that `publish`,
    the quarterly decision, the API and the reports all ask.

    basis: CONFIRMED (best lower confidence bound among the confirmation rows; `confirmation`
    is its row), BEST_SINGLE (no confirmation ran: the best single measurement),
    NONE_CONFIRMED (confirmation ran and no config's bound was above 0: nothing to publish, a
    lucky single measurement is what confirmation exists to refuse), NO_FEASIBLE."""

    basis: str
    trial: Trial | None = None
    confirmation: Confirmation | None = None


def choose_winner(campaign: Campaign) -> Winner:
    if campaign.confirmations:
        found = [c for c in campaign.confirmations if c.winner]
        return (Winner(CONFIRMED, found[0].trial, found[0]) if found
                else Winner(NONE_CONFIRMED))
    best = best_trial(campaign)
    return Winner(BEST_SINGLE, best) if best is not None else Winner(NO_FEASIBLE)


def confirmation_of(campaign: Campaign, config: dict[str, Any]) -> Confirmation | None:
    """The campaign's confirmation of this config: a baseline equal to a top config shares its
    runs (candidates are distinct configs), so it is found by config, not by trial."""
    return next((c for c in campaign.confirmations if c.engine_config == config), None)


def add_trial(session: Session, campaign: Campaign, **values: Any) -> Trial:
    values.setdefault("fidelity", campaign.backend)
    trial = Trial(campaign_id=campaign.id, finished_at=now(), **values)
    session.add(trial)
    session.flush()
    return trial


def served_model(dep: Deployment) -> str | None:
    """The `model` a deployment's published YAML names: the path or id its real engines loaded,
    else its catalogue model's Hugging Face id; None where neither is known (tiny-llama tuned
    on the simulator only)."""
    return dep.model_path or catalogue.model(dep.model).hf_id or None


def publish(session: Session, campaign: Campaign, trial: Trial, *, period_label: str,
            published_by: str, note: str | None, accuracy_affecting: list[dict[str, Any]],
            served: str | None = None) -> Publication:
    """A new current publication; `served`: the model it names (default: the deployment's now,
    fixed here so that a later campaign with another model path leaves it as published);
    `accuracy_affecting`: its numerics changes, judged by the caller now and kept, so its
    document never changes after (release.publish.publish_trial judges them)."""
    pub = Publication(deployment_id=campaign.deployment_id, campaign_id=campaign.id,
                      trial_id=trial.id, engine_config=dict(trial.engine_config),
                      period_label=period_label, published_at=now(), published_by=published_by,
                      note=note, served_model=served or served_model(campaign.deployment),
                      accuracy_affecting=accuracy_affecting)
    session.add(pub)
    session.flush()
    return pub


def publications(session: Session, deployment: Deployment) -> list[Publication]:
    """Newest first."""
    return list(session.scalars(
        select(Publication).where(Publication.deployment_id == deployment.id)
        .order_by(Publication.published_at.desc(), Publication.id.desc())))


def current_publication_key(session: Session, deployment: Deployment) -> tuple[int, datetime]:
    """The current publication's id and time, one small query (what an ETag needs)."""
    found = session.execute(
        select(Publication.id, Publication.published_at)
        .where(Publication.deployment_id == deployment.id)
        .order_by(Publication.published_at.desc(), Publication.id.desc()).limit(1)).first()
    if found is None:
        raise NotFoundError(f"deployment {deployment.name!r} has no published config yet; "
                            "publish one with `autotune publish --campaign NAME`")
    return int(found[0]), found[1]


def current_publication(session: Session, deployment: Deployment) -> Publication:
    pub = session.get(Publication, current_publication_key(session, deployment)[0])
    assert pub is not None  # read in this transaction
    return pub


def current_publications(session: Session) -> list[Publication]:
    """Each deployment's current (newest) publication, by deployment name."""
    newest: dict[int, Publication] = {}
    for pub in session.scalars(select(Publication).order_by(
            Publication.published_at.desc(), Publication.id.desc())):
        newest.setdefault(pub.deployment_id, pub)
    return sorted(newest.values(), key=lambda p: p.deployment.name)


def register_trace(session: Session, trace: Trace, path: Path, fmt: str, kind: str,
                   deployment: Deployment | None = None) -> TraceFile:
    """Record a trace file (its digest, time range, rows, statistics). Idempotent: the same path
    and digest give the row already there (given a deployment it had none of, it gains it)."""
    from autotune.traffic.stats import trace_stats

    if kind not in TRACE_KINDS:
        raise ConfigError(f"trace kind {kind!r} is unknown; use {' or '.join(TRACE_KINDS)}")
    where = str(path.resolve())
    found = session.scalar(select(TraceFile).where(TraceFile.path == where,
                                                   TraceFile.digest == trace.digest))
    if found is not None:
        if deployment is not None and found.deployment_id not in (None, deployment.id):
            raise ConfigError(f"trace {where} is already registered for deployment "
                              f"{found.deployment.name if found.deployment else '?'!r}")
        if deployment is not None:
            found.deployment_id = deployment.id
            session.flush()
        return found
    start = trace.start_epoch_s
    end = start + float(trace.arrival_s[-1]) if start is not None and len(trace) else start
    row = TraceFile(deployment_id=deployment.id if deployment else None, path=where,
                    digest=trace.digest, format=fmt, kind=kind, rows=len(trace),
                    start_epoch_s=start, end_epoch_s=end, duration_s=trace.duration_s,
                    stats=trace_stats(trace), registered_at=now())
    session.add(row)
    session.flush()
    return row


def traces_for(session: Session, deployment: Deployment | None,
               since_epoch_s: float | None = None) -> list[TraceFile]:
    """Registered traces, newest traffic first (by last arrival, then registration); of one
    deployment, or all with None. since_epoch_s: only those with traffic at or after it (a
    trace without wall-clock times then never matches)."""
    query = select(TraceFile)
    if deployment is not None:
        query = query.where(TraceFile.deployment_id == deployment.id)
    if since_epoch_s is not None:
        query = query.where(TraceFile.end_epoch_s >= since_epoch_s)
    return list(session.scalars(query.order_by(TraceFile.end_epoch_s.desc().nulls_last(),
                                               TraceFile.registered_at.desc(),
                                               TraceFile.id.desc())))


def trial_record(row: Trial) -> TrialRecord:
    """The record of a stored trial (a resumed campaign's, or a finished one's report): its
    constraint values as floats, None where the JSON holds no number (a non-finite value is
    stored as null)."""
    return TrialRecord(number=row.number, role=row.role, state=row.state, feasible=row.feasible,
                       capacity_output_tok_s=row.capacity_output_tok_s,
                       config=dict(row.engine_config), repeat_of=row.repeat_of,
                       latency=row.latency, failure_class=row.failure_class,
                       failure_message=row.failure_message,
                       constraints={k: float(v) if isinstance(v, int | float) else None
                                    for k, v in row.constraints.items()},
                       fidelity=row.fidelity)

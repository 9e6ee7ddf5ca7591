"""`run_quarterly`: one run of the scheduled re-tune from a validated QuarterlyRequest: report
the quarter's decision, decide a campaign whose job died after its search, or run (resume) the
quarter's campaign and decide it (autotune.campaign.quarterly holds the decisions). What the request
leaves out (SLO, backend, space, trace) comes from the deployment's latest campaign, and is
checked here as a campaign's own would be, the space's searchability included.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from autotune.campaign import quarterly as q
from autotune.campaign.requests import QuarterlyRequest
from autotune.campaign.resume_settings import roofline_profile_change, step_model_change
from autotune.campaign.step_model import step_model_line, step_model_runs
from autotune.campaign.study import CampaignRequest, StudyController
from autotune.campaign.study.observer import LoggedOutput
from autotune.domain.records import CapacitySearch
from autotune.domain.slo import SLO
from autotune.errors import AutotuneError, ConfigError, SettingError, SettingText
from autotune.measure.backend_options import backend_options
from autotune.measure.backends import available_backends
from autotune.measure.executors import load_executor
from autotune.search.spaces.deployment import check_searchable, deployment_space, space_name_for
from autotune.settings import Settings, get_settings
from autotune.storage import repo
from autotune.storage.db import open_database, session_scope
from autotune.storage.models import Campaign, Deployment
from autotune.storage.study_settings import stored_roofline_profiles, stored_step_model
from autotune.traffic.formats import load_trace
from autotune.traffic.shape import ShapeSpec, shape
from autotune.traffic.trace import Trace

DAY_S = 86_400


class QuarterlyOutput(Protocol):
    """What a quarterly run shows; the front end decides how."""

    def say(self, line: str) -> None:
        """A line of the run's own output."""

    def warn(self, line: str) -> None:
        """A line beside the output (the traffic picked, a registered trace skipped)."""

    def progress(self) -> Any:
        """The trials' observer for the campaign's run (closed after it)."""

    def decided(self, session: Session, decision: q.Decision, campaign: Campaign,
                already_decided: bool) -> None:
        """The quarter's decision, read in `session` before it commits."""


def run_quarterly(request: QuarterlyRequest, *, settings: Settings | None = None,
                  out: QuarterlyOutput | None = None) -> int:
    """The exit code (autotune.campaign.quarterly's: 0 published, kept or already decided; 4 no
    feasible config); bad input raises before the database is written. `settings` and `out`
    default as run_campaign's do."""
    settings = settings or get_settings()
    out = out or LoggedOutput()
    label = request.period_label
    now = datetime.now(UTC)
    url = settings.database_url
    engine = open_database(url)
    with session_scope(engine) as s:
        dep = repo.get_deployment(s, request.deployment)
        spec = repo.spec_of(dep)
        run = q.plan_run(s, dep, label, request.force)
        if run.done is not None:
            d = q.reported(run.done)
            out.say(f"{request.deployment} {label}: already decided by campaign {d.campaign!r}: "
                    f"{d.outcome}: {d.note} (--force runs it again)")
            out.decided(s, d, run.done, already_decided=True)
            s.rollback()  # read only
            return q.EXIT_OK
        if run.decide_only:  # its job died after confirming: only the decision is missing
            campaign = repo.find_campaign(s, run.campaign, request.deployment)
            return _decide(s, request, campaign, out)
        latest = s.scalars(select(Campaign).where(Campaign.deployment_id == dep.id)
                           .order_by(Campaign.id.desc())).first()
        refs = q.references(s, dep, run.campaign)
        stored_trace = None if request.trace else (
            _registered_trace(s, dep, now, request.days, out)
            or (latest.trace_ref if latest else None))
        stored_slo = latest.slo if latest else None
        backend = request.backend or (latest.backend if latest else "sim")
        space = latest.search_space if latest else None
        s.rollback()  # read only
    slo = request.slo if request.slo is not None else _stored_slo(stored_slo)
    if backend not in available_backends():
        raise ConfigError(f"unknown backend {backend!r}; available: "
                          f"{', '.join(available_backends())}")
    options = backend_options(backend, settings, request.model_path, request.engine_args)
    space_name = space_name_for(spec, space)
    bound = deployment_space(space_name, spec)
    check_searchable(bound, backend)
    # Before the trace is read: a missing Ray is one line, not one after the traffic summary.
    address = request.ray_address or settings.ray_address
    executor = "ray" if address else "inline"
    runner = load_executor(executor, **({"address": address, "logical_gpus": backend == "sim",
                                         "logical_gpu_count": settings.ray_logical_gpus}
                                        if address else {}))
    trace_path = request.trace or (Path(stored_trace) if stored_trace else None)
    if trace_path is None or not trace_path.exists():
        raise SettingError("no trace for deployment {deployment!r}{gone}; give {trace} FILE",
                           deployment=request.deployment,
                           gone=f" ({trace_path} is gone)" if trace_path else "")
    traffic = _window(load_trace(trace_path), request.days, out)
    study_request = CampaignRequest(
        deployment=spec, campaign=run.campaign, slo=slo, trace=traffic,
        trace_ref=str(trace_path.resolve()), backend=backend, executor=executor,
        parallel=request.parallel, search_space=space_name, max_trials=request.max_trials,
        search=CapacitySearch(), backend_options=options, budget=request.budget(),
        confirm=request.confirm_plan(0), references=refs, period=label)
    # A job that died mid-campaign is resumed here: on the step model it ran on, or refused.
    if refusal := step_model_change(stored_step_model(url, study_request.study_name),
                                    study_request, new_campaign=False):
        raise refusal
    out.say(f"{request.deployment} {label}: campaign {run.campaign!r}, {len(traffic)} requests, "
            f"{len(refs)} references enqueued first "
            f"({', '.join(r.tag for r in refs) or 'none'})")
    if backend == "sim":
        runs = step_model_runs(bound, spec, options)
        out.say(step_model_line(runs))
        if change := roofline_profile_change(stored_roofline_profiles(url, study_request.study_name),
                                             [label for _, label in runs], run.campaign):
            out.warn(str(SettingText("autotune: warning: " + change.template + "; its remaining "
                                     "trials and the confirmation runs, on which the decision "
                                     "rests, run on the latter", **change.values)))
    watcher = out.progress()
    try:
        campaign_id = StudyController(engine, url, study_request, runner, observer=watcher,
                                      lease_s=settings.campaign_lease_s).run()
    finally:
        watcher.close()
    with session_scope(engine) as s:
        ran = s.get(Campaign, campaign_id)
        assert ran is not None
        return _decide(s, request, ran, out)


def _decide(session: Session, request: QuarterlyRequest, campaign: Campaign,
            out: QuarterlyOutput) -> int:
    decision = q.decide(session, campaign, margin_pct=request.margin_pct,
                        period=request.period_label, published_by=request.published_by)
    out.decided(session, decision, campaign, already_decided=False)
    return int(decision.exit_code)


def _window(loaded: Trace, days: float, out: QuarterlyOutput) -> Trace:
    """The last `days` days of the trace where it has wall-clock times, else all of it."""
    if loaded.start_epoch_s is None:
        out.warn(f"autotune: trace {loaded.name} has no wall-clock times, so its last {days:g} "
                 f"days cannot be placed; using the whole file ({len(loaded)} requests)")
        return loaded
    windowed = shape(loaded, ShapeSpec(last_days=days))
    start = datetime.fromtimestamp(windowed.start_epoch_s or loaded.start_epoch_s, UTC)
    out.warn(f"autotune: traffic: {len(windowed)} of {len(loaded)} requests, the last {days:g} "
             f"days (from {start:%Y-%m-%d %H:%M} UTC)")
    return windowed


def _registered_trace(session: Session, dep: Deployment, now: datetime, days: float,
                      out: QuarterlyOutput) -> str | None:
    """The newest registered trace of the deployment with traffic in the last `days` days whose
    file is still there; None if there is none (the caller falls back to the latest campaign)."""
    for row in repo.traces_for(session, dep, since_epoch_s=now.timestamp() - days * DAY_S):
        if Path(row.path).exists():
            out.warn(f"autotune: registered trace #{row.id}: {row.path}")
            return str(row.path)
        out.warn(f"autotune: registered trace #{row.id} {row.path} is gone; skipped")
    return None


def _stored_slo(stored: Any) -> SLO:
    if not stored:
        raise SettingError("no SLO: the deployment has no campaign to take it from; give {slo}")
    try:
        return SLO.from_dict(stored)
    except SettingError as exc:  # its settings named as this one's are
        raise SettingError("the latest campaign's SLO {stored!r} cannot be read ("
                           + exc.template + "); give {slo}", **{**exc.values, "stored": stored}
                           ) from None
    except (AutotuneError, ValueError, TypeError, KeyError) as exc:
        raise SettingError("the latest campaign's SLO {stored!r} cannot be read ({why}); give "
                           "{slo}", stored=stored, why=exc) from None

"""`run_campaign`: one tuning campaign from a validated TuneRequest, with its per-path campaigns
if asked for. Everything is checked before the database is written: the request's own values
when it was built (autotune.campaign.requests), here what needs the settings, the catalogue, the
space, the trace and the stored campaigns. What it shows goes through a CampaignOutput, so the
CLI (or another front end) decides how it looks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from autotune.campaign import per_path as pp
from autotune.campaign.multifidelity import Screening
from autotune.campaign.requests import TuneRequest
from autotune.campaign.resume_settings import (
    differences,
    roofline_profile_change,
    sampler_change,
    step_model_change,
)
from autotune.campaign.step_model import step_model_line, step_model_runs
from autotune.campaign.study import CampaignRequest, StudyController, comparisons
from autotune.campaign.study.observer import LoggedOutput
from autotune.domain.deployment import DeploymentSpec
from autotune.domain.records import CapacitySearch
from autotune.errors import AutotuneError, ConfigError, SettingError, SettingText
from autotune.measure.backend_options import backend_options
from autotune.measure.backends import available_backends
from autotune.measure.executors import load_executor
from autotune.search.samplers import make_sampler
from autotune.search.spaces.deployment import (
    check_searchable,
    deployment_space,
    space_name_for,
    space_summary,
)
from autotune.settings import Settings, get_settings
from autotune.storage import repo
from autotune.storage.db import open_database, session_scope
from autotune.storage.models import Campaign, Deployment
from autotune.storage.studies import load_study
from autotune.storage.study_settings import stored_roofline_profiles, stored_sampler, stored_step_model
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE


class Observer(Protocol):
    def close(self) -> None: ...


class CampaignOutput(Protocol):
    """What a campaign shows while it runs; the front end decides how."""

    def say(self, line: str) -> None:
        """A line of the campaign's own output (the space, the step model, ...)."""

    def warn(self, line: str | SettingText) -> None:
        """A line beside the output (a renamed campaign, a changed sampler: a SettingText, its
        settings named as the front end names them)."""

    def progress(self) -> Any:
        """The trials' observer for one campaign's run (closed after it)."""

    def result(self, session: Session, campaign: Campaign, url: str,
               already_completed: bool) -> None:
        """The main campaign's result, read in `session` (before any path campaign runs)."""


@dataclass(frozen=True)
class CampaignRun:
    """What ran: the main campaign, and per path (--per-path) its summary."""

    campaign_id: int
    already_completed: bool
    path_campaign: str | None = None  # the path campaigns' shared name
    paths: tuple[pp.PathSummary, ...] = ()


def run_campaign(request: TuneRequest, *, settings: Settings | None = None,
                 out: CampaignOutput | None = None) -> CampaignRun:
    """Check what the request needs besides its own values, run the campaign (or report a
    completed one), then its path campaigns, on the database of `settings` (default: the
    AUTOTUNE_ environment's); `out` shows its lines and progress (default: the `autotune`
    logger, no display)."""
    settings = settings or get_settings()
    out = out or LoggedOutput()
    backend, search_backend = request.campaign_backend, request.search_backend
    # An unknown executor, or one whose package is missing (Ray), is refused before anything
    # is shown.
    exec_options: dict[str, object] = {}
    if request.executor == "ray":
        # Logical GPUs only stand in for real ones when no real engine needs them.
        exec_options = {"address": request.ray_address or settings.ray_address,
                        "logical_gpus": backend == "sim",
                        "logical_gpu_count": settings.ray_logical_gpus}
    load_executor(request.executor, **exec_options)
    options = backend_options(backend, settings, request.model_path, request.engine_args,
                              backend_setting="confirm" if request.screen else "backend")
    screening = None
    if request.screen is not None:
        screening = Screening(backend=request.screen, top=request.screen_top_or_default,
                              options=backend_options(request.screen, settings, None, []))
    spec = DeploymentSpec.build(name=request.deployment, model=request.model, gpu=request.gpu,
                                gpu_count=request.gpu_count,
                                tensor_parallel_size=request.tensor_parallel_size
                                or request.gpu_count,
                                max_model_len=request.max_model_len,
                                traffic_profile=request.traffic_profile,
                                allow_accuracy_affecting=request.allow_accuracy_affecting)
    space_name = space_name_for(spec, request.space)
    bound = deployment_space(space_name, spec)
    check_searchable(bound, search_backend)
    for line in space_summary(bound, spec):
        out.say(line)
    runs = []
    if "sim" in (backend, request.screen):
        runs = step_model_runs(bound, spec, options if backend == "sim" else
                               screening.options if screening else {})
        out.say(step_model_line(runs))
    make_sampler(request.sampler, bound, seed=request.seed)  # refuse bad input now
    trace_path = request.trace or DEMO_TRACE
    loaded = load_trace(trace_path)
    if backend not in available_backends():
        raise ConfigError(f"unknown backend {backend!r}; available: "
                          f"{', '.join(available_backends())}")
    study_request = CampaignRequest(
        deployment=spec, campaign=request.campaign, slo=request.slo, trace=loaded,
        trace_ref=str(Path(trace_path).resolve()), backend=backend, executor=request.executor,
        parallel=request.parallel, search_space=space_name, sampler=request.sampler,
        max_trials=request.max_trials, seed=request.seed,
        search=CapacitySearch(max_scale=request.max_scale, bisect_steps=request.bisect_steps,
                              max_send_lag_p99_ms=request.max_send_lag_ms),
        backend_options=options, budget=request.budget(),
        confirm=request.confirm_plan(request.seed), screen=screening)
    url = settings.database_url
    engine = open_database(url)  # after the checks: a bad value is named before the database
    if request.new_campaign:
        with session_scope(engine) as s:
            name = free_campaign_name(s, request.campaign, spec.name)
            s.rollback()  # read only
        if name != request.campaign:
            out.warn(f"autotune: campaign {request.campaign!r} exists; starting campaign "
                     f"{name!r}")
            study_request = dataclasses.replace(study_request, campaign=name)
    plans: list[pp.PathPlan] = []
    path_requests: list[CampaignRequest] = []
    if request.tunes_paths:
        plans = pp.plan_paths(loaded, request.path_groups(),
                              min_requests=request.min_path_requests)
        path_requests = pp.path_requests(study_request, plans, space=request.space,
                                         slos=request.path_slos)
        for sub in path_requests:
            make_sampler(request.sampler, deployment_space(sub.search_space, sub.deployment),
                         seed=request.seed)
    done = check_existing(engine, [study_request, *path_requests])
    for r in [study_request, *path_requests]:  # a completed one's result is shown as it is
        if r.study_name in done:
            continue
        if refusal := step_model_change(stored_step_model(url, r.study_name), r):
            raise refusal  # before any trial runs: nothing is written
        if change := roofline_profile_change(stored_roofline_profiles(url, r.study_name),
                                             [label for _, label in runs], r.campaign):
            raise SettingError(change.template + ", so its trials would not compare; give "
                               "{new_campaign} to start another", **change.values)

    def run(r: CampaignRequest) -> int:
        if r.study_name in done:
            change = sampler_change(stored_sampler(url, r.study_name), r.sampler, r.campaign,
                                    completed=True)
            if change:
                out.warn(SettingText("autotune: warning: " + change.template, **change.values))
            out.say(f"campaign {r.campaign!r} of deployment {r.deployment.name!r} already "
                    "completed" + ("; its result:" if not request.tunes_paths else ""))
            return done[r.study_name]
        live = out.progress()
        controller = StudyController(engine, url, r, load_executor(request.executor,
                                                                   **exec_options),
                                     observer=live, lease_s=settings.campaign_lease_s)
        try:
            return int(controller.run())
        finally:
            live.close()

    campaign_id = run(study_request)
    already = study_request.study_name in done
    with session_scope(engine) as s:
        result = s.get(Campaign, campaign_id)
        assert result is not None
        out.result(s, result, url, already)
        single = pp.single_config(result)
        s.rollback()  # read only
    if not request.tunes_paths:
        return CampaignRun(campaign_id, already)
    summaries = _tune_paths(plans, path_requests, single, run, engine, url, spec.name, out)
    return CampaignRun(campaign_id, already, path_requests[0].campaign if path_requests
                       else study_request.campaign, tuple(summaries))


def free_campaign_name(session: Session, name: str, deployment: str) -> str:
    """`name`, or the first of NAME.2, NAME.3, ... that neither the deployment nor its paths'
    deployments (DEPLOYMENT.PATH) hold: a per-path run's campaigns share one name."""
    paths = Deployment.name.startswith(f"{deployment}.", autoescape=True)
    taken = set(session.scalars(select(Campaign.name).join(Deployment).where(
        or_(Deployment.name == deployment, paths))))
    return next(n for n in (name, *(f"{name}.{k}" for k in range(2, 10_000))) if n not in taken)


def check_existing(engine: Any, requests: list[CampaignRequest]) -> dict[str, int]:
    """Refuse, before anything is written, a request that differs from the campaign of its name
    (SLO, trace, space, ...) or from its deployment; returns the study names of the campaigns
    already completed (their result is shown as it is) and their ids."""
    done: dict[str, int] = {}
    with session_scope(engine) as s:
        for r in requests:
            repo.ensure_deployment(s, r.deployment)  # refuses another spec under the name
            try:
                found = repo.find_campaign(s, r.campaign, r.deployment.name)
            except AutotuneError:
                continue
            diffs = differences(found, r)
            if diffs:
                state = "completed" if found.status == "completed" else "started"
                raise SettingError(
                    "campaign {campaign!r} of deployment {deployment!r} was {state} with "
                    "{diffs}; give {new_campaign} to start campaign {free!r} with these "
                    "settings, or run it with its own settings"
                    + (" to see its result" if state == "completed" else " to resume it"),
                    campaign=r.campaign, deployment=r.deployment.name, state=state,
                    diffs=", ".join(diffs),
                    free=free_campaign_name(s, r.campaign, r.deployment.name))
            if found.status == "completed":
                done[r.study_name] = found.id  # reported as it is
            # Any other status: the controller resumes it, unless a live job still runs it.
        s.rollback()  # only a check here (of every deployment, before any is written)
    return done


def _tune_paths(plans: list[pp.PathPlan], requests: list[CampaignRequest],
                single: dict[str, Any] | None, run: Callable[[CampaignRequest], int],
                engine: Any, url: str, parent: str,
                out: CampaignOutput) -> list[pp.PathSummary]:
    """Run each tuned path's campaign (the single config measured beside it); returns the
    paths' summaries. `requests` are the tuned plans' (same order)."""
    for plan in plans:
        if plan.skipped:
            out.say(f"path {plan.path}: not tuned: {plan.skipped}")
    tuned = dict(zip([p.path for p in plans if p.trace is not None], requests, strict=True))
    ids = {path: run(pp.with_single_config(r, single)) for path, r in tuned.items()}
    summaries = []
    with session_scope(engine) as s:
        for plan in plans:
            if plan.path not in tuned:
                summaries.append(pp.summarise(None, plan, parent, []))
                continue
            study = load_study(url, tuned[plan.path].study_name)
            summaries.append(pp.summarise(s.get(Campaign, ids[plan.path]), plan, parent,
                                          comparisons(study)))
        s.rollback()  # read only
    return summaries

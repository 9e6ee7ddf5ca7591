"""`autotune quarterly`: the scheduled re-tune of one deployment (see autotune.quarterly)."""

from __future__ import annotations

import getpass
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from autotune.errors import (
    AutotuneError,
    CampaignBusyError,
    ConfigError,
    InfrastructureError,
    StorageError,
)

log = logging.getLogger("autotune.quarterly")

HELP = """Re-tune a deployment for this quarter and publish the winner if it beats the incumbent.

The period (e.g. 2026Q4) comes from today's date unless given; the campaign is named after it.
Traffic: --trace, else the newest trace registered for the deployment (`traffic import
--deployment`) with traffic in the last --days days (if several overlap the window, only the
newest one is used; they are not merged), else the trace of the deployment's latest campaign;
its last --days days when the trace has wall-clock times, else the whole file. The incumbent
(the current publication) is re-measured first, then the previous campaign's winner and best
configs, then the search runs until --max-trials, --max-gpu-hours or --deadline. The best
configs and the incumbent are then confirmed (re-run with other arrival seeds); the winner (best
90% lower confidence bound) is published only if that bound beats the incumbent's confirmed mean
by --margin-pct. A quarter already decided is a no-op unless --force.

Exit codes: 0 published, kept the incumbent, or already decided (no-op); 2 bad input;
3 another job is running this campaign; 4 no feasible config within the budget (nothing
published); 5 infrastructure failure (database, Ray cluster, workers)."""


def quarterly(
    deployment: Annotated[str, typer.Option(help="Deployment to re-tune (tuned once before).")],
    period: Annotated[str | None, typer.Option(
        help="Quarter label, e.g. 2026Q4 (default: today's quarter).")] = None,
    days: Annotated[float, typer.Option(help="Tune on the trace's last N days.")] = 28.0,
    trace: Annotated[Path | None, typer.Option(
        help="Trace file (default: the newest registered trace overlapping the last --days, "
             "else the latest campaign's trace).")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Run again even if this quarter is already decided.")] = False,
    max_trials: Annotated[int, typer.Option(help="Trials to measure at most.")] = 40,
    max_gpu_hours: Annotated[float | None, typer.Option(
        help="Stop the search after this much engine time x GPUs.")] = None,
    deadline: Annotated[str | None, typer.Option(
        help="Stop the search at this ISO 8601 time (UTC if no zone); confirmation follows.")
    ] = None,
    margin_pct: Annotated[float, typer.Option(
        help="Publish only if the winner's LCB beats the incumbent by this many percent.")] = 2.0,
    ray_address: Annotated[str | None, typer.Option(
        help="Run trials on this Ray cluster (default AUTOTUNE_RAY_ADDRESS; none: inline).")
    ] = None,
    parallel: Annotated[int, typer.Option(help="Trials in flight (Ray).")] = 1,
    slo: Annotated[str | None, typer.Option(
        help="P99 ceilings (default: the latest campaign's).")] = None,
    backend: Annotated[str | None, typer.Option(
        help="sim or vllm (default: the latest campaign's).")] = None,
    model_path: Annotated[str | None, typer.Option(help="vllm backend: the model.")] = None,
    engine_arg: Annotated[list[str] | None, typer.Option(
        help="vllm backend: an extra server argument (repeatable).")] = None,
    confirm_top: Annotated[int, typer.Option(help="Configs to confirm (besides the incumbent).")
                           ] = 3,
    confirm_repeats: Annotated[int, typer.Option(help="Re-runs per confirmed config.")] = 3,
    by: Annotated[str | None, typer.Option(help="Who publishes (default: $USER).")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON object on stdout (keys: docs/reference/json-output.md); "
                       "the tables go to stderr.")] = False,
) -> None:
    from sqlalchemy.exc import OperationalError

    from autotune.cli import output
    from autotune.quarterly import EXIT_BUSY, EXIT_INFRA

    try:
        code, view = _run(deployment=deployment, period=period, days=days, trace=trace,
                          force=force, max_trials=max_trials, max_gpu_hours=max_gpu_hours,
                          deadline=deadline, margin_pct=margin_pct, ray_address=ray_address,
                          parallel=parallel, slo=slo, backend=backend, model_path=model_path,
                          engine_arg=engine_arg or [], confirm_top=confirm_top,
                          confirm_repeats=confirm_repeats, by=by)
    except CampaignBusyError as exc:
        output.error(str(exc), EXIT_BUSY, type(exc).__name__)
        raise typer.Exit(EXIT_BUSY) from None
    except (InfrastructureError, StorageError) as exc:
        output.error(str(exc), EXIT_INFRA, type(exc).__name__)
        raise typer.Exit(EXIT_INFRA) from None
    except OperationalError as exc:  # the database went away mid-run
        output.error(f"database failure: {str(exc.orig or exc).splitlines()[0]}", EXIT_INFRA,
                     "StorageError")
        raise typer.Exit(EXIT_INFRA) from None
    if as_json:
        output.emit(view)
    raise typer.Exit(code)


quarterly.__doc__ = HELP


def _window(loaded: Any, days: float, err: Console) -> Any:
    """The last `days` days of the trace where it has wall-clock times, else all of it."""
    from autotune.traffic.shape import ShapeSpec, shape

    if loaded.start_epoch_s is None:
        err.print(f"autotune: trace {loaded.name} has no wall-clock times, so its last {days:g} "
                  f"days cannot be placed; using the whole file ({len(loaded)} requests)",
                  markup=False, highlight=False, soft_wrap=True)
        return loaded
    windowed = shape(loaded, ShapeSpec(last_days=days))
    start = datetime.fromtimestamp(windowed.start_epoch_s or loaded.start_epoch_s, UTC)
    err.print(f"autotune: traffic: {len(windowed)} of {len(loaded)} requests, the last {days:g} "
              f"days (from {start:%Y-%m-%d %H:%M} UTC)", markup=False, highlight=False)
    return windowed


def _run(*, deployment: str, period: str | None, days: float, trace: Path | None, force: bool,
         max_trials: int, max_gpu_hours: float | None, deadline: str | None, margin_pct: float,
         ray_address: str | None, parallel: int, slo: str | None, backend: str | None,
         model_path: str | None, engine_arg: list[str], confirm_top: int, confirm_repeats: int,
         by: str | None) -> tuple[int, dict[str, Any]]:
    """The exit code and the --json object (keys: docs/reference/json-output.md)."""
    from sqlalchemy import select

    from autotune import budget as budgets
    from autotune import quarterly as q
    from autotune.backends import available_backends
    from autotune.budget import Budget
    from autotune.cli.live import progress_observer
    from autotune.cli.main import (
        _backend_options,
        _db,
        _settings,
        _setup_logging,
        confirm_plan,
        console,
        err,
    )
    from autotune.executors import load_executor
    from autotune.records import CapacitySearch
    from autotune.slo import parse_slo
    from autotune.space import space_name_for
    from autotune.storage import repo
    from autotune.storage.db import session_scope
    from autotune.storage.models import Campaign
    from autotune.study import CampaignRequest, StudyController
    from autotune.traffic.formats import load_trace

    settings = _settings()
    _setup_logging(settings.log_level)
    now = datetime.now(UTC)
    label = q.period_of(period, now)
    deadline_epoch = budgets.parse_deadline(deadline, now)
    if days <= 0:
        raise ConfigError("--days must be positive")
    if max_trials < 3:
        raise ConfigError("--max-trials must be at least 3 (the incumbent or a baseline, and a "
                          "proposal)")
    budgets.check_max_gpu_hours(max_gpu_hours)
    if margin_pct < 0:
        raise ConfigError("--margin-pct must be 0 or more")
    if parallel < 1:
        raise ConfigError("--parallel must be at least 1")
    plan = confirm_plan(confirm_top, confirm_repeats, 0)
    if plan is None:
        raise ConfigError("--confirm-top must be at least 1: the quarterly decision compares "
                          "confirmed capacities")
    publisher = by or getpass.getuser()
    engine, url = _db()
    with session_scope(engine) as s:
        dep = repo.get_deployment(s, deployment)
        spec = repo.spec_of(dep)
        run = q.plan_run(s, dep, label, force)
        if run.done is not None:
            d = q.reported(run.done)
            console.print(f"{deployment} {label}: already decided by campaign {d.campaign!r}: "
                          f"{d.outcome}: {d.note} (--force runs it again)", soft_wrap=True)
            view = _view(s, d, run.done, label, already_decided=True)
            s.rollback()  # read only
            return q.EXIT_OK, view
        if run.decide_only:  # its job died after confirming: only the decision is missing
            campaign = repo.find_campaign(s, run.campaign, deployment)
            return _decided(s, console, q.decide(s, campaign, margin_pct=margin_pct,
                                                 period=label, published_by=publisher), campaign)
        latest = s.scalars(select(Campaign).where(Campaign.deployment_id == dep.id)
                           .order_by(Campaign.id.desc())).first()
        refs = q.references(s, dep, run.campaign)
        defaults = {"slo": latest.slo if latest else None,
                    "backend": latest.backend if latest else "sim",
                    "space": latest.search_space if latest else None,
                    "trace": None if trace else (_registered_trace(s, dep, now, days, err)
                                                 or (latest.trace_ref if latest else None))}
        s.rollback()  # read only
    slo_parsed = parse_slo(slo) if slo else _stored_slo(defaults["slo"])
    backend_name = backend or str(defaults["backend"])
    if backend_name not in available_backends():
        raise ConfigError(f"unknown backend {backend_name!r}; available: "
                          f"{', '.join(available_backends())}")
    backend_options = _backend_options(backend_name, settings, model_path, engine_arg)
    # Before the trace is read: a missing Ray is one line, not one after the traffic summary.
    address = ray_address or settings.ray_address
    executor = "ray" if address else "inline"
    runner = load_executor(executor, **({"address": address, "logical_gpus": backend_name == "sim",
                                         "logical_gpu_count": settings.ray_logical_gpus}
                                        if address else {}))
    trace_path = trace or (Path(str(defaults["trace"])) if defaults["trace"] else None)
    if trace_path is None or not trace_path.exists():
        raise ConfigError(f"no trace for deployment {deployment!r}"
                          + (f" ({trace_path} is gone)" if trace_path else "")
                          + "; give --trace FILE")
    traffic = _window(load_trace(trace_path), days, err)
    space_name = space_name_for(spec, str(defaults["space"]) if defaults["space"] else None)
    request = CampaignRequest(
        deployment=spec, campaign=run.campaign, slo=slo_parsed, trace=traffic,
        trace_ref=str(trace_path.resolve()), backend=backend_name, executor=executor,
        parallel=parallel, search_space=space_name, max_trials=max_trials,
        search=CapacitySearch(), backend_options=backend_options,
        budget=Budget(max_gpu_hours=max_gpu_hours, deadline_epoch_s=deadline_epoch),
        confirm=plan, references=refs, period=label)
    console.print(f"{deployment} {label}: campaign {run.campaign!r}, {len(traffic)} requests, "
                  f"{len(refs)} references enqueued first "
                  f"({', '.join(r.tag for r in refs) or 'none'})", soft_wrap=True)
    watcher = progress_observer(console)  # a scheduled job: log lines; by hand: the live view
    try:
        campaign_id = StudyController(engine, url, request, runner, observer=watcher,
                                      lease_s=settings.campaign_lease_s).run()
    finally:
        watcher.close()
    with session_scope(engine) as s:
        ran = s.get(Campaign, campaign_id)
        assert ran is not None
        return _decided(s, console, q.decide(s, ran, margin_pct=margin_pct, period=label,
                                             published_by=publisher), ran)


def _registered_trace(session: Any, dep: Any, now: datetime, days: float,
                      err: Console) -> str | None:
    """The newest registered trace of the deployment with traffic in the last `days` days whose
    file is still there; None if there is none (the caller falls back to the latest campaign)."""
    from autotune.storage import repo

    for row in repo.traces_for(session, dep, since_epoch_s=now.timestamp() - days * 86_400):
        if Path(row.path).exists():
            err.print(f"autotune: registered trace #{row.id}: {row.path}", markup=False,
                      highlight=False, soft_wrap=True)
            return str(row.path)
        err.print(f"autotune: registered trace #{row.id} {row.path} is gone; skipped",
                  markup=False, highlight=False, soft_wrap=True)
    return None


def _stored_slo(stored: Any) -> Any:
    from autotune.slo import SLO

    if not stored:
        raise ConfigError("no SLO: the deployment has no campaign to take it from; give --slo")
    try:
        return SLO.from_dict(stored)
    except (AutotuneError, ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"the latest campaign's SLO {stored!r} cannot be read ({exc}); give "
                          "--slo") from None


def _decided(session: Any, console: Console, decision: Any,
             campaign: Any) -> tuple[int, dict[str, Any]]:
    from autotune.cli.render import confirmation_table
    from autotune.cli.report import spent_line

    console.print(spent_line(campaign), soft_wrap=True)
    if campaign.confirmations:
        console.print(confirmation_table(campaign.confirmations))
    from autotune.cli.live import log_outside_terminal

    line = f"{campaign.deployment.name} {campaign.period}: {decision.outcome}: {decision.note}"
    console.print(line, soft_wrap=True)
    log_outside_terminal(console, line)
    session.flush()  # the decision (and publication) in the campaign the view reads
    return int(decision.exit_code), _view(session, decision, campaign, campaign.period,
                                          already_decided=False)


def _view(session: Any, decision: Any, campaign: Any, period: str, *,
          already_decided: bool) -> dict[str, Any]:
    """`quarterly --json`: the decision, and the campaign's result as `tune --json` has it."""
    from autotune.cli.json_views import campaign_result

    return {"deployment": campaign.deployment.name, "period": period,
            "campaign": decision.campaign, "outcome": decision.outcome, "note": decision.note,
            "exit_code": int(decision.exit_code), "already_decided": already_decided,
            "publication_id": decision.publication_id,
            "result": campaign_result(session, campaign)}

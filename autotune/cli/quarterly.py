"""`autotune quarterly`: the scheduled re-tune of one deployment (see autotune.campaign.quarterly)."""

from __future__ import annotations

import getpass
import logging
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from autotune.campaign.requests import QuarterlyRequest
from autotune.cli.common import console, err, load_settings, setup_logging
from autotune.cli.flags import flag_message
from autotune.cli.request_options import Setting, given, request_options
from autotune.errors import (
    CampaignBusyError,
    ConfigError,
    InfrastructureError,
    SettingError,
    StorageError,
)

if TYPE_CHECKING:
    from autotune.release.result import CampaignResult

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


# quarterly's options, in --help order: each a setting of QuarterlyRequest, its type and default
# the model's.
QUARTERLY_SETTINGS = (
    Setting("deployment", "Deployment to re-tune (tuned once before)."),
    Setting("period", "Quarter label, e.g. 2026Q4 (default: today's quarter)."),
    Setting("days", "Tune on the trace's last N days."),
    Setting("trace", "Trace file (default: the newest registered trace overlapping the last "
                     "--days, else the latest campaign's trace)."),
    Setting("force", "Run again even if this quarter is already decided."),
    Setting("max_trials", "Trials to measure at most."),
    Setting("max_gpu_hours", "Stop the search after this much engine time x GPUs."),
    Setting("deadline", "Stop the search at this ISO 8601 time (UTC if no zone); confirmation "
                        "follows."),
    Setting("margin_pct", "Publish only if the winner's LCB beats the incumbent by this many "
                          "percent."),
    Setting("ray_address", "Run trials on this Ray cluster (default AUTOTUNE_RAY_ADDRESS; none: "
                           "inline)."),
    Setting("parallel", "Trials in flight (Ray)."),
    Setting("slo", "P99 ceilings (default: the latest campaign's)."),
    Setting("backend", "sim or vllm (default: the latest campaign's)."),
    Setting("model_path", "vllm backend: the model."),
    Setting("engine_args", "vllm backend: an extra server argument (repeatable)."),
    Setting("confirm_top", "Configs to confirm (besides the incumbent)."),
    Setting("confirm_repeats", "Re-runs per confirmed config."),
)


@request_options(QuarterlyRequest, QUARTERLY_SETTINGS)
def quarterly(
    by: Annotated[str | None, typer.Option(help="Who publishes (default: $USER).")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON object on stdout (keys: docs/reference/json-output.md); "
                       "the tables go to stderr.")] = False,
    **asked: Any,
) -> None:
    from sqlalchemy.exc import OperationalError

    from autotune.campaign.quarterly import EXIT_BUSY, EXIT_INFRA
    from autotune.campaign.quarterly_job import run_quarterly
    from autotune.cli import output

    settings = load_settings()
    setup_logging(settings.log_level)
    shown = QuarterlyOutput(console, err)
    try:
        request = QuarterlyRequest.of(**given(asked), published_by=by or getpass.getuser())
        code = run_quarterly(request, settings=settings, out=shown)
    except SettingError as exc:
        raise ConfigError(flag_message(exc)) from None
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
        output.emit(shown.view)
    raise typer.Exit(code)


quarterly.__doc__ = HELP


class QuarterlyOutput:
    """autotune.campaign.quarterly_job.QuarterlyOutput on the terminal (stdout) and stderr; `view` holds
    the --json object once the decision is shown."""

    def __init__(self, console: Console, err: Console) -> None:
        self.console, self.err = console, err
        self.view: dict[str, Any] = {}

    def say(self, line: str) -> None:
        self.console.print(line, soft_wrap=True)

    def warn(self, line: str) -> None:
        self.err.print(line, markup=False, highlight=False, soft_wrap=True)

    def progress(self) -> Any:
        from autotune.cli.live import progress_observer

        return progress_observer(self.console)  # a scheduled job: log lines; by hand: live

    def decided(self, session: Any, decision: Any, campaign: Any, already_decided: bool) -> None:
        from autotune.release.result import campaign_result

        session.flush()  # the decision (and publication) in the campaign the result reads
        result = campaign_result(session, campaign)
        if not already_decided:
            _show_decision(self.console, decision, result, campaign.period)
        self.view = _view(decision, result, campaign.period or "",
                          already_decided=already_decided)


def _show_decision(console: Console, decision: Any, result: CampaignResult, period: str | None) -> None:
    from autotune.cli.live import log_outside_terminal
    from autotune.cli.render import confirmation_table
    from autotune.cli.report import spent_line

    console.print(spent_line(result.spent), soft_wrap=True)
    if result.confirmations:
        console.print(confirmation_table(result.confirmations))
    line = f"{result.deployment} {period}: {decision.outcome}: {decision.note}"
    console.print(line, soft_wrap=True)
    log_outside_terminal(console, line)


def _view(decision: Any, result: CampaignResult, period: str, *, already_decided: bool) -> dict[str, Any]:
    """`quarterly --json`: the decision, and the campaign's result as `tune --json` has it."""
    from autotune.cli.json_views import campaign_result

    return {"deployment": result.deployment, "period": period,
            "campaign": decision.campaign, "outcome": decision.outcome, "note": decision.note,
            "exit_code": int(decision.exit_code), "already_decided": already_decided,
            "publication_id": decision.publication_id,
            "result": campaign_result(result)}

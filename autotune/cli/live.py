"""Campaign progress for a person: a live view in a terminal, one log line per event elsewhere.

Both follow the controller's observer hooks and autotune.measure.progress events: trials in flight with
their capacity-search step, offered rate and elapsed time (a trial on a Ray worker too: the
executor carries its steps back), the confirmation's runs, and an estimate of the time left
(autotune.campaign.eta).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from autotune.campaign import eta
from autotune.campaign.study import CampaignRequest, Observer, TrialRecord
from autotune.cli.render import trial_table
from autotune.measure import progress
from autotune.search.baselines import BASELINES
from autotune.vocabulary import RecordState, Role


@dataclass
class _Running:
    role: str
    started_s: float  # monotonic
    step: progress.ReplayStep | None = None


class ProgressState:
    """What is running, what is done and what is left; safe to read from another thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.clock, self.wall = clock, wall
        self.lock = threading.Lock()
        self.request: CampaignRequest | None = None
        self.records: list[TrialRecord] = []
        self.running: dict[tuple[str, int], _Running] = {}  # (study, trial or confirm run id)
        self.durations_s: list[float] = []  # of engine runs started and finished here
        self.gpu_hours_spent = 0.0
        self.confirm_done = 0
        self.confirm_of: int | None = None  # known once the confirmation starts
        self.stopped = False

    def start(self, request: CampaignRequest) -> None:
        with self.lock:
            self.request = request

    def event(self, event: progress.Event) -> None:
        now = self.clock()
        with self.lock:
            if isinstance(event, progress.TrialStarted):
                self.running[(event.study, event.number)] = _Running(event.role, now)
                self.gpu_hours_spent = event.gpu_hours_spent
            elif isinstance(event, progress.ReplayStep):
                job = self.running.get((event.study, event.number))
                if job is not None:
                    job.step = event
            elif isinstance(event, progress.ConfirmRun):
                self.stopped, self.confirm_of = True, event.of
                key = (event.study, event.run - 1)  # a confirmation run's replays use its id
                if event.capacity_output_tok_s is None and event.failure is None:
                    self.running[key] = _Running(f"{event.role} (trial {event.trial})", now)
                else:
                    job = self.running.pop(key, None)
                    self.confirm_done += 1
                    if job is not None:
                        self.durations_s.append(now - job.started_s)
            elif isinstance(event, progress.SearchStopped):
                self.stopped = True

    def finished(self, record: TrialRecord, study: str) -> bool:
        """Record a finished trial; False when it did not start in this job (a resumed
        campaign's trials, rejected configs and repeats)."""
        now = self.clock()
        with self.lock:
            self.records.append(record)
            job = self.running.pop((study, record.number), None)
            if job is not None:
                self.durations_s.append(now - job.started_s)
            return job is not None

    def trials_done(self) -> int:
        """Trials that count against --trials (as the controller counts them)."""
        r = self.request
        return sum(1 for x in self.records if x.state != RecordState.REJECTED
                   and x.repeat_of is None and (r is None or x.fidelity == r.search_backend))

    def seconds_left(self) -> float | None:
        r = self.request
        if r is None:
            return None
        with self.lock:
            now = self.clock()
            mean = fmean(self.durations_s) if self.durations_s else None
            elapsed = [now - j.started_s for j in self.running.values()]
            confirm_runs = self.confirm_of if self.confirm_of is not None else (
                0 if r.confirm is None else
                (r.confirm.top + len(BASELINES)
                 + sum(1 for x in r.references if x.role == Role.INCUMBENT)) * r.confirm.repeats)
            plan = eta.Plan(max_trials=r.max_trials,
                            slots=1 if r.executor == "inline" else r.parallel,
                            gpus_per_trial=r.deployment.tensor_parallel_size,
                            max_gpu_hours=r.budget.max_gpu_hours,
                            deadline_epoch_s=r.budget.deadline_epoch_s,
                            confirm_runs=confirm_runs)
            done = r.max_trials if self.stopped else self.trials_done()
            return eta.seconds_left(plan, trials_done=done,
                                    in_flight_elapsed_s=[] if self.stopped else elapsed,
                                    mean_trial_s=mean, gpu_hours_spent=self.gpu_hours_spent,
                                    now_epoch_s=self.wall(),
                                    confirm_runs_done=self.confirm_done)

    def eta_text(self) -> str:
        left = self.seconds_left()
        return "time left: after the first trial" if left is None else \
            f"about {progress.duration_text(left)} left"

    def summary(self) -> str:
        r = self.request
        assert r is not None
        measured = self.trials_done()
        rejected = sum(1 for x in self.records if x.state == RecordState.REJECTED)
        best = max((x.capacity_output_tok_s for x in self.records if x.feasible), default=0.0)
        head = (f"confirming: {self.confirm_done}/{self.confirm_of} runs" if self.confirm_of
                else f"{measured}/{r.max_trials} trials"
                + (f", {rejected} rejected by rules" if rejected else ""))
        return f"{r.study_name}: {head}, best {best:,.0f} output tok/s, {self.eta_text()}"


def _step_text(step: progress.ReplayStep | None) -> tuple[str, str, str]:
    if step is None:  # the engine is starting or warming up: no replay yet
        return "starting", "-", "-"
    return (f"{step.phase} {step.step}/{step.of}", f"x{step.rate_scale:.3g}",
            f"{step.offered_req_s:,.1f}")


class LiveTrials(Observer):
    """In a terminal: the trials in flight, then the most recent ones, redrawn every second."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.state = ProgressState()
        self.live: Live | None = None

    def render(self) -> Group:
        s = self.state
        with s.lock:
            running = sorted(s.running.items())
            records = list(s.records)
        now = s.clock()
        flight = Table(title="In flight", title_justify="left")
        for col in ("#", "role", "step", "rate", "req/s", "elapsed"):
            flight.add_column(col, justify="left" if col in ("role", "step") else "right",
                              no_wrap=col != "role")
        for (study, number), job in running:
            confirming = study.endswith(":confirm")
            flight.add_row(f"run {number + 1}" if confirming else str(number), job.role,
                           *_step_text(job.step), progress.duration_text(now - job.started_s))
        parts: list[Any] = [Text(s.summary(), style="bold")]
        if running:
            parts.append(flight)
        parts.append(trial_table(records, "Recent trials", limit=12, width=self.console.width))
        return Group(*parts)

    def on_start(self, request: CampaignRequest) -> None:
        self.state.start(request)
        self.live = Live(console=self.console, get_renderable=self.render,
                         refresh_per_second=1, transient=True)
        self.live.start()

    def on_event(self, event: progress.Event) -> None:
        self.state.event(event)
        if self.live:
            self.live.refresh()

    def on_trial(self, record: TrialRecord) -> None:
        r = self.state.request
        self.state.finished(record, r.study_name if r else "")
        if self.live:
            self.live.refresh()

    def close(self) -> None:
        if self.live:
            self.live.stop()
            self.live = None


class LogProgress(Observer):
    """Outside a terminal: one INFO line per event on stderr at the default log level."""

    def __init__(self) -> None:
        self.state = ProgressState()
        self.log = progress.progress_logger()

    def on_start(self, request: CampaignRequest) -> None:
        self.state.start(request)
        self.log.info("%s: %d trials, %s", request.study_name, request.max_trials,
                      "confirmation after the search" if request.confirm else "no confirmation")

    def on_event(self, event: progress.Event) -> None:
        self.state.event(event)
        line = progress.describe(event)
        if isinstance(event, progress.ConfirmRun) and event.capacity_output_tok_s is not None:
            line += f"; {self.state.eta_text()}"
        self.log.info("%s", line)

    def on_trial(self, record: TrialRecord) -> None:
        r = self.state.request
        study = r.study_name if r else ""
        ran_here = self.state.finished(record, study)
        if record.state == RecordState.REJECTED:
            what = f"rejected by rules ({record.failure_message})"
        else:
            state = "measured" if record.feasible else (
                "slo miss" if record.state == RecordState.MEASURED else record.state)
            what = (f"{state}, capacity {record.capacity_output_tok_s:,.0f} output tok/s"
                    + (f" ({record.failure_class})" if record.failure_class else "")
                    + (f", repeats trial {record.repeat_of}" if record.repeat_of is not None
                       else "" if ran_here else ", from an earlier job"))
        self.log.info("%s trial %d (%s, %s): %s; %d/%d trials done, %s", study, record.number,
                      record.role, record.fidelity, what, self.state.trials_done(),
                      r.max_trials if r else 0, self.state.eta_text())

    def close(self) -> None:
        pass


def log_outside_terminal(console: Console, line: str) -> None:
    """An event printed on the console (a publication, a quarterly decision), also as a
    progress log line where no person watches a terminal (the console may be --json's)."""
    if not console.is_terminal:
        progress.progress_logger().info("%s", line)


def progress_observer(console: Console) -> LiveTrials | LogProgress:
    """The live view where a person watches a terminal, log lines where output is kept."""
    return LiveTrials(console) if console.is_terminal else LogProgress()

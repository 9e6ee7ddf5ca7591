"""Progress while a campaign runs: the capacity search reports each replay (ladder step,
multiplier, offered rate) to whoever listens; the confirmation reports its runs; the time left
follows the budget."""

from __future__ import annotations

import pytest

from autotune.campaign import eta
from autotune.campaign.confirm import Candidate, ConfirmPlan
from autotune.campaign.confirm import run as confirm_run
from autotune.domain.records import CapacitySearch
from autotune.measure import progress
from autotune.measure.capacity import run_trial
from autotune.measure.executors import InlineExecutor
from autotune.workers.sim.backend import SimulatorBackend
from tests.measure.test_capacity import spec


def test_a_trial_reports_each_replay_with_its_step_and_offered_rate() -> None:
    events: list[progress.Event] = []
    trial = spec("ttft_p99<=2s,tpot_p99<=50ms", CapacitySearch(bisect_steps=2))
    with progress.reporting(events.append):
        outcome = run_trial(trial, SimulatorBackend())
    steps = [e for e in events if isinstance(e, progress.ReplayStep)]
    # One event per replay, in the order they ran, at the multipliers they ran at.
    assert [e.rate_scale for e in steps] == [r["rate_scale"] for r in outcome.replays]
    ladder = [e for e in steps if e.phase == "ladder"]
    bisect = [e for e in steps if e.phase == "bisect"]
    assert [e.step for e in ladder] == list(range(1, len(ladder) + 1)) and len(ladder) >= 2
    assert [e.step for e in bisect] == [1, 2] and all(e.of == 2 for e in bisect)
    assert all(e.study == "s" and e.number == 7 for e in steps)
    # The offered rate is the trace's recorded rate times the multiplier.
    recorded = len(trial.trace) / trial.trace.duration_s
    for e in ladder:
        assert e.offered_req_s == pytest.approx(recorded * e.rate_scale)
    assert progress.describe(ladder[1]) == (
        f"s trial 7: ladder step 2/{ladder[1].of}, x2 ({recorded * 2:.3g} req/s offered)")


def test_without_a_listener_nothing_is_reported_and_nothing_breaks() -> None:
    events: list[progress.Event] = []
    with progress.reporting(events.append):
        pass
    outcome = run_trial(spec("ttft_p99<=2s", CapacitySearch(max_scale=2)), SimulatorBackend())
    assert events == [] and outcome.failure_class is None


def test_the_confirmation_reports_each_run_started_and_finished() -> None:
    events: list[progress.Event] = []
    executor = InlineExecutor()
    executor.open(1, 1)
    template = spec("ttft_p99<=2s", CapacitySearch(max_scale=2, bisect_steps=0))
    chosen = [Candidate(trial_number=4, role="proposed", config=template.config.explicit(),
                        search_output_tok_s=1.0)]
    with progress.reporting(events.append):
        confirm_run(executor, template, chosen, ConfirmPlan(top=1, repeats=2, base_seed=-1))
    runs = [e for e in events if isinstance(e, progress.ConfirmRun)]
    assert [(e.run, e.of, e.capacity_output_tok_s is None) for e in runs] == [
        (1, 2, True), (1, 2, False), (2, 2, True), (2, 2, False)]
    assert all(e.trial == 4 and e.study == "s:confirm" for e in runs)
    assert runs[1].capacity_output_tok_s and runs[1].capacity_output_tok_s > 0
    # The replays in between say which run they belong to (numbered from 1 in the log line).
    step = next(e for e in events if isinstance(e, progress.ReplayStep))
    assert progress.describe(step).startswith("s:confirm run 1: ladder step 1/")


def test_time_left_follows_the_trials_the_slots_and_the_confirmation() -> None:
    plan = eta.Plan(max_trials=10, confirm_runs=6)
    left = eta.seconds_left(plan, trials_done=4, in_flight_elapsed_s=[20.0], mean_trial_s=60.0,
                            gpu_hours_spent=0.0, now_epoch_s=0.0)
    assert left == pytest.approx(5 * 60 + 40 + 6 * 60)  # 5 waiting, 40 s to go, 6 runs
    two = eta.Plan(max_trials=10, slots=2, confirm_runs=6)
    assert eta.seconds_left(two, trials_done=4, in_flight_elapsed_s=[20.0], mean_trial_s=60.0,
                            gpu_hours_spent=0.0, now_epoch_s=0.0) == pytest.approx(left / 2)
    assert eta.seconds_left(plan, trials_done=0, in_flight_elapsed_s=[], mean_trial_s=None,
                            gpu_hours_spent=0.0, now_epoch_s=0.0) is None


def test_time_left_stops_at_the_deadline_or_the_gpu_hours() -> None:
    by_deadline = eta.Plan(max_trials=100, deadline_epoch_s=1_000.0 + 600)
    assert eta.seconds_left(by_deadline, trials_done=2, in_flight_elapsed_s=[], mean_trial_s=60.0,
                            gpu_hours_spent=0.0, now_epoch_s=1_000.0) == pytest.approx(600)
    # 1 GPU-hour left at 8 GPUs per trial: 450 s of trials.
    by_gpus = eta.Plan(max_trials=100, gpus_per_trial=8, max_gpu_hours=3.0)
    assert eta.seconds_left(by_gpus, trials_done=2, in_flight_elapsed_s=[], mean_trial_s=60.0,
                            gpu_hours_spent=2.0, now_epoch_s=0.0) == pytest.approx(450)


def test_durations_read_as_a_person_says_them() -> None:
    assert [progress.duration_text(s) for s in (4.4, 65, 3600 * 3 + 20 * 60 + 5)] == [
        "4s", "1m05s", "3h20m"]

"""A trial on a Ray worker reports its capacity search's steps to the driver: the driver's
progress sink gets each ladder step with the rate it offers, before the trial's outcome, and
the live view shows them; an inbox that is gone costs the steps, never the trial. A local Ray
(logical GPUs) in this process, and the simulator."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from rich.console import Console

from autotune.campaign.study import CampaignRequest
from autotune.cli.live import LiveTrials
from autotune.domain.deployment import DEMO
from autotune.domain.slo import parse_slo
from autotune.measure import progress
from autotune.measure.trial_spec import TrialSpec
from autotune.search.baselines import guide_heuristic
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE

ray_executor = pytest.importorskip("autotune.workers.ray_executor")
pytestmark = pytest.mark.integration

SLO = "ttft_p99<=2s,tpot_p99<=50ms"


@pytest.fixture(scope="module")
def executor() -> Iterator[ray_executor.RayExecutor]:
    gpus = _spec(0).gpus  # the demo deployment's tensor parallel size
    ex = ray_executor.RayExecutor(num_cpus=2, logical_gpu_count=gpus)
    ex.open(1, gpus)
    try:
        yield ex
    finally:
        ex.close()


def _spec(number: int) -> TrialSpec:
    return TrialSpec(study_name="demo:ray", trial_number=number,
                     config=guide_heuristic(DEMO).merged(max_num_seqs=256,
                                                         max_num_batched_tokens=8192),
                     deployment=DEMO, trace=load_trace(DEMO_TRACE), slo=parse_slo(SLO),
                     backend="sim")


def _text(live: LiveTrials) -> str:
    console = Console(width=80, file=io.StringIO(), color_system=None)
    console.print(live.render())
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_the_driver_sees_a_ray_trials_ladder_steps_live(
        executor: ray_executor.RayExecutor) -> None:
    live = LiveTrials(Console(width=80, file=io.StringIO(), color_system=None))
    live.state.start(CampaignRequest(deployment=DEMO, campaign="ray", slo=parse_slo(SLO),
                                     trace=load_trace(DEMO_TRACE), trace_ref="t", max_trials=3,
                                     executor="ray"))
    seen: list[progress.Event] = []
    views: list[str] = []

    def sink(event: progress.Event) -> None:  # the controller's: LiveTrials.on_event
        seen.append(event)
        live.state.event(event)
        if isinstance(event, progress.ReplayStep):
            views.append(_text(live))

    with progress.reporting(sink):
        progress.emit(progress.TrialStarted("demo:ray", 4, "proposed", "sim", 0.0))
        executor.submit(_spec(4))
        [outcome] = executor.wait()
    assert outcome.failure_class is None and outcome.worker["pid"] is not None
    steps = [e for e in seen if isinstance(e, progress.ReplayStep)]
    # Every replay the worker ran, in order, each with the rate it offered.
    assert [s.rate_scale for s in steps] == [r["rate_scale"] for r in outcome.replays]
    assert [s.offered_req_s for s in steps] == pytest.approx(
        [r["offered_request_s"] for r in outcome.replays])
    assert steps[0].phase == "ladder" and steps[0].step == 1 and steps[0].offered_req_s > 0
    assert {(s.study, s.number) for s in steps} == {("demo:ray", 4)}
    first = views[0]
    assert f"ladder 1/{steps[0].of}" in first and "x1" in first, first
    assert f"{steps[0].offered_req_s:,.1f}" in first, first


def test_a_trial_whose_inbox_is_gone_is_still_measured(
        executor: ray_executor.RayExecutor, caplog: pytest.LogCaptureFixture) -> None:
    own = ray_executor.RayExecutor()  # joins the running Ray, with an inbox of its own
    own.open(1, _spec(0).gpus)
    try:
        assert own._inbox is not None
        ray_executor.ray.kill(own._inbox.actor)  # as if its node were lost
        seen: list[progress.Event] = []
        with caplog.at_level(logging.WARNING, "autotune.executors.ray"), \
                progress.reporting(seen.append):
            own.submit(_spec(5))
            [outcome] = own.wait()
    finally:
        own.close()
    assert outcome.failure_class is None and outcome.capacity_output_tok_s > 0
    assert seen == []
    assert "progress of trials on Ray workers is no longer reported" in caplog.text

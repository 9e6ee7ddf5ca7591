"""What a person watching `tune` sees: the trial table at 80 columns keeps every number whole;
the live view shows the trials in flight with their step, offered rate and elapsed time."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from autotune.campaign.study import CampaignRequest, TrialRecord
from autotune.cli.live import LiveTrials, LogProgress, ProgressState
from autotune.cli.render import trial_table
from autotune.domain.deployment import DEMO
from autotune.domain.slo import parse_slo
from autotune.measure import progress
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE

CONFIG = {"max_num_seqs": 1024, "max_num_batched_tokens": 16384, "block_size": 256,
          "enable_chunked_prefill": True, "gpu_memory_utilization": 0.95,
          "enable_prefix_caching": True, "tensor_parallel_size": 8}


def _record(number: int) -> TrialRecord:
    return TrialRecord(number=number, role="guide-heuristic", state="measured", feasible=True,
                       capacity_output_tok_s=123456.7, config=CONFIG,
                       latency={"ttft_p99_ms": 12345.6, "tpot_p99_ms": 45.2}, fidelity="sim")


def _text(renderable: object, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


def _cells(text: str) -> list[str]:
    return [c.strip() for line in text.splitlines() if line.startswith("│")
            for c in line.split("│")]


@pytest.mark.parametrize("width", [80, 100, 160])
def test_the_trial_table_keeps_each_number_whole(width: int) -> None:
    records = [_record(n) for n in (110, 111, 112)]
    text = _text(trial_table(records, "title", width=width), width)
    assert max(len(line) for line in text.splitlines()) <= width
    cells = _cells(text)
    for number in ("110", "111", "112"):
        assert cells.count(number) == 1, text
    for number in ("123,457", "12,346", "1024", "16384"):
        assert cells.count(number) == 3, text
    assert "…" not in text
    assert ("not shown at this width" in text) == (width < 160)


def test_without_a_width_every_column_is_shown() -> None:
    text = _text(trial_table([_record(1)], "title"), 200)
    for header in ("prefix", "mem", "chunk", "block", "layout", "TPOT ms"):
        assert header in text
    assert "not shown" not in text


def _request() -> CampaignRequest:
    return CampaignRequest(deployment=DEMO, campaign="c", slo=parse_slo("ttft_p99<=2s"),
                           trace=load_trace(DEMO_TRACE), trace_ref="t", max_trials=10)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_live_view_shows_trials_in_flight_with_their_step_and_rate() -> None:
    clock = _Clock()
    console = Console(width=80, file=io.StringIO(), color_system=None)
    live = LiveTrials(console)
    live.state = ProgressState(clock=clock, wall=clock)
    live.state.start(_request())  # on_start would start drawing: the state is what is tested
    study = "demo:c"
    live.state.event(progress.TrialStarted(study, 0, "vllm-default", "sim", 0.0))
    clock.now += 30
    live.state.finished(_record(0), study)
    live.state.event(progress.TrialStarted(study, 1, "proposed", "sim", 0.01))
    live.state.event(progress.ReplayStep(study, 1, "ladder", 3, 11, 4.0, 16.5))
    clock.now += 75
    text = _text(live.render(), 80)
    assert "ladder 3/11" in text and "x4" in text and "16.5" in text and "1m15s" in text
    # One trial of 30 s done, one 75 s in: 8 waiting x 30 s, and the confirmation's runs.
    assert text.splitlines()[0].strip() == (
        "demo:c: 1/10 trials, best 123,457 output tok/s, about 4m00s left")


def test_log_lines_say_what_finished_and_what_is_left(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    view = LogProgress()
    view.state = ProgressState(clock=clock, wall=clock)
    lines: list[str] = []
    view.log = type("L", (), {"info": staticmethod(lambda fmt, *a: lines.append(fmt % a))})()
    view.on_start(_request())
    view.on_event(progress.TrialStarted("demo:c", 0, "vllm-default", "sim", 0.0))
    clock.now += 60
    view.on_trial(_record(0))
    assert lines[-1].startswith("demo:c trial 0 (guide-heuristic, sim): measured, capacity "
                                "123,457 output tok/s; 1/10 trials done, about ")
    assert "from an earlier job" not in lines[-1]
    view.on_trial(_record(1))  # never started here: a resumed campaign's stored trial
    assert "from an earlier job" in lines[-1]


def test_the_confirmation_table_folds_a_long_role_rather_than_cutting_it() -> None:
    from autotune.cli.render import confirmation_table
    from autotune.release.result import Confirmed

    rows = [Confirmed(trial_number=i, role=role, search_output_tok_s=123456.0,
                      samples=(123000.0,) * 3, failures=(None,) * 3, n=3,
                      mean_output_tok_s=123000.0, std_output_tok_s=1234.0, cv=0.01,
                      lcb_output_tok_s=121000.0, winner=i == 0)
            for i, role in enumerate(["guide-heuristic", "vllm-default"])]
    text = _text(confirmation_table(rows), 80)
    assert "…" not in text and "123,456" in text and "121,000" in text

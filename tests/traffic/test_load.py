"""The load a replay sends: open loop at a rate multiplier, or closed-loop clients."""

from __future__ import annotations

import pytest

from autotune.errors import ConfigError
from autotune.traffic.formats import load_trace
from autotune.traffic.load import DEFAULT_NUM_PROMPTS, ClosedLoop, OpenLoop
from autotune.traffic.trace import DEMO_TRACE


def test_fixed_lengths_make_num_prompts_equal_requests() -> None:
    trace = ClosedLoop(8, num_prompts=30, input_len=100, output_len=20).requests(None, 2048)
    assert len(trace) == 30
    assert set(trace.prompt_tokens.tolist()) == {100} and set(trace.output_tokens.tolist()) == {20}
    assert len(ClosedLoop(8, input_len=1, output_len=1).requests(None, 2048)) == DEFAULT_NUM_PROMPTS


def test_trace_lengths_keep_its_order_and_prefixes() -> None:
    demo = load_trace(DEMO_TRACE)
    trace = ClosedLoop(4, num_prompts=25).requests(demo, 16384)
    assert trace.prompt_tokens.tolist() == demo.prompt_tokens[:25].tolist()
    assert trace.hash_ids == demo.hash_ids[:25]
    assert len(ClosedLoop(4).requests(demo, 16384)) == len(demo)


@pytest.mark.parametrize("make, fragment", [
    (lambda: ClosedLoop(0, input_len=1, output_len=1), "at least 1 client"),
    (lambda: ClosedLoop(2, num_prompts=0), "num_prompts 0"),
    (lambda: ClosedLoop(2, output_len=5), "go together"),
    (lambda: ClosedLoop(2, input_len=2000, output_len=100).requests(None, 2048), "exceed"),
    (lambda: ClosedLoop(2).requests(None, 2048), "needs lengths"),
    (lambda: ClosedLoop(2, num_prompts=10**6).requests(load_trace(DEMO_TRACE), 2048), "only"),
    (lambda: OpenLoop(0.0), "must be positive"),
])
def test_bad_loads_say_what_is_wrong(make, fragment: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=fragment):
        make()


def test_describe_names_the_mode() -> None:
    assert OpenLoop(2.0).describe() == {"mode": "open_loop", "rate_scale": 2.0}
    assert ClosedLoop(3, input_len=5, output_len=6).describe()["mode"] == "closed_loop"

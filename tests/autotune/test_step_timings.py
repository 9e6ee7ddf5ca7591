"""Decode step timings read off token streams, against a hand-made engine timeline."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.step_timings import decode_steps

# Request A (prompt 100) decodes alone in 10 ms steps; B (prompt 300) is sent at 0.495 s and
# prefilled in a mixed step ending at 0.52; both then decode in 14 ms steps until B's last token
# at 0.94; A goes on alone at 10 ms.
A_ALONE = 0.05 + 0.01 * np.arange(45)  # 0.05 .. 0.49
BOTH = 0.52 + 0.014 * np.arange(31)  # 0.52 .. 0.94
A_AFTER = 0.94 + 0.01 * np.arange(1, 31)  # 0.95 .. 1.24
STREAMS = [np.concatenate([A_ALONE, BOTH, A_AFTER]), BOTH]
SENT, PROMPTS = np.array([0.0, 0.495]), np.array([100, 300])


def _gaps(streams: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    ends = np.concatenate([s[1:] for s in streams])
    return ends, np.concatenate([np.diff(s) for s in streams])


def _naive_kv(t: float, streams: list[np.ndarray]) -> float:
    """Context of the requests decoding at t, one request at a time."""
    kv = 0.0
    for s, prompt in zip(streams, PROMPTS, strict=True):
        if s[0] <= t <= s[-1]:
            kv += prompt + len(s) * (t - s[0]) / (s[-1] - s[0])
    return kv


def _steps(streams: list[np.ndarray], sent: np.ndarray = SENT, **kw: int) -> dict[int, object]:
    ends, gaps = _gaps(streams)
    first = np.array([s[0] for s in streams])
    last = np.array([s[-1] for s in streams])
    out = np.array([len(s) for s in streams])
    found = decode_steps(sent, first, last, PROMPTS[:len(streams)], out, ends, gaps, **kw)
    return {s.batch: s for s in found}


def test_gaps_are_binned_by_the_batch_decoding_and_prefills_are_left_out() -> None:
    steps = _steps(STREAMS)
    assert set(steps) == {1, 2}
    one, two = steps[1], steps[2]
    # Batch 1: A's 44 gaps before B was sent and its 29 after B's last token; the gap B's
    # prefill shared (0.49-0.52) and the one in which B finished (0.94-0.95) are left out.
    assert one.gaps == 44 + 29 and one.step_ms == pytest.approx(10.0)
    assert two.gaps == 2 * 30 and two.step_ms == pytest.approx(14.0)
    ends, gaps = _gaps(STREAMS)
    mids = ends - gaps / 2
    pick_two = (ends > 0.52) & (ends <= 0.94)
    assert two.kv_tokens == pytest.approx(np.mean([_naive_kv(t, STREAMS) for t in mids[pick_two]]))
    pick_one = ((ends <= 0.49) | (ends > 0.95))
    assert one.kv_tokens == pytest.approx(np.mean([_naive_kv(t, STREAMS)
                                                   for t in mids[pick_one]]))
    assert 100 < one.kv_tokens < 100 + 106 and 400 < two.kv_tokens < 400 + 106 + 31


def test_a_request_waiting_keeps_every_gap_it_spans_out() -> None:
    # B is sent at 0.205 but answered only at 0.52: A's gaps in between may hold its prefill.
    steps = _steps(STREAMS, sent=np.array([0.0, 0.205]))
    assert steps[1].gaps == 15 + 29  # A's gaps ending by 0.2 and those after B


def test_unanswered_requests_and_rare_batches_give_no_bin() -> None:
    assert _steps(STREAMS, min_gaps=61) == {1: _steps(STREAMS)[1]}  # batch 2: 60 gaps only
    ends, gaps = _gaps(STREAMS)
    nan = np.array([np.nan, np.nan])
    assert decode_steps(SENT, nan, nan, PROMPTS, np.array([0, 0]), ends, gaps) == ()
    assert decode_steps(SENT, SENT, SENT, PROMPTS, np.array([1, 1]), ends[:0], gaps[:0]) == ()

"""Step timings read off token streams, against a hand-made engine timeline."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.domain.step_timings import StepTime, step_times

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


def _all_steps(streams: list[np.ndarray], sent: np.ndarray = SENT, prompts: np.ndarray = PROMPTS,
               **kw: int) -> tuple[StepTime, ...]:
    ends, gaps = _gaps(streams)
    first = np.array([s[0] for s in streams])
    last = np.array([s[-1] for s in streams])
    out = np.array([len(s) for s in streams])
    return step_times(sent, first, last, prompts[:len(streams)], out, ends, gaps, **kw)


def _steps(streams: list[np.ndarray], sent: np.ndarray = SENT, **kw: int) -> dict[int, StepTime]:
    """The decode steps, by batch size."""
    return {s.batch: s for s in _all_steps(streams, sent, **kw) if not s.prompt_tokens}


def _prefills(streams: list[np.ndarray], sent: np.ndarray = SENT,
              prompts: np.ndarray = PROMPTS) -> list[StepTime]:
    return [s for s in _all_steps(streams, sent, prompts) if s.prompt_tokens]


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
    assert step_times(SENT, nan, nan, PROMPTS, np.array([0, 0]), ends, gaps) == ()
    assert step_times(SENT, SENT, SENT, PROMPTS, np.array([1, 1]), ends[:0], gaps[:0]) == ()


def test_the_step_that_prefilled_a_lone_waiting_prompt_is_timed() -> None:
    # B's prompt (300 tokens) went in the step that ended with B's first token and A's token at
    # 0.52: A's gap 0.49-0.52, 30 ms, beside A's decode.
    (step,) = _prefills(STREAMS)
    assert step.prompt_tokens == 300 and step.batch == 1 and step.gaps == 1
    assert step.step_ms == pytest.approx(30.0)
    assert step.kv_tokens == pytest.approx(_naive_kv(0.505, STREAMS))
    # How long it waited before does not matter: it was the only one waiting.
    assert _prefills(STREAMS, sent=np.array([0.0, 0.205])) == [step]


def test_a_first_token_a_moment_after_the_others_still_marks_its_step() -> None:
    late = [STREAMS[0], BOTH + 0.0015]  # B's tokens reach the client 1.5 ms after A's
    (step,) = _prefills(late)
    assert step.step_ms == pytest.approx(30.0) and step.prompt_tokens == 300


def test_no_prefill_step_where_another_request_waited_or_none_decoded() -> None:
    # C is sent at 0.5 and answered at 0.534: it waited during B's step too.
    c = np.array([0.534, 0.548])
    streams = [STREAMS[0], BOTH, c]
    prompts = np.array([100, 300, 50])
    steps = _prefills(streams, sent=np.array([0.0, 0.495, 0.5]), prompts=prompts)
    # C, alone in waiting once B was answered, had its prompt in the next step, beside two.
    assert [(s.prompt_tokens, s.batch, round(s.step_ms, 3)) for s in steps] == [(50, 2, 14.0)]
    # A lone request's prefill has no decoding stream beside it: nothing to time it by.
    assert _prefills([STREAMS[0]], sent=SENT[:1]) == []


def test_prefill_steps_are_thinned_evenly_past_the_limit() -> None:
    # One long decode in 5 ms steps; 30 requests, one at a time, each sent 1 ms before a
    # decode token and prefilled in the 20 ms step after it, then decoding one token beside.
    decoder, starts, t = [0.0], [], 0.0
    for _request in range(30):
        for _step in range(20):
            t += 0.005
            decoder.append(t)
        starts.append(t)
        t += 0.020
        decoder.append(t)
    streams = [np.array(decoder)] + [np.array([s + 0.020, s + 0.025]) for s in starts]
    sent = np.concatenate([[0.0], np.array(starts) - 0.001])
    prompts = np.concatenate([[10], 100 + np.arange(30)])
    assert [s.prompt_tokens for s in _prefills(streams, sent, prompts)] == list(100 + np.arange(30))
    ends, gaps = _gaps(streams)
    first, last = np.array([s[0] for s in streams]), np.array([s[-1] for s in streams])
    out = np.array([len(s) for s in streams])
    kept = [s for s in step_times(sent, first, last, prompts, out, ends, gaps,
                                  max_prefill_steps=10) if s.prompt_tokens]
    assert [s.prompt_tokens for s in kept] == [100, 103, 106, 110, 113, 116, 119, 123, 126, 129]
    assert all(s.step_ms == pytest.approx(20.0) and s.batch == 1 for s in kept)

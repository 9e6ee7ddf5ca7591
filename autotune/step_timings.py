"""Per-step timings of an engine, read off a replay's token streams.

A real engine does not report how long each of its steps took, but every stream it serves sees
them: while b requests decode and none is waiting or in prefill, each step is a decode step of
b sequences, and the gap between two tokens of any of those streams is one such step. So a
replay's token gaps, binned by how many requests were decoding at the time (and left out
wherever some request had been sent but had no first token yet: its prefill may share the
step), give the engine's decode step time by batch size, at the context the batch held (each
decoding request's prompt plus what it had generated, interpolated along its stream). The
simulator's step model is calibrated against these (`workers.sim.calibrate`): replays alone
let a fit trade the fixed per-step cost against the per-sequence one.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

MIN_GAPS = 20  # a batch size seen in fewer gaps gets no bin: its median would be noise


class DecodeSteps(BaseModel):
    """Decode steps of `batch` sequences: median step time over `gaps` token gaps, with the
    batch's mean context (KV tokens, all its sequences together)."""

    model_config = ConfigDict(frozen=True)

    batch: int
    kv_tokens: float
    step_ms: float
    gaps: int


def steps_to_json(steps: tuple[DecodeSteps, ...]) -> list[dict[str, float]]:
    """As stored with a replay (a trial's replays, saved fidelity measurements)."""
    return [s.model_dump() for s in steps]


def steps_from_json(rows: list[dict[str, float]] | None) -> tuple[DecodeSteps, ...]:
    """What steps_to_json wrote; none where a replay was stored before step timings were kept."""
    return tuple(DecodeSteps.model_validate(r) for r in rows or ())


def _active_count(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """How many intervals [start, end] hold each t (starts and ends sorted)."""
    return (np.searchsorted(starts, t, side="right") - np.searchsorted(ends, t, side="left"))


def decode_steps(sent_s: np.ndarray, first_s: np.ndarray, last_s: np.ndarray,
                 prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                 gap_end_s: np.ndarray, gap_s: np.ndarray,
                 min_gaps: int = MIN_GAPS) -> tuple[DecodeSteps, ...]:
    """Decode step times by batch size.

    Per request: when it was sent, its first and last token (NaN: it got none; it is left out),
    its prompt and output tokens. Per token gap, of any request: when it ended and its length.
    All times on one clock, in seconds.
    """
    served = np.isfinite(first_s) & np.isfinite(last_s) & np.isfinite(sent_s)
    sent, first, last = sent_s[served], first_s[served], last_s[served]
    prompt = np.asarray(prompt_tokens, dtype=float)[served]
    out = np.asarray(output_tokens, dtype=float)[served]
    gap_end = np.asarray(gap_end_s, dtype=float)
    gap = np.asarray(gap_s, dtype=float)
    if not len(first) or not len(gap):
        return ()
    gap_start = gap_end - gap

    # Some request sent and not yet answered during the gap: its prefill may share the step.
    sent_sorted, first_sorted = np.sort(sent), np.sort(first)
    waiting = (np.searchsorted(sent_sorted, gap_end, side="left")
               - np.searchsorted(first_sorted, gap_start, side="right"))
    # Decoding at both ends of the gap; a batch that changed within it is left out.
    last_sorted = np.sort(last)
    batch = _active_count(first_sorted, last_sorted, gap_end)
    clean = (waiting == 0) & (batch == _active_count(first_sorted, last_sorted, gap_start)) & (
        batch > 0)

    # Context of the decoding requests at the gap's middle: request i holds
    # prompt_i + rate_i * (t - first_i) tokens, rate_i = out_i / (last_i - first_i); summed
    # over the requests decoding at t with prefix sums in start and end order.
    span = last - first
    rate = np.divide(out, span, out=np.zeros_like(out), where=span > 0)
    offset = prompt - rate * first
    by_first, by_last = np.argsort(first, kind="stable"), np.argsort(last, kind="stable")
    cum = {name: (np.concatenate([[0.0], np.cumsum(v[by_first])]),
                  np.concatenate([[0.0], np.cumsum(v[by_last])]))
           for name, v in (("offset", offset), ("rate", rate))}
    mid = (gap_start + gap_end) / 2
    started = np.searchsorted(first_sorted, mid, side="right")
    ended = np.searchsorted(last_sorted, mid, side="left")

    def active_sum(name: str) -> np.ndarray:
        by_start, by_end = cum[name]
        return by_start[started] - by_end[ended]

    kv = active_sum("offset") + active_sum("rate") * mid

    found = []
    for b in np.unique(batch[clean]):
        pick = clean & (batch == b)
        count = int(pick.sum())
        if count >= min_gaps:
            found.append(DecodeSteps(batch=int(b), kv_tokens=float(np.mean(kv[pick])),
                                     step_ms=float(np.median(gap[pick]) * 1000.0), gaps=count))
    return tuple(found)

"""Per-step timings of an engine, read off a replay's token streams.

A real engine does not report how long each of its steps took, but every stream it serves sees
them:

- Decode steps. While b requests decode and none is waiting or in prefill, each step is a
  decode step of b sequences, and the gap between two tokens of any of those streams is one
  such step. So a replay's token gaps, binned by how many requests were decoding at the time
  (and left out wherever some request had been sent but had no first token yet: its prefill may
  share the step), give the engine's decode step time by batch size, at the context the batch
  held (each decoding request's prompt plus what it had generated, interpolated along its
  stream).
- Prefill steps. A request whose first token arrives together with the other streams' next
  token, while it was the only one waiting, had its prompt prefilled in that one step beside
  the b decodes (or its prompt's last chunk, where the token budget split it: calibration
  leaves those out, knowing the budget). The decoding streams' gap ending there is that step.
  Unlike the request's TTFT it holds no time in the HTTP server or the queue: what lets a fit
  tell prefill cost from the serving frontend's.

The simulator's step model is calibrated against these (`autotune.workers.sim.calibrate`): replays alone
let a fit trade the fixed per-step cost against the per-sequence one, and prefill against the
frontend.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

MIN_GAPS = 20  # a batch size seen in fewer gaps gets no bin: its median would be noise
# A gap ends "with" a first token if it ends within this share of its own length of it (and
# within MATCH_MAX_S): the streams of one step receive their tokens a little apart, and a step
# that holds a prefill is several decode steps long, so its neighbours do not match.
MATCH_SHARE, MATCH_MAX_S = 0.25, 0.002
MAX_PREFILL_STEPS = 200  # kept per replay, evenly over it: a replay may hold thousands


class StepTime(BaseModel):
    """Engine steps of `batch` decoding sequences, with their mean context (KV tokens, all the
    sequences together): with `prompt_tokens` 0, decode-only steps, the median over `gaps`
    token gaps; otherwise one step that also prefilled a prompt of that many tokens (its last
    chunk, if the budget split it), the median of the `gaps` decoding streams' gaps there."""

    model_config = ConfigDict(frozen=True)

    batch: int
    kv_tokens: float
    step_ms: float
    gaps: int
    prompt_tokens: int = 0


def steps_to_json(steps: tuple[StepTime, ...]) -> list[dict[str, float]]:
    """As stored with a replay (a trial's replays, saved fidelity measurements), under the key
    `step_times`."""
    return [s.model_dump() for s in steps]


def steps_from_json(replay: Mapping[str, Any]) -> tuple[StepTime, ...]:
    """The step times stored with a replay: `step_times`, or `decode_steps` where it was stored
    before prefill steps were kept; none where it was stored before step timings were."""
    rows = replay.get("step_times", replay.get("decode_steps"))
    return tuple(StepTime.model_validate(r) for r in rows or ())


def _active_count(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """How many intervals [start, end] hold each t (starts and ends sorted)."""
    return (np.searchsorted(starts, t, side="right") - np.searchsorted(ends, t, side="left"))


class _Requests:
    """The served requests of a replay on one clock, for asking what the engine held at an
    instant: how many were waiting or decoding, and the decoding ones' context."""

    def __init__(self, sent_s: np.ndarray, first_s: np.ndarray, last_s: np.ndarray,
                 prompt_tokens: np.ndarray, output_tokens: np.ndarray) -> None:
        served = np.isfinite(first_s) & np.isfinite(last_s) & np.isfinite(sent_s)
        self.sent, self.first, self.last = sent_s[served], first_s[served], last_s[served]
        self.prompt = np.asarray(prompt_tokens, dtype=float)[served]
        out = np.asarray(output_tokens, dtype=float)[served]
        self.sent_sorted, self.first_sorted = np.sort(self.sent), np.sort(self.first)
        self.last_sorted = np.sort(self.last)
        # Request i holds prompt_i + rate_i * (t - first_i) tokens while it decodes, rate_i =
        # out_i / (last_i - first_i); summed over the requests decoding at t with prefix sums
        # in start and end order.
        span = self.last - self.first
        rate = np.divide(out, span, out=np.zeros_like(out), where=span > 0)
        offset = self.prompt - rate * self.first
        by_first = np.argsort(self.first, kind="stable")
        by_last = np.argsort(self.last, kind="stable")
        self._cum = {name: (np.concatenate([[0.0], np.cumsum(v[by_first])]),
                            np.concatenate([[0.0], np.cumsum(v[by_last])]))
                     for name, v in (("offset", offset), ("rate", rate))}

    def __len__(self) -> int:
        return len(self.first)

    def waiting(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Requests sent before `end` whose first token came after `start`: sent and not yet
        answered at some time in [start, end]."""
        return (np.searchsorted(self.sent_sorted, end, side="left")
                - np.searchsorted(self.first_sorted, start, side="right"))

    def ended(self, start: float, end: float) -> int:
        """Requests whose last token came within (start, end)."""
        return int(np.searchsorted(self.last_sorted, end, side="left")
                   - np.searchsorted(self.last_sorted, start, side="right"))

    def decoding(self, t: np.ndarray) -> np.ndarray:
        """Requests between their first and last token at t."""
        return _active_count(self.first_sorted, self.last_sorted, t)

    def context(self, t: np.ndarray) -> np.ndarray:
        """KV tokens of the requests decoding at t, all together."""
        started = np.searchsorted(self.first_sorted, t, side="right")
        ended = np.searchsorted(self.last_sorted, t, side="left")

        def active_sum(name: str) -> np.ndarray:
            by_start, by_end = self._cum[name]
            return by_start[started] - by_end[ended]

        return active_sum("offset") + active_sum("rate") * t


def step_times(sent_s: np.ndarray, first_s: np.ndarray, last_s: np.ndarray,
               prompt_tokens: np.ndarray, output_tokens: np.ndarray,
               gap_end_s: np.ndarray, gap_s: np.ndarray, min_gaps: int = MIN_GAPS,
               max_prefill_steps: int = MAX_PREFILL_STEPS) -> tuple[StepTime, ...]:
    """A replay's decode step times by batch size, then its prefill steps (at most
    `max_prefill_steps`, evenly over the replay).

    Per request: when it was sent, its first and last token (NaN: it got none; it is left out),
    its prompt and output tokens. Per token gap, of any request: when it ended and its length.
    All times on one clock, in seconds.
    """
    requests = _Requests(sent_s, first_s, last_s, prompt_tokens, output_tokens)
    gap_end = np.asarray(gap_end_s, dtype=float)
    gap = np.asarray(gap_s, dtype=float)
    if not len(requests) or not len(gap):
        return ()
    return (_decode_steps(requests, gap_end, gap, min_gaps)
            + _prefill_steps(requests, gap_end, gap, max_prefill_steps))


def _decode_steps(requests: _Requests, gap_end: np.ndarray, gap: np.ndarray,
                  min_gaps: int) -> tuple[StepTime, ...]:
    """Decode step times by batch size: the median gap over the gaps in which no request
    waited and the batch did not change."""
    gap_start = gap_end - gap
    batch = requests.decoding(gap_end)
    clean = ((requests.waiting(gap_start, gap_end) == 0)
             & (batch == requests.decoding(gap_start)) & (batch > 0))
    kv = requests.context((gap_start + gap_end) / 2)
    found = []
    for b in np.unique(batch[clean]):
        pick = clean & (batch == b)
        count = int(pick.sum())
        if count >= min_gaps:
            found.append(StepTime(batch=int(b), kv_tokens=float(np.mean(kv[pick])),
                                  step_ms=float(np.median(gap[pick]) * 1000.0), gaps=count))
    return tuple(found)


def _prefill_steps(requests: _Requests, gap_end: np.ndarray, gap: np.ndarray,
                   limit: int) -> tuple[StepTime, ...]:
    """Steps that prefilled one request's prompt beside b decodes: for each request that was
    the only one waiting, the decoding streams' gaps that ended with its first token."""
    order = np.argsort(gap_end, kind="stable")
    ends, lengths = gap_end[order], gap[order]
    found = []
    for i in np.argsort(requests.first, kind="stable"):
        first = requests.first[i]
        lo, hi = np.searchsorted(ends, [first - MATCH_MAX_S, first + MATCH_MAX_S])
        near = lengths[lo:hi][np.abs(ends[lo:hi] - first) <= MATCH_SHARE * lengths[lo:hi]]
        if not len(near):
            continue
        step = float(np.median(near))
        start, mid = np.array([first - step]), np.array([first - step / 2])
        batch = int(requests.decoding(mid)[0])
        # Alone in waiting (it counts itself), no more matching gaps than streams decoding, and
        # no stream ending within the gap: one that did would show it spanned two steps.
        if batch < 1 or len(near) > batch or requests.waiting(start, np.array([first]))[0] != 1:
            continue
        edge = min(MATCH_SHARE * step, MATCH_MAX_S)
        if requests.ended(start[0] + edge, first - edge):
            continue
        found.append(StepTime(batch=batch, kv_tokens=float(requests.context(mid)[0]),
                              step_ms=step * 1000.0, gaps=len(near),
                              prompt_tokens=int(requests.prompt[i])))
    if len(found) > limit:
        found = [found[int(k)] for k in np.linspace(0, len(found) - 1, limit).round()]
    return tuple(found)

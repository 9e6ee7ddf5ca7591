"""Shaping a trace for replay: a time window, a down-sample that keeps the rate profile, a rate
scale and a length cap. Deterministic for a seed.

Steps, in this order:

1. window: the requests with start_s <= arrival_s < end_s (seconds from the first request), or
   those of the last `last_days` days before the last request; arrivals are shifted to start
   at 0 again.
2. sample: `sample_requests` requests, one drawn at random from each of that many equal runs of
   consecutive requests (stratified), so the rate over time keeps its shape at
   sample_requests / len(trace) of its level (scale the rate back with `rate_scale` if wanted).
3. cap: with `max_model_len` L, the output keeps its length up to L - 1 tokens and the prompt is
   cut to what is left (L - output), as the real-engine replayer does, since the decode work is
   what a request costs most; max_tokens is capped to the output's room, the prefix hashes are
   cut to the blocks of the shorter prompt, and the text of a cut prompt is dropped (it no
   longer matches its length; token ids are synthesised instead).
4. rate: arrivals divided by `rate_scale` (2 = twice the rate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.errors import ConfigError, SettingError
from autotune.traffic.columns import parse_iso_s
from autotune.traffic.trace import Trace

DAY_S = 86_400.0


@dataclass(frozen=True)
class ShapeSpec:
    start_s: float | None = None
    end_s: float | None = None
    last_days: float | None = None
    sample_requests: int | None = None
    rate_scale: float = 1.0
    max_model_len: int | None = None
    seed: int = 0

    def check(self) -> None:
        if self.last_days is not None and (self.start_s is not None or self.end_s is not None):
            raise SettingError("give either {start_s}/{end_s} or {last_days}, not both")
        if self.last_days is not None and self.last_days <= 0:
            raise SettingError("{last_days} must be positive")
        if self.start_s is not None and self.end_s is not None and self.end_s <= self.start_s:
            raise SettingError("{end_s} must be after {start_s}")
        if self.sample_requests is not None and self.sample_requests < 1:
            raise SettingError("{sample_requests} must be at least 1")
        if not (self.rate_scale > 0 and math.isfinite(self.rate_scale)):
            raise SettingError("{rate_scale} must be a positive number")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise SettingError("{max_model_len} must be at least 2 (one prompt and one output "
                               "token)")


def time_offset_s(value: str, trace: Trace) -> float:
    """A window bound: seconds from the first request, or an ISO 8601 time where the trace
    knows its wall-clock start."""
    try:
        return float(value)
    except ValueError:
        pass
    if trace.start_epoch_s is None:
        raise ConfigError(f"{value!r} is not a number of seconds, and trace {trace.name} has no "
                          "wall-clock times to place an ISO time in; give seconds from its start")
    try:
        return parse_iso_s(value) - trace.start_epoch_s
    except ValueError:
        raise ConfigError(f"{value!r} is neither seconds nor an ISO 8601 time") from None


def window(trace: Trace, spec: ShapeSpec) -> Trace:
    if spec.last_days is not None:
        lo, hi = trace.duration_s - spec.last_days * DAY_S, math.inf
    elif spec.start_s is None and spec.end_s is None:
        return trace
    else:
        lo = spec.start_s if spec.start_s is not None else -math.inf
        hi = spec.end_s if spec.end_s is not None else math.inf
    index = np.flatnonzero((trace.arrival_s >= lo) & (trace.arrival_s < hi))
    if not len(index):
        raise ConfigError(f"the window [{lo:g}, {hi:g}) s holds no requests; trace {trace.name} "
                          f"spans 0 to {trace.duration_s:g} s")
    return trace.take(index)


def sample(trace: Trace, count: int, seed: int) -> Trace:
    if count >= len(trace):
        return trace
    rng = np.random.default_rng(seed)
    edges = (np.arange(count + 1) * len(trace)) // count
    index = rng.integers(edges[:-1], edges[1:])
    return trace.take(index)


def cap_lengths(trace: Trace, max_model_len: int) -> Trace:
    output = np.minimum(trace.output_tokens, max_model_len - 1)
    prompt = np.minimum(trace.prompt_tokens, max_model_len - output)
    room = max_model_len - prompt
    cut = prompt < trace.prompt_tokens
    block = trace.hash_block_tokens
    hashes = tuple(ids[:-(-int(p) // block)] if c else ids
                   for ids, p, c in zip(trace.hash_ids, prompt, cut, strict=True))
    max_tokens = tuple(None if m is None else min(m, int(r))
                       for m, r in zip(trace.max_tokens, room, strict=True)) if trace.max_tokens else ()
    texts = tuple(None if c else t for t, c in zip(trace.texts, cut, strict=True)) if trace.texts else ()
    return trace.evolve(prompt_tokens=prompt, output_tokens=output, hash_ids=hashes,
                        max_tokens=max_tokens, texts=texts)


def shape(trace: Trace, spec: ShapeSpec) -> Trace:
    """The shaped trace (see the module docstring); the same spec and seed give the same trace."""
    spec.check()
    shaped = window(trace, spec)
    if spec.sample_requests is not None:
        shaped = sample(shaped, spec.sample_requests, spec.seed)
    if spec.max_model_len is not None:
        shaped = cap_lengths(shaped, spec.max_model_len)
    if spec.rate_scale != 1.0:
        shaped = shaped.evolve(arrival_s=shaped.arrival_s / spec.rate_scale)
    return shaped

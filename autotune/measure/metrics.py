"""Turns request records (from the simulator or a real replay) into a LatencySummary."""

from __future__ import annotations

import math

import numpy as np

from autotune.domain.records import LatencySummary, ReplayResult, percentile_ms
from autotune.domain.slo import SLO

_PCTS = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99_9": 99.9}


def _goodput(result: ReplayResult, slo: SLO, duration_s: float) -> float:
    """Requests per second that finished within every per-request ceiling (TTFT, TPOT, E2E),
    as `vllm bench serve --goodput` counts them; ITL ceilings have no per-request form."""
    ok = ~result.failed
    out = np.maximum(result.output_tokens, 2)
    per_request = {"ttft": result.ttft_s, "e2e": result.e2e_s,
                   "tpot": (result.e2e_s - result.ttft_s) / (out - 1)}
    for c in slo.ceilings:
        if c.metric in per_request:
            ok &= np.nan_to_num(per_request[c.metric], nan=np.inf) * 1000.0 <= c.limit_ms
    return float(ok.sum() / duration_s)


def summarize(result: ReplayResult, slo: SLO | None = None) -> LatencySummary:
    ok = ~result.failed
    n = len(result.scheduled_s)
    out = result.output_tokens[ok]
    ttft = result.ttft_s[ok]
    e2e = result.e2e_s[ok]
    # TPOT as vLLM's benchmark defines it: (E2E - TTFT) / (tokens - 1), for requests of >1 token.
    multi = out > 1
    tpot = (e2e[multi] - ttft[multi]) / (out[multi] - 1)
    duration = max(result.wall_s, 1e-9)
    fields: dict[str, float] = {}
    series = (("ttft", ttft, None), ("tpot", tpot, None), ("itl", result.itl_s, result.itl_weight),
              ("e2e", e2e, None))
    for name, values, weights in series:
        for label, q in _PCTS.items():
            fields[f"{name}_{label}_ms"] = percentile_ms(np.asarray(values, dtype=float), q, weights)
    return LatencySummary(
        requests=n,
        completed=int(ok.sum()),
        error_rate=float(1.0 - ok.mean()) if n else 0.0,
        duration_s=duration,
        output_tok_s=float(out.sum() / duration),
        request_s=float(ok.sum() / duration),
        engine_stats=dict(result.engine_stats),
        step_times=result.step_times,
        send_lag_p99_ms=(percentile_ms(result.send_lag_s, 99.0)
                         if result.send_lag_s is not None else None),
        goodput_request_s=_goodput(result, slo, duration) if slo is not None else None,
        queue_p50_ms=(percentile_ms(result.queue_s[ok], 50.0)
                      if result.queue_s is not None else None),
        queue_p99_ms=(percentile_ms(result.queue_s[ok], 99.0)
                      if result.queue_s is not None else None),
        **fields,
    )


def slo_violations(summary: LatencySummary, slo: SLO, max_error_rate: float = 0.0) -> dict[str, float]:
    """Per ceiling, how far over it the summary is, relative to the ceiling (<= 0: within).

    Errors count as a violation of their own: a config that drops requests is not serving them.
    """
    values = summary.model_dump()
    out = {}
    for c in slo.ceilings:
        measured = values[c.key]
        # No measurement (every request failed) counts as fully over the ceiling.
        out[c.key] = 1.0 if math.isnan(measured) else (measured - c.limit_ms) / c.limit_ms
    out["error_rate"] = summary.error_rate - max_error_rate
    return out


def meets(summary: LatencySummary, slo: SLO) -> bool:
    return all(v <= 0 for v in slo_violations(summary, slo).values())


# The percentiles kept of the replay at capacity: enough to draw its latency distribution (CDF)
# without keeping every request (every 5th, the tails at 1/99/99.9, and the extremes).
QUANTILE_PCTS: tuple[float, ...] = (0.0, 1.0, *(float(q) for q in range(5, 100, 5)), 99.0,
                                    99.9, 100.0)


def latency_quantiles_ms(result: ReplayResult,
                         pcts: tuple[float, ...] = QUANTILE_PCTS) -> dict[str, list[float]]:
    """TTFT, TPOT and E2E of a replay's completed requests at `pcts`, in ms, as summarize()
    takes its percentiles (its P50 is the summary's): {"pcts": [...], "ttft_ms": [...], ...}.
    NaN where no request has the value."""
    ok = ~result.failed
    out, ttft, e2e = result.output_tokens[ok], result.ttft_s[ok], result.e2e_s[ok]
    multi = out > 1
    series = {"ttft_ms": ttft, "tpot_ms": (e2e[multi] - ttft[multi]) / (out[multi] - 1),
              "e2e_ms": e2e}
    found: dict[str, list[float]] = {"pcts": list(pcts)}
    for name, values in series.items():
        v = np.asarray(values, dtype=float)
        v = v[~np.isnan(v)]
        found[name] = ([float(x) for x in np.percentile(v, pcts) * 1000.0] if len(v)
                       else [math.nan] * len(pcts))
    return found


def concurrency(result: ReplayResult) -> tuple[float, int]:
    """(mean, peak) requests in flight over a replay: each completed request from its intended
    send time to its last token. The mean is the time average (Little's law: the sum of E2E
    over the wall time), so output tok/s / mean = output tokens per second of E2E, a user's
    token rate: what `vllm bench sweep plot_pareto` calls tokens/s/user."""
    ok = ~result.failed & ~np.isnan(result.e2e_s)
    start = np.asarray(result.scheduled_s, dtype=float)[ok]
    e2e = np.asarray(result.e2e_s, dtype=float)[ok]
    if not len(e2e):
        return 0.0, 0
    times = np.concatenate([start, start + e2e])
    steps = np.concatenate([np.ones(len(start)), -np.ones(len(start))])
    order = np.lexsort((steps, times))  # at one instant, an end before a start
    peak = int(np.cumsum(steps[order]).max())
    return float(e2e.sum() / max(result.wall_s, 1e-9)), peak

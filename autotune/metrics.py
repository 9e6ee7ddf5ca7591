"""Turns request records (from the simulator or a real replay) into a LatencySummary."""

from __future__ import annotations

import math

import numpy as np

from autotune.records import LatencySummary, ReplayResult, percentile_ms
from autotune.slo import SLO

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

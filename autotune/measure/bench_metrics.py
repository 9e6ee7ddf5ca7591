"""One replay's figures under the names and definitions `vllm bench serve` prints and saves, so a
sweep's rows read as that tool's JSON results do.

From `vllm/benchmarks/serve.py::calculate_metrics` (vLLM 0.32): over the successful requests,
request_throughput = completed / duration, output_throughput = output tokens / duration,
total_token_throughput = (prompt + output tokens) / duration; TTFT and E2E ("e2el") per request;
TPOT = (E2E - TTFT) / (output tokens - 1) for requests of more than one token; ITL every gap
between two streamed chunks, all requests' together. Each as mean, median and percentiles with
numpy's default (linear) method, in ms (`benchmark`'s `process_one_metric`: `mean_ttft_ms`,
`median_ttft_ms`, `p99_ttft_ms`, ...). Where vLLM writes 0 for a metric with no values
(`np.mean(x or 0)`) this writes NaN (null in JSON): no request, no latency.

The replay's duration is ReplayResult.wall_s, first send to last completion, as vLLM's
`benchmark_duration` runs from the first request's start to the last one's end.
"""

from __future__ import annotations

import math

import numpy as np

from autotune.domain.records import ReplayResult

METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "median", "p99")


def _stats_ms(values: np.ndarray, weights: np.ndarray | None) -> dict[str, float]:
    """mean, median and P99 in ms. Weights: how many gaps each value stands for (the simulator
    sums a run of equal decode steps into one); then the inverted CDF, as the summary does."""
    keep = ~np.isnan(values)
    v = values[keep] * 1000.0
    if not len(v):
        return dict.fromkeys(STATS, math.nan)
    if weights is None or np.all(weights[keep] == 1):
        return {"mean": float(np.mean(v)), "median": float(np.median(v)),
                "p99": float(np.percentile(v, 99))}
    w = weights[keep]
    return {"mean": float(np.average(v, weights=w)),
            "median": float(np.percentile(v, 50, weights=w, method="inverted_cdf")),
            "p99": float(np.percentile(v, 99, weights=w, method="inverted_cdf"))}


def serve_metrics(result: ReplayResult, prompt_tokens: np.ndarray) -> dict[str, float | int]:
    """vllm bench serve's figures of one replay; prompt_tokens: each request's, in replay order."""
    ok = ~np.asarray(result.failed, dtype=bool)
    out = np.asarray(result.output_tokens, dtype=float)[ok]
    ttft = np.asarray(result.ttft_s, dtype=float)[ok]
    e2e = np.asarray(result.e2e_s, dtype=float)[ok]
    multi = out > 1
    tpot = (e2e[multi] - ttft[multi]) / (out[multi] - 1)
    duration = max(float(result.wall_s), 1e-9)
    total_out = float(out.sum())
    total_in = float(np.asarray(prompt_tokens, dtype=float)[ok].sum())
    row: dict[str, float | int] = {
        "duration": duration, "completed": int(ok.sum()), "failed": int((~ok).sum()),
        "total_input_tokens": int(total_in), "total_output_tokens": int(total_out),
        "request_throughput": float(ok.sum()) / duration,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
    }
    itl_weights = np.asarray(result.itl_weight, dtype=float)
    series = {"ttft": (ttft, None), "tpot": (tpot, None),
              "itl": (np.asarray(result.itl_s, dtype=float), itl_weights), "e2el": (e2e, None)}
    for name in METRICS:
        values, weights = series[name]
        for stat, value in _stats_ms(values, weights).items():
            row[f"{stat}_{name}_ms"] = value
    return row


CLUMP_GAP_S = 1e-3  # sends this close answer requests that finished in the same engine step


def send_clump_mean(sent_s: np.ndarray, skip: int) -> float:
    """Requests per clump of sends after the first `skip` (a closed loop's first round, sent
    at once by construction): a clump is a run of sends each under CLUMP_GAP_S after the one
    before. With equal request lengths, 1 means the clients are desynchronised and the
    concurrency means they are phase-locked (docs/guides/simulator.md). Not one of vllm bench
    serve's figures: NaN where fewer than two sends are left."""
    sends = np.sort(np.asarray(sent_s, dtype=float))[skip:]
    if len(sends) < 2:
        return math.nan
    return len(sends) / (1 + int(np.sum(np.diff(sends) >= CLUMP_GAP_S)))

"""What a trace looks like: rate, burstiness, lengths, prefix sharing and the hot / warm / cold
mix of the tuning guide.

A request is *hot* if its max_tokens (its output length where max_tokens is unknown) is at most
`hot_max_tokens`;
otherwise *warm* if its first prefix block is one of the high-frequency prefixes (shared by at
least `warm_min_share` of all requests); otherwise *cold*.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from autotune.traffic.trace import Trace


def _percentiles(values: np.ndarray) -> dict[str, float]:
    return {f"p{q}": float(np.percentile(values, q)) for q in (50, 90, 99)}


def prefix_share_ratio(trace: Trace) -> float:
    """The fraction of prompt tokens whose leading prefix blocks an earlier request already
    had: the hit rate of an unbounded prefix cache."""
    seen: set[int] = set()
    shared = 0
    for i, ids in enumerate(trace.hash_ids):
        run = 0
        for h in ids:
            if h not in seen:
                break
            run += 1
        shared += min(run * trace.hash_block_tokens, int(trace.prompt_tokens[i]))
        seen.update(ids)
    total = int(trace.prompt_tokens.sum())
    return shared / total if total else 0.0


def paths(trace: Trace, *, hot_max_tokens: int = 512, warm_min_share: float = 0.01) -> list[str]:
    firsts = Counter(ids[0] for ids in trace.hash_ids if ids)
    frequent = {h for h, n in firsts.items() if n >= max(2, warm_min_share * len(trace))}
    budget = trace.budget_tokens()
    out = []
    for i, ids in enumerate(trace.hash_ids):
        if int(budget[i]) <= hot_max_tokens:
            out.append("hot")
        elif ids and ids[0] in frequent:
            out.append("warm")
        else:
            out.append("cold")
    return out


def trace_stats(trace: Trace, *, hot_max_tokens: int = 512,
                warm_min_share: float = 0.01) -> dict[str, Any]:
    gaps = np.diff(trace.arrival_s)
    mix = Counter(paths(trace, hot_max_tokens=hot_max_tokens, warm_min_share=warm_min_share))
    n = len(trace)
    return {
        "name": trace.name,
        "requests": n,
        "duration_s": trace.duration_s,
        "rate_rps": n / trace.duration_s if trace.duration_s else float(n),
        "burstiness_cv": float(gaps.std() / gaps.mean()) if len(gaps) and gaps.mean() > 0 else 0.0,
        "prompt_tokens": _percentiles(trace.prompt_tokens),
        "output_tokens": _percentiles(trace.output_tokens),
        "prefix_share_ratio": prefix_share_ratio(trace),
        "path_mix": {p: mix.get(p, 0) / n for p in ("hot", "warm", "cold")},
    }

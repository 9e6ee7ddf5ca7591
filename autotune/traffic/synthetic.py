"""Deterministic synthetic traffic, for demos and tests (the bundled demo trace comes from here).

Chat-like: Poisson (or Gamma, burstier) arrivals modulated by bursts, lognormal prompt and output
lengths, and a few shared system prompts (shared prefix blocks) that most requests start with;
optionally a share of documents (long prompts, short answers) mixed in.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from autotune.atomic import atomic_write_text


def chat_trace_rows(
    *, requests: int = 600, rate_rps: float = 5.0, seed: int = 0, block_tokens: int = 64,
    system_prompts: int = 4, system_prompt_tokens: int = 512, shared_fraction: float = 0.7,
    arrivals: str = "poisson", gap_cv: float = 2.0, document_share: float = 0.0,
) -> list[dict[str, object]]:
    """arrivals: "poisson" (exponential gaps) or "gamma" (gaps with coefficient of variation
    gap_cv: above 1 is burstier than Poisson). document_share: the fraction of requests that
    are documents (long prompts, short answers, no system prompt) rather than chat turns. The
    defaults give the bundled demo trace."""
    if arrivals not in ("poisson", "gamma"):
        raise ValueError(f"arrivals must be poisson or gamma, not {arrivals!r}")
    rng = np.random.default_rng(seed)
    # Bursty arrivals: the rate alternates between calm and 3x bursts every ~20 s.
    if arrivals == "gamma":
        shape = 1.0 / gap_cv**2
        gaps = rng.gamma(shape, 1.0 / (rate_rps * shape), size=requests)
    else:
        gaps = rng.exponential(1.0 / rate_rps, size=requests)
    t = np.cumsum(gaps)
    burst = (np.floor(t / 20.0) % 3 == 2)
    gaps = np.where(burst, gaps / 3.0, gaps * 1.5)
    arrival = np.cumsum(gaps) - gaps[0]
    user_tokens = np.clip(rng.lognormal(np.log(300), 0.9, size=requests), 8, 8000).astype(int)
    output = np.clip(rng.lognormal(np.log(180), 0.8, size=requests), 4, 2000).astype(int)
    shared = rng.random(requests) < shared_fraction
    which = rng.integers(0, system_prompts, size=requests)
    if document_share > 0:  # a stream of its own, so the chat draws stay as they were
        docs = np.random.default_rng([seed, 1])
        is_doc = docs.random(requests) < document_share
        user_tokens = np.where(is_doc, np.clip(docs.lognormal(np.log(6000), 0.6, requests), 1000,
                                               30000).astype(int), user_tokens)
        output = np.where(is_doc, np.clip(docs.lognormal(np.log(120), 0.6, requests), 8,
                                          1000).astype(int), output)
        shared &= ~is_doc
    sys_blocks = system_prompt_tokens // block_tokens
    next_id = system_prompts * sys_blocks
    rows = []
    for i in range(requests):
        prompt = int(user_tokens[i]) + (system_prompt_tokens if shared[i] else 0)
        ids = list(range(which[i] * sys_blocks, (which[i] + 1) * sys_blocks)) if shared[i] else []
        unique_blocks = (prompt - len(ids) * block_tokens) // block_tokens
        ids += list(range(next_id, next_id + unique_blocks))
        next_id += unique_blocks
        rows.append({"arrival_s": round(float(arrival[i]), 6), "prompt_tokens": prompt,
                     "output_tokens": int(output[i]), "hash_ids": ids,
                     "hash_block_tokens": block_tokens})
    return rows


def write_jsonl(rows: list[dict[str, object]], path: Path) -> None:
    atomic_write_text(path, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))

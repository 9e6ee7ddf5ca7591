"""Prompt token ids that reproduce a trace's lengths exactly and keep its prefix sharing.

Equal prefix-block hashes give equal token blocks, so an engine's prefix cache sees the same
sharing production had; the rest of each prompt is unique to its request. Deterministic for a
seed. Token ids avoid the lowest ids (special tokens in most tokenizers).
"""

from __future__ import annotations

import numpy as np

from autotune.traffic.trace import Trace

FIRST_ID = 10


def _block(seed: int, key: int, length: int, vocab_size: int) -> np.ndarray:
    rng = np.random.default_rng([seed, key & 0xFFFFFFFF, key >> 32 & 0xFFFFFFFF])
    return rng.integers(FIRST_ID, vocab_size, size=length, dtype=np.int64)


def prompt_token_ids(trace: Trace, index: int, *, vocab_size: int, seed: int = 0,
                     max_prompt_tokens: int | None = None) -> list[int]:
    length = int(trace.prompt_tokens[index])
    if max_prompt_tokens is not None:
        length = min(length, max_prompt_tokens)
    parts: list[np.ndarray] = []
    have = 0
    for h in trace.hash_ids[index]:
        if have >= length:
            break
        parts.append(_block(seed, int(h) + 1, trace.hash_block_tokens, vocab_size))
        have += trace.hash_block_tokens
    if have < length:  # the unique tail of this request
        parts.append(_block(seed, -(index + 1) & 0xFFFFFFFFFFFF, length - have, vocab_size))
    return np.concatenate(parts)[:length].tolist() if parts else []

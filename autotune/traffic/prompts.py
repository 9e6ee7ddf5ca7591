"""Prompt token ids that reproduce a trace's lengths exactly and keep its prefix sharing.

Equal prefix-block hashes give equal token blocks, so an engine's prefix cache sees the same
sharing production had; the rest of each prompt is unique to its request. Deterministic for a
seed. Token ids avoid the lowest ids (special tokens in most tokenizers).
"""

from __future__ import annotations

import numpy as np

from autotune.traffic.trace import Trace

FIRST_ID = 10


SHARED, UNIQUE = 0, 1  # separate key spaces: no hash id can stand for a request's own tail


def _block(seed: int, space: int, key: int, length: int, vocab_size: int) -> np.ndarray:
    key &= 0xFFFFFFFFFFFFFFFF  # hash ids are 64-bit, signed or not
    rng = np.random.default_rng([seed & 0xFFFFFFFF, space, key & 0xFFFFFFFF, key >> 32])
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
        parts.append(_block(seed, SHARED, int(h), trace.hash_block_tokens, vocab_size))
        have += trace.hash_block_tokens
    if have < length:  # the unique tail of this request
        parts.append(_block(seed, UNIQUE, index, length - have, vocab_size))
    return np.concatenate(parts)[:length].tolist() if parts else []

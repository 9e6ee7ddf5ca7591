from __future__ import annotations

from autotune.traffic.prompts import FIRST_ID, prompt_token_ids
from autotune.traffic.trace import Trace


def _trace() -> Trace:
    return Trace.from_rows("t", [
        {"arrival_s": 0, "prompt_tokens": 100, "output_tokens": 5, "hash_ids": [1, 2, 3],
         "hash_block_tokens": 32},
        {"arrival_s": 1, "prompt_tokens": 70, "output_tokens": 5, "hash_ids": [1, 2, 9],
         "hash_block_tokens": 32},
        {"arrival_s": 2, "prompt_tokens": 40, "output_tokens": 5},
    ])


def test_lengths_are_exact_and_ids_in_range() -> None:
    t = _trace()
    for i, n in enumerate((100, 70, 40)):
        ids = prompt_token_ids(t, i, vocab_size=500)
        assert len(ids) == n and min(ids) >= FIRST_ID and max(ids) < 500
    assert len(prompt_token_ids(t, 0, vocab_size=500, max_prompt_tokens=50)) == 50


def test_equal_hashes_give_equal_blocks_and_the_rest_differs() -> None:
    t = _trace()
    a, b = prompt_token_ids(t, 0, vocab_size=500), prompt_token_ids(t, 1, vocab_size=500)
    assert a[:64] == b[:64]
    assert a[64:70] != b[64:70]


def test_deterministic_per_seed() -> None:
    t = _trace()
    assert prompt_token_ids(t, 2, vocab_size=500) == prompt_token_ids(t, 2, vocab_size=500)
    assert prompt_token_ids(t, 2, vocab_size=500, seed=1) != prompt_token_ids(t, 2, vocab_size=500)

"""Engine arguments whose values change the model's numerics (what it computes), not only
its speed: the built-in judgement for the arguments autotune knows, used wherever a space does
not mark a parameter itself (`affects_accuracy:` in the space file).

Each entry lists the values that keep the model's numerics; every other value changes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Numerics:
    keeps: tuple[Any, ...]  # values that leave the model's numerics as they are
    why: str  # what the other values change, for people
    source: str  # where vLLM does it


BUILTIN: dict[str, Numerics] = {
    # auto is the model's own dtype; the catalogue's models all run bf16 activations.
    "kv_cache_dtype": Numerics(
        ("auto", "bfloat16"),
        "an 8-bit KV cache rounds the keys and values attention reads",
        "vllm/config/cache.py::CacheConfig._validate_cache_dtype (\"may cause accuracy drop "
        "without a proper scaling factor\")"),
    # null: no drafting.
    "speculative_config": Numerics(
        (None,),
        "speculative decoding verifies drafts by rejection sampling, with other batch shapes "
        "and kernels: outputs can differ from plain decoding",
        "vllm/v1/sample/rejection_sampler.py::RejectionSampler"),
}


def builtin_changes(name: str, value: Any) -> bool:
    """Whether the built-in judgement says this value of this argument changes numerics."""
    known = BUILTIN.get(name)
    return known is not None and value not in known.keeps


def decoded(value: Any) -> Any:
    """A nested config's choice (JSON text, e.g. speculative_config) as the mapping it is."""
    if isinstance(value, str) and value.startswith("{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def same_value(marked: Any, value: Any) -> bool:
    """Whether a marked value and a parameter's value are one (JSON text or its mapping)."""
    return bool(marked == value or decoded(marked) == decoded(value))

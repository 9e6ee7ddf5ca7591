"""Parallel strategies: how one deployment's GPUs are split, as vLLM's recipes name them.

- TP: tensor parallelism over every GPU (`--tensor-parallel-size G`); experts, if any, split
  column-wise over the ranks like any other layer.
- TEP: tensor parallelism with expert parallelism (`--tensor-parallel-size G
  --enable-expert-parallel`): attention as TP, each expert whole on one rank.
- DEP: data-parallel attention with expert parallelism (`--data-parallel-size D
  [--tensor-parallel-size T] --enable-expert-parallel`, D x T = G): every rank group holds
  the attention weights and its own KV cache and schedules its own requests; the experts are
  sharded over all G ranks; the ranks step through the MoE layers in lockstep.
- DP: for a dense model, D independent replicas of T-way tensor parallelism.

A search space names the families it searches (`parallelism: {choices: [tp, tep, dep, dp]}`);
a deployment binds them to the layouts its GPU count and its model's shards allow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# The search-space parameter that stands for the three engine arguments below.
PARAM = "parallelism"
ENGINE_ARGS = ("tensor_parallel_size", "data_parallel_size", "enable_expert_parallel")
FAMILIES = ("tp", "tep", "dep", "dp")
_NAME = re.compile(r"^(?:DP(\d+))?(?:X?TP(\d+))?(\+EP)?$")  # matched upper-cased


@dataclass(frozen=True)
class Strategy:
    tensor_parallel_size: int
    data_parallel_size: int = 1
    expert_parallel: bool = False

    @property
    def gpus(self) -> int:
        return self.tensor_parallel_size * self.data_parallel_size

    @property
    def family(self) -> str:
        if self.data_parallel_size == 1:
            return "tep" if self.expert_parallel else "tp"
        return "dep" if self.expert_parallel else "dp"

    @property
    def name(self) -> str:
        """"TP8", "TP8+EP", "DP8+EP", "DP4xTP2+EP", "DP2xTP4": what people call them."""
        tp, dp = self.tensor_parallel_size, self.data_parallel_size
        base = f"TP{tp}" if dp == 1 else (f"DP{dp}" if tp == 1 else f"DP{dp}xTP{tp}")
        return base + ("+EP" if self.expert_parallel else "")

    def engine_args(self) -> dict[str, Any]:
        return {"tensor_parallel_size": self.tensor_parallel_size,
                "data_parallel_size": self.data_parallel_size,
                "enable_expert_parallel": self.expert_parallel}

    @classmethod
    def parse(cls, name: str) -> Strategy:
        match = _NAME.match(name.strip().upper().replace(" ", ""))
        if not match or not (match.group(1) or match.group(2)):
            raise ValueError(f"{name!r} is not a parallel strategy (examples: TP8, TP8+EP, "
                             "DP8+EP, DP4xTP2+EP, DP2xTP4)")
        return cls(int(match.group(2) or 1), int(match.group(1) or 1), bool(match.group(3)))

    @classmethod
    def of(cls, values: dict[str, Any]) -> Strategy:
        """The strategy of a config's engine arguments (an unset one at vLLM's default)."""
        return cls(int(values.get("tensor_parallel_size") or 1),
                   int(values.get("data_parallel_size") or 1),
                   bool(values.get("enable_expert_parallel")))


def candidates(gpu_count: int, moe: bool, families: tuple[str, ...] = FAMILIES) -> list[Strategy]:
    """Every layout of exactly gpu_count GPUs in the given families, before any model rule:
    TP=G first, then DP ranks from few to many."""
    out = []
    for dp in (d for d in range(1, gpu_count + 1) if gpu_count % d == 0):
        tp = gpu_count // dp
        options = [Strategy(tp, dp, False)] + ([Strategy(tp, dp, True)] if moe else [])
        for s in options:
            dense_dp_only = s.family == "dp" and moe  # vLLM couples MoE ranks: use DEP
            pointless_ep = s.expert_parallel and (not moe or s.gpus == 1)
            if s.family in families and not dense_dp_only and not pointless_ep:
                out.append(s)
    return out

"""Step times from a measured table (autotune/workers/sim/step_table.py) instead of the roofline.

The `sim` backend's default step model where the repository has a table for the engine's GPU,
model, layout and precision (`step_model=measured`; `roofline` turns it off). Only the GPU
part of a step changes: memory, CPU costs, CUDA-graph padding of decode batches, the eager-mode
launch cost above the largest capture size and async overlap are the roofline model's. A DP
rank's step is read from the table at its own batch (padded to the largest rank's while all
ranks run CUDA graphs, as vLLM pads them). The table was sampled with every rank equally
loaded, but in a lockstep (DP + EP) step each GPU's experts serve the tokens all ranks
dispatch to them: where the table records the routed experts' share (`StepTable.moe_ms`) and
the ranks' batches differ (a step without graphs: one rank prefills while the others decode or
idle), that share is read at the ranks' mean batch instead of the rank's own. Without it a
lone 8,192-token prefill on a DP8+EP rank of DeepSeek-V4-Flash was priced as if all eight
ranks prefilled 8,192 tokens: 1.83 s, of which the routed experts 1.43 s; at the mean load
(1,024 tokens a rank) their share is 0.20 s.
With the batch fixed a decode step is affine in its context between the table's context grid
points, so the closed-form summing of decode runs keeps working with those points as breaks.
"""

from __future__ import annotations

import numpy as np

from autotune.domain.catalogue import GPU, Model
from autotune.workers.sim.perf import EngineShape, PerfModel, RankBatch
from autotune.workers.sim.profile import Profile
from autotune.workers.sim.step_table import StepTable


class MeasuredPerfModel(PerfModel):
    def __init__(self, gpu: GPU, model: Model, shape: EngineShape, profile: Profile,
                 table: StepTable, cpu_kvcache_space_gib: float = 1.0) -> None:
        super().__init__(gpu, model, shape, profile, cpu_kvcache_space_gib)
        self.table = table
        self._eager_s = profile.coefficients.eager_layer_s * model.sublayers / 2

    def _gpu_s(self, seqs: int, decode_kv_tokens: float, prefill_tokens: int, prefill_seqs: int,
               prefill_attn_pairs: float, graphed: bool) -> float:
        """seqs: the decode sequences, already padded to a captured size where graphed."""
        context = 0.0
        if prefill_tokens:  # pairs = chunk * (context + chunk / 2), per prompt on average
            chunk = prefill_tokens / max(prefill_seqs, 1)
            context = max(0.0, prefill_attn_pairs / prefill_tokens - chunk / 2)
        gpu = self.table.gpu_ms(seqs, decode_kv_tokens, prefill_tokens, context) / 1e3
        if not graphed and (not self.graphs or seqs + prefill_tokens > self.graphs[-1]):
            gpu += self._eager_s
        return gpu

    def step_parts_s(self, decode_seqs: int, decode_kv_tokens: float, prefill_tokens: int = 0,
                     prefill_seqs: int = 0, prefill_attn_pairs: float = 0.0
                     ) -> tuple[float, float]:
        tokens = decode_seqs + prefill_tokens
        graphed = prefill_tokens == 0 and 0 < tokens <= self._graph_max
        seqs = self._pad[tokens] if graphed else decode_seqs
        gpu = self._gpu_s(seqs, decode_kv_tokens, prefill_tokens, prefill_seqs,
                          prefill_attn_pairs, graphed)
        return gpu, self._cpu_s(decode_seqs + prefill_seqs, prefill_tokens)

    def _decode_cuts(self, seqs: int) -> list[float]:
        padded = self._pad[seqs] if 0 < seqs <= self._graph_max else seqs
        return [padded * k for k in self.table.kv_per_seq if k > 0]

    def _rank_s(self, b: RankBatch | None, padded_to: int | None,
                mean: tuple[float, float] | None = None) -> float:
        """One rank's step in a lockstep step; padded_to: the captured size every rank pads
        its decode batch to (None: no graphs this step, each runs its own tokens); mean: the
        ranks' mean (decode sequences, prefill tokens), whose tokens its experts serve."""
        if b is None:  # a dummy batch: one token over a context of one, no scheduling
            gpu = self._gpu_s(padded_to or 1, 1, 0, 0, 0.0, padded_to is not None)
            gpu += self._shared_experts_s(padded_to or 1, 0, mean)
            cpu = self._cpu_step
        else:
            seqs = padded_to if padded_to is not None and b.prefill_tokens == 0 else b.decode_seqs
            gpu = self._gpu_s(seqs, b.decode_kv_tokens, b.prefill_tokens, b.prefill_seqs,
                              b.prefill_attn_pairs, padded_to is not None and b.prefill_tokens == 0)
            gpu += self._shared_experts_s(seqs, b.prefill_tokens, mean)
            cpu = self._cpu_s(b.decode_seqs + b.prefill_seqs, b.prefill_tokens)
        return max(gpu, cpu) if self.overlap_cpu else gpu + cpu

    def _shared_experts_s(self, seqs: float, prefill_tokens: float,
                          mean: tuple[float, float] | None) -> float:
        """What a rank's step gains or loses when its experts serve the ranks' mean batch
        rather than its own (module notes); 0 where the ranks' batches are alike or the table
        does not say what its experts cost."""
        if mean is None or self.table.moe_ms is None:
            return 0.0
        table = self.table
        return (table.routed_moe_ms(*mean) - table.routed_moe_ms(seqs, prefill_tokens)) / 1e3

    def _padded_to(self, tokens: list[int], uniform_decode: bool) -> int | None:
        largest = max(tokens)
        if self.graphs and largest <= self._graph_max and uniform_decode:
            return self._pad[largest]
        return None

    def lockstep_step_s(self, batches: list[RankBatch | None]) -> float:
        tokens = [1 if b is None else b.decode_seqs + b.prefill_tokens for b in batches]
        uniform = all(b is None or b.prefill_tokens == 0 for b in batches)
        padded = self._padded_to(tokens, uniform)
        mean = None  # with graphs every rank runs the same padded batch
        if padded is None:
            mean = (sum(1 if b is None else b.decode_seqs for b in batches) / len(batches),
                    sum(0 if b is None else b.prefill_tokens for b in batches) / len(batches))
        return max(self._rank_s(b, padded, mean) for b in batches)

    def lockstep_decode_s(self, seqs: list[int], kv_tokens: list[int], idle_ranks: int,
                          steps: int) -> np.ndarray:
        padded = self._padded_to([*seqs, *([1] * idle_ranks)], True)
        ranks = len(seqs) + idle_ranks
        mean = None if padded is not None else ((sum(seqs) + idle_ranks) / ranks, 0.0)
        out = np.full(steps, self._rank_s(None, padded, mean) if idle_ranks else 0.0)
        step = np.arange(steps)
        for m, kv0 in zip(seqs, kv_tokens, strict=True):
            np.maximum(out, self._rank_decode_s(m, kv0 + m * step, padded, mean), out=out)
        return out

    def _rank_decode_s(self, seqs: int, kv_tokens: np.ndarray, padded_to: int | None,
                       mean: tuple[float, float] | None = None) -> np.ndarray:
        """`_rank_s` of one rank's decode-only steps (seqs sequences over kv_tokens context
        tokens at each step) for every step of a run at once."""
        graphed = padded_to is not None
        width = padded_to if padded_to is not None else seqs
        gpu = self.table.decode_run_ms(width, kv_tokens) / 1e3
        if not graphed and (not self.graphs or width > self.graphs[-1]):
            gpu += self._eager_s
        gpu += self._shared_experts_s(width, 0, mean)  # after, in the order _rank_s adds it
        cpu = self._cpu_s(seqs, 0)
        return np.maximum(gpu, cpu) if self.overlap_cpu else gpu + cpu

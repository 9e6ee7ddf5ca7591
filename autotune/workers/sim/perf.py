"""Memory accounting and step times of the simulated engine.

Memory follows vLLM's start-up profile: the engine may use `gpu_memory_utilization` of the GPU;
weights (per GPU), the activation peak of a `max_num_batched_tokens` forward pass (plus the
sampler's logits for `max_num_seqs` rows), the CUDA-graph pool and the CUDA context come off
that; what is left becomes KV blocks. An engine whose KV cache cannot hold one `max_model_len`
sequence, or that has no memory left at all, fails to start with class "oom", as vLLM does.
The CPU build keeps its KV cache in `VLLM_CPU_KVCACHE_SPACE` GiB instead.

A step's time is a roofline per part (linear layers: weight bytes against FLOPs, MoE layers
reading only the experts the batch touches, at their own share of the efficiencies; attention:
KV bytes read against FLOPs, at its own share), a floor per layer (kernel latencies that bound
a small batch even under CUDA graphs), plus tensor-parallel all-reduces, CPU costs per step,
per sequence (more for the first few of a step) and per prompt token, and the block-table walk. Decode-only
batches are padded to CUDA-graph capture sizes; without graphs (`enforce_eager`, or a batch
above `max_cudagraph_capture_size`) every layer pays its kernel launches.
The CUDA-graph pool grows with the largest capture size. Without async scheduling the CPU's
share of a step (scheduling, input preparation, output handling) runs between GPU steps and
adds to them; with it, vLLM prepares step n+1 while the GPU runs step n, so a step
takes the longer of the two (the residual synchronisation is not modelled). Coefficients come
from a profile.

Parallel layouts: tensor parallelism splits every layer over the ranks (all-reduces after
attention and after each MLP/MoE layer). With expert parallelism the routed experts sit whole
on their ranks; under TP (TEP) every rank already holds every token, so the MoE layer ends in
the same all-reduce. With data-parallel attention (DEP) each MoE layer gathers the other
ranks' tokens and reduce-scatters the results (vLLM's default all2all backend,
allgather_reducescatter), priced by a bandwidth/latency model of the GPU's link: the catalogue
has no measured all-to-all. Under DEP each DP rank is an engine of its own (attention weights
and KV cache replicated per rank, its own requests) and the ranks step in lockstep: while every
rank's batch fits a CUDA graph, all run as many tokens as the largest (vLLM pads them), a rank
with no work runs a one-token dummy batch, the MoE layers serve the tokens of all ranks, and
the step lasts as long as the slowest rank's (`lockstep_step_s`).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from autotune.domain.catalogue import DSV4, GPU, Model
from autotune.vocabulary import FailureClass
from autotune.workers.sim.kv_layout import kv_layout
from autotune.workers.sim.profile import Profile

GIB = 2**30
DSV4_PADDED_Q_HEADS = 64


class StartFailure(Exception):
    def __init__(self, message: str, failure_class: FailureClass) -> None:
        super().__init__(message)
        self.failure_class = failure_class


@dataclass(frozen=True)
class EngineShape:
    """The engine arguments the simulator models, defaults already resolved."""

    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    gpu_memory_utilization: float
    max_model_len: int
    tensor_parallel_size: int
    long_prefill_token_threshold: int = 0
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    async_scheduling: bool = False
    # None = vLLM's default, min(2 * max_num_seqs, 512); capped at max_num_batched_tokens.
    max_cudagraph_capture_size: int | None = None
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False


class RankBatch(NamedTuple):
    """What one engine step (of one DP rank) runs: the arguments of `PerfModel.step_s`."""

    decode_seqs: int
    decode_kv_tokens: int
    prefill_tokens: int
    prefill_seqs: int
    prefill_attn_pairs: float


def cudagraph_sizes(max_num_seqs: int, max_capture_size: int | None = None,
                    max_num_batched_tokens: int | None = None) -> tuple[int, ...]:
    """Capture sizes: 1, 2, 4, then every 8 up to the largest, which is max_capture_size or
    vLLM's default min(512, 2 * max_num_seqs), never above max_num_batched_tokens. vLLM lowers
    a largest size off its grid to the grid size below it, as here."""
    top = min(512, 2 * max_num_seqs) if max_capture_size is None else max_capture_size
    if max_num_batched_tokens is not None:
        top = min(top, max_num_batched_tokens)
    return tuple(s for s in (1, 2, 4, *range(8, top + 1, 8)) if s <= top)


class PerfModel:
    def __init__(self, gpu: GPU, model: Model, shape: EngineShape, profile: Profile,
                 cpu_kvcache_space_gib: float = 1.0) -> None:
        self.gpu, self.model, self.shape, self.profile = gpu, model, shape, profile
        c = profile.coefficients
        tp = shape.tensor_parallel_size
        # DeepSeek-V4's FlashMLA kernel pads a rank's query heads to 64 (get_padded_num_q_heads).
        self.layout = kv_layout(model, shape.kv_cache_dtype, tp, min_q_heads=(
            DSV4_PADDED_Q_HEADS if gpu.device == "gpu" and model.attention == DSV4 else 0))
        # vLLM pages in --block-size as given: a size the attention kernel cannot take is
        # refused by the rules before a start (DeepSeek-V4: 256), never rounded here (a hybrid
        # model's arrives raised: vllm_defaults.resolved_hybrid_block_size).
        bs = self.block_size = shape.block_size
        self.routed_params = min(model.routed_expert_params, model.total_params_b * 1e9)
        self.dense_params = model.total_params_b * 1e9 - self.routed_params
        self.k_over_e = model.experts_per_token / model.num_experts if model.num_experts else 0.0
        # Expert parallelism: experts whole over tp x dp ranks; else split over the TP ranks.
        # A DP rank's MoE layers serve every rank's tokens (the ranks step in lockstep).
        self.expert_ranks = tp * shape.data_parallel_size if shape.enable_expert_parallel else tp
        self.moe_token_factor = shape.data_parallel_size if (
            shape.enable_expert_parallel and model.num_experts) else 1
        self.active_expert_params = min(
            model.experts_per_token * self.routed_params / model.num_experts
            if model.num_experts else 0.0, model.active_params_b * 1e9)
        self.weight_bytes_gpu = (self.dense_params * model.dense_bytes_per_param / tp
                                 + self.routed_params * model.expert_bytes_per_param
                                 / self.expert_ranks)
        self.hbm_bps = gpu.hbm_tb_s * 1e12 * c.hbm_efficiency
        # FP8 weights run FP8 GEMMs; NVFP4 (W4A4) runs on FP4 tensor cores from compute
        # capability 10.0 (counted at the FP8 peak: the catalogue has no FP4 figure) and on
        # FP4 Marlin, with bf16 activations, below it (vllm/model_executor/layers/quantization/
        # utils/quant_utils.py::cutlass_fp4_supported). Weight-only formats compute in bf16.
        fp8_gemms = model.dense_quant in ("fp8", "fp8_block") or (
            model.dense_quant == "nvfp4" and gpu.compute_capability >= 100)
        peak = gpu.fp8_tflops if fp8_gemms else gpu.bf16_tflops
        self.flops = peak * 1e12 * c.compute_efficiency
        self.attn_bps = self.hbm_bps * c.attention_efficiency
        self.attn_flops = self.flops * c.attention_efficiency
        self.graphs = () if shape.enforce_eager or gpu.device == "cpu" else (
            cudagraph_sizes(shape.max_num_seqs, shape.max_cudagraph_capture_size,
                            shape.max_num_batched_tokens))
        # The CPU build never schedules asynchronously (vLLM's CPU platform turns it off).
        self.overlap_cpu = shape.async_scheduling and gpu.device == "gpu"
        self.block_bytes = bs * self.layout.bytes_per_token
        self.fixed_blocks_per_seq = math.ceil(self.layout.fixed_bytes_per_seq / self.block_bytes)
        self._graph_max = self.graphs[-1] if self.graphs else 0
        self._pad = [0] * (self._graph_max + 1)  # token count -> captured size it pads to
        for size in reversed(self.graphs):
            self._pad[1:size + 1] = [size] * size
        self._uncapped = self.layout.attended_cap_tokens == float("inf")
        self._base_cache: dict[object, float] = {}
        self._regimes: dict[int, tuple[list[float], list[tuple[float, float]]]] = {}
        # Per-layer costs are fitted on layers of a mixer and an MLP each; a layer pattern's
        # layers are one of them (Nemotron-H), half a layer each.
        self._layer_units = model.sublayers / 2
        self._block_cost = c.block_s * self._layer_units
        self._cpu_step, self._cpu_seq, self._cpu_token = (c.cpu_step_s, c.cpu_seq_s,
                                                          c.cpu_prefill_token_s)
        self._cpu_small_seq, self._small_batch = c.cpu_small_batch_seq_s, c.small_batch_seqs
        self.kv_gib = self._kv_gib(cpu_kvcache_space_gib)
        self.num_blocks = self._kv_blocks()

    def memory_breakdown_gib(self) -> dict[str, float]:
        s, m, c = self.shape, self.model, self.profile.coefficients
        tp = s.tensor_parallel_size
        activation = (s.max_num_batched_tokens * m.hidden_size * c.activation_bytes_per_token_hidden
                      + s.max_num_seqs * m.vocab_size / tp * 4) / GIB  # fp32 logits
        # The pool grows with the largest captured batch: cuda_graph_gib_per_512_seqs per 512
        # captured tokens (one per sequence in a decode batch).
        graphs = 0.0 if not self.graphs else (
            c.cuda_graph_gib + c.cuda_graph_gib_per_512_seqs * self.graphs[-1] / 512)
        return {"weights": self.weight_bytes_gpu / GIB, "activation": activation,
                "cuda_graphs": graphs, "context": c.context_gib}

    def _kv_gib(self, cpu_kvcache_space_gib: float) -> float:
        s, g, c = self.shape, self.gpu, self.profile.coefficients
        parts = self.memory_breakdown_gib()
        if g.device == "cpu":
            if parts["weights"] + cpu_kvcache_space_gib > g.memory_gib:
                raise StartFailure(f"out of memory: {parts['weights']:.1f} GiB of weights and a "
                                   f"{cpu_kvcache_space_gib:g} GiB KV cache exceed "
                                   f"{g.memory_gib:g} GiB", FailureClass.OOM)
            return cpu_kvcache_space_gib
        budget = g.memory_gib * s.gpu_memory_utilization
        if budget > g.memory_gib - c.driver_reserved_gib:
            raise StartFailure(
                f"CUDA out of memory: free memory on device ({g.memory_gib - c.driver_reserved_gib:.1f}"
                f" GiB) is less than desired GPU memory utilization "
                f"({s.gpu_memory_utilization}, {budget:.1f} GiB)", FailureClass.OOM)
        kv = budget - sum(parts.values())
        if kv <= 0:
            used = ", ".join(f"{k} {v:.2f}" for k, v in parts.items())
            raise StartFailure(f"No available memory for the cache blocks: {budget:.1f} GiB "
                               f"allowed, {used} GiB used", FailureClass.OOM)
        return kv

    def _kv_blocks(self) -> int:
        s = self.shape
        blocks = int(self.kv_gib * GIB // self.block_bytes)
        need = -(-s.max_model_len // self.block_size) + self.fixed_blocks_per_seq
        if blocks < need:
            raise StartFailure(
                f"To serve at least one request with max seq len ({s.max_model_len}), "
                f"{need * self.block_bytes / GIB:.2f} GiB KV cache is needed, which is larger "
                f"than the available KV cache memory ({self.kv_gib:.2f} GiB)", FailureClass.OOM)
        return blocks

    def _base_s(self, tokens: int, graphed: bool, moe_tokens: int | None = None) -> float:
        """The GPU part of a step's time that depends only on its (padded) token count: linear
        and MoE layers, all-reduces and kernel launches. moe_tokens: the tokens of all DP ranks
        that reach the experts (default: every rank padded to `tokens`)."""
        key: object = tokens * 2 + graphed if moe_tokens is None else (tokens, graphed, moe_tokens)
        cached = self._base_cache.get(key)
        if cached is not None:
            return cached
        m, c = self.model, self.profile.coefficients
        tp, ranks = self.shape.tensor_parallel_size, self.expert_ranks
        if moe_tokens is None:
            moe_tokens = tokens * self.moe_token_factor
        touched = 1.0 - (1.0 - self.k_over_e) ** moe_tokens if self.k_over_e else 0.0
        # The routed experts' bytes and FLOPs count 1 / moe_efficiency times: their grouped
        # GEMMs run below the dense GEMMs' rate.
        moe_weight = self.routed_params * touched * m.expert_bytes_per_param / ranks
        weight_bytes = (self.dense_params * m.dense_bytes_per_param / tp
                        + moe_weight / c.moe_efficiency)
        dense_active = m.active_params_b * 1e9 - self.active_expert_params
        linear_flops = 2 * (dense_active * tokens / tp
                            + self.active_expert_params * moe_tokens / ranks / c.moe_efficiency)
        base = (max(weight_bytes / self.hbm_bps, linear_flops / self.flops)
                + c.layer_floor_s * self._layer_units)
        link_bps = self.gpu.link_gb_s * 1e9
        dp = self.shape.data_parallel_size
        dep = self.shape.enable_expert_parallel and dp > 1 and m.num_experts > 0
        if dep:
            # vLLM's default all2all backend (allgather_reducescatter): before each MoE layer a
            # rank gathers the other DP ranks' tokens (bf16 hidden states), after it
            # reduce-scatters their results back.
            gathered_bytes = (moe_tokens - tokens) * m.hidden_size * 2
            base += 2 * m.moe_layers * (c.allreduce_latency_s + gathered_bytes / link_bps)
        if tp > 1:  # after every mixer and every MLP (MoE: not under DEP)
            allreduces = m.tp_allreduces - (m.moe_layers * m.allreduces_per_moe_layer if dep else 0)
            base += allreduces * (c.allreduce_latency_s
                                  + tokens * m.hidden_size * 2 * 2 * (tp - 1) / tp / link_bps)
        if not graphed and (not self.graphs or tokens > self.graphs[-1]):
            base += c.eager_layer_s * self._layer_units  # (piecewise) graphs cover the rest
        self._base_cache[key] = base
        return base

    def step_s(self, decode_seqs: int, decode_kv_tokens: float, prefill_tokens: int = 0,
               prefill_seqs: int = 0, prefill_attn_pairs: float = 0.0) -> float:
        """Duration of one engine step.

        decode_seqs sequences decode one token each over decode_kv_tokens context tokens in all;
        prefill_seqs sequences compute prefill_tokens prompt tokens, with prefill_attn_pairs =
        sum over chunks of chunk * (context + chunk / 2) attention pairs. Plain floats, no numpy:
        this runs once per simulated step.
        """
        gpu, cpu = self.step_parts_s(decode_seqs, decode_kv_tokens, prefill_tokens,
                                     prefill_seqs, prefill_attn_pairs)
        return max(gpu, cpu) if self.overlap_cpu else gpu + cpu

    def step_parts_s(self, decode_seqs: int, decode_kv_tokens: float, prefill_tokens: int = 0,
                     prefill_seqs: int = 0, prefill_attn_pairs: float = 0.0
                     ) -> tuple[float, float]:
        """One step's (GPU, CPU) seconds, arguments as step_s."""
        tokens = decode_seqs + prefill_tokens
        graphed = prefill_tokens == 0 and 0 < tokens <= self._graph_max
        if graphed:
            tokens = self._pad[tokens]
        gpu = self._base_s(tokens, graphed) + self._attention_s(decode_seqs, decode_kv_tokens,
                                                                prefill_attn_pairs)
        return gpu, self._cpu_s(decode_seqs + prefill_seqs, prefill_tokens)

    def _attention_s(self, decode_seqs: int, decode_kv_tokens: float,
                     prefill_attn_pairs: float) -> float:
        """Attention and the block-table walk: the part of a step each DP rank does alone."""
        lay = self.layout
        attn_bytes = decode_kv_tokens * lay.read_bytes_per_token + decode_seqs * lay.read_fixed_bytes_per_seq
        pairs = decode_kv_tokens if self._uncapped else min(decode_kv_tokens,
                                                            decode_seqs * lay.attended_cap_tokens)
        attention = max(attn_bytes / self.attn_bps,
                        lay.attn_flops_per_pair * (prefill_attn_pairs + pairs) / self.attn_flops)
        # Block-table walk: a decode reads ceil((ctx + 1) / bs) blocks, (ctx + 1) / bs + 1/2 on
        # average; the average keeps a run of decode steps affine in its step index.
        blocks = (decode_kv_tokens + decode_seqs) / self.block_size + decode_seqs / 2
        return attention + self._block_cost * blocks

    def _cpu_s(self, seqs: int, prefill_tokens: int) -> float:
        return (self._cpu_step + self._cpu_seq * seqs + self._cpu_small_seq * min(seqs, self._small_batch)
                + self._cpu_token * prefill_tokens)

    def lockstep_step_s(self, batches: list[RankBatch | None]) -> float:
        """One step of DP ranks in lockstep (None: a rank with nothing to run, which runs a
        dummy decode batch of one token: `vllm/v1/worker/gpu_worker.py::execute_dummy_batch`).
        Every MoE layer serves all ranks' tokens and the step lasts as long as the slowest
        rank's; attention is each rank's own. While every rank's batch fits a CUDA graph, vLLM
        pads them all to the largest (`vllm/v1/worker/dp_utils.py::_synchronize_dp_ranks`:
        the ranks agree on the lowest graph mode and pad unless it is none); a batch beyond
        the largest capture size, or eager mode, runs every rank on its own tokens."""
        tokens = [1 if b is None else b.decode_seqs + b.prefill_tokens for b in batches]
        uniform_decode = all(b is None or b.prefill_tokens == 0 for b in batches)
        bases = self._lockstep_bases(tokens, uniform_decode)
        slowest = 0.0
        for b, base in zip(batches, bases, strict=True):
            if b is None:
                t = self._dummy_s(base)
            else:
                gpu = base + self._attention_s(b.decode_seqs, b.decode_kv_tokens,
                                               b.prefill_attn_pairs)
                cpu = self._cpu_s(b.decode_seqs + b.prefill_seqs, b.prefill_tokens)
                t = max(gpu, cpu) if self.overlap_cpu else gpu + cpu
            slowest = max(slowest, t)
        return slowest

    def _lockstep_bases(self, tokens: list[int], uniform_decode: bool) -> list[float]:
        """Each rank's `_base_s` in a lockstep step whose ranks run `tokens` tokens."""
        largest = max(tokens)
        if self.graphs and largest <= self._graph_max:  # padded to the largest
            if uniform_decode:
                return [self._base_s(self._pad[largest], True)] * len(tokens)
            return [self._base_s(largest, False)] * len(tokens)
        total = sum(tokens)
        return [self._base_s(t, False, total) for t in tokens]

    def _dummy_s(self, base: float) -> float:
        """A rank's dummy batch: no scheduling, one token over a context of one."""
        gpu, cpu = base + self._attention_s(1, 1, 0.0), self._cpu_step
        return max(gpu, cpu) if self.overlap_cpu else gpu + cpu

    def lockstep_decode_s(self, seqs: list[int], kv_tokens: list[int], idle_ranks: int,
                          steps: int) -> np.ndarray:
        """The times of `steps` decode-only lockstep steps, as `lockstep_step_s` prices each:
        busy rank i decodes seqs[i] sequences over kv_tokens[i] context tokens in the first
        step (each step adds seqs[i]); idle_ranks ranks run dummy batches."""
        bases = self._lockstep_bases([*seqs, *([1] * idle_ranks)], True)
        lay, j = self.layout, np.arange(steps, dtype=float)
        dummy = max((self._dummy_s(b) for b in bases[len(seqs):]), default=0.0)
        slowest = np.full(steps, dummy)
        for m, kv0, base in zip(seqs, kv_tokens, bases[:len(seqs)], strict=True):
            kv = kv0 + m * j
            # _attention_s over an array of contexts (no prefill pairs in a decode step).
            attn_bytes = kv * lay.read_bytes_per_token + m * lay.read_fixed_bytes_per_seq
            pairs = kv if self._uncapped else np.minimum(kv, m * lay.attended_cap_tokens)
            attention = np.maximum(attn_bytes / self.attn_bps,
                                   lay.attn_flops_per_pair * (0.0 + pairs) / self.attn_flops)
            blocks = (kv + m) / self.block_size + m / 2
            gpu = base + (attention + self._block_cost * blocks)
            cpu = self._cpu_s(m, 0)
            np.maximum(slowest, np.maximum(gpu, cpu) if self.overlap_cpu else gpu + cpu,
                       out=slowest)
        return slowest

    def _decode_regimes(self, seqs: int) -> tuple[list[float], list[tuple[float, float]]]:
        """For decode-only steps of `seqs` sequences: the context sizes (kv tokens, all
        sequences) at which attention switches between bandwidth- and compute-bound or reaches
        its sparse cap, and per regime the step time as alpha + beta * kv. Cached per seqs."""
        cached = self._regimes.get(seqs)
        if cached is not None:
            return cached
        bounds = self._decode_cuts(seqs)
        if self.overlap_cpu:
            bounds = self._overlap_cuts(seqs, bounds)
        coefs = []
        for lo, hi in zip([0.0, *bounds], [*bounds, float("inf")], strict=True):
            x1, x2 = (lo + 1.0, lo + 2.0) if hi == float("inf") else (lo + (hi - lo) / 3,
                                                                     lo + 2 * (hi - lo) / 3)
            t1, t2 = self.step_s(seqs, x1), self.step_s(seqs, x2)
            beta = (t2 - t1) / (x2 - x1)
            coefs.append((t1 - beta * x1, beta))
        self._regimes[seqs] = (bounds, coefs)
        return bounds, coefs

    def _decode_cuts(self, seqs: int) -> list[float]:
        """The context sizes (kv tokens, all sequences) between which a decode step of `seqs`
        sequences is affine in its context: where attention switches between bandwidth- and
        compute-bound or reaches its sparse cap. Sorted."""
        lay = self.layout
        g, f = 1.0 / self.attn_bps, lay.attn_flops_per_pair / self.attn_flops
        fixed = seqs * lay.read_fixed_bytes_per_seq * g
        slope = lay.read_bytes_per_token * g
        cuts = []
        if f != slope:  # bytes line fixed + slope * kv meets the uncapped flops line f * kv
            cuts.append(fixed / (f - slope))
        if not self._uncapped:
            cap = seqs * lay.attended_cap_tokens
            cuts.append(cap)
            if slope:  # ... and the capped flops line f * cap
                cuts.append((f * cap - fixed) / slope)
        return sorted(c for c in cuts if c > 0)

    def _overlap_cuts(self, seqs: int, bounds: list[float]) -> list[float]:
        """With async scheduling a decode step takes max(GPU, CPU): the CPU part is constant
        for a fixed batch, the GPU part affine in kv within each attention regime, so each
        regime splits once more where the GPU part overtakes the CPU part."""
        out = list(bounds)
        for lo, hi in zip([0.0, *bounds], [*bounds, float("inf")], strict=True):
            x1 = lo + 1.0 if hi == float("inf") else lo + (hi - lo) / 3
            x2 = lo + 2.0 if hi == float("inf") else lo + 2 * (hi - lo) / 3
            (g1, cpu), (g2, _) = self.step_parts_s(seqs, x1), self.step_parts_s(seqs, x2)
            slope = (g2 - g1) / (x2 - x1)
            if slope > 0:
                cross = x1 + (cpu - g1) / slope
                if lo < cross < hi:
                    out.append(cross)
        return sorted(out)

    def decode_segments(self, seqs: int, kv_tokens: float, steps: int
                        ) -> list[tuple[int, int, float, float]]:
        """A run of `steps` decode-only steps of `seqs` sequences starting at kv_tokens, as
        pieces (first, end, a, b) on which step j takes a + b * (j - first) seconds. The step time
        is piecewise affine in j (the context grows by `seqs` tokens a step); the pieces break
        where attention switches between bandwidth- and compute-bound, or hits its sparse cap."""
        bounds, coefs = self._decode_regimes(seqs)
        i = bisect.bisect_right(bounds, kv_tokens)
        pieces = []
        first = 0
        while first < steps:
            end = steps if i == len(bounds) else min(steps, math.ceil((bounds[i] - kv_tokens) / seqs))
            if end > first:
                alpha, beta = coefs[i]
                pieces.append((first, end, alpha + beta * (kv_tokens + seqs * first), beta * seqs))
                first = end
            i += 1
        return pieces

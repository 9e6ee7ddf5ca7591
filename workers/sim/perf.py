"""Memory accounting and step times for the simulator, from catalogue figures.

First version: a roofline per step (weights and KV bytes against HBM bandwidth, linear-layer
FLOPs against peak) plus all-reduce, CPU overhead and a per-KV-block cost. The coefficients are
plain constants here; the simulator issue makes them a calibrated, versioned profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.catalogue import GPU, Model

GIB = 2**30
HBM_EFFICIENCY = 0.75
COMPUTE_EFFICIENCY = 0.45
CPU_STEP_S = 1.2e-3  # scheduler, sampling and launch per step
CPU_SEQ_S = 4e-6  # per scheduled sequence
BLOCK_S = 1.5e-9  # per KV block read per layer: paged-attention block-table overhead
ALLREDUCE_LATENCY_S = 8e-6
DRIVER_RESERVED_GIB = 0.75  # memory vLLM can never have (driver, other processes)
CUDA_CONTEXT_GIB = 0.6


class StartFailure(Exception):
    def __init__(self, message: str, failure_class: str) -> None:
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


class PerfModel:
    def __init__(self, gpu: GPU, model: Model, shape: EngineShape) -> None:
        self.gpu, self.model, self.shape = gpu, model, shape
        tp = shape.tensor_parallel_size
        bytes_pp = model.weight_bytes_per_param
        if model.num_experts:
            k_over_e = model.experts_per_token / model.num_experts
            self.expert_params = (model.total_params_b - model.active_params_b) / (1 - k_over_e) * 1e9
        else:
            k_over_e, self.expert_params = 0.0, 0.0
        self.k_over_e = k_over_e
        self.dense_params = model.total_params_b * 1e9 - self.expert_params
        self.weight_bytes_gpu = model.total_params_b * 1e9 * bytes_pp / tp
        self.kv_bytes_token_gpu = model.kv_bytes_per_token / (1 if model.kv_replicated_across_tp else tp)
        self.hbm_bps = gpu.hbm_tb_s * 1e12 * HBM_EFFICIENCY
        peak = gpu.fp8_tflops if bytes_pp <= 1 else gpu.bf16_tflops
        self.flops = peak * 1e12 * COMPUTE_EFFICIENCY
        self.num_blocks = self._kv_blocks()

    def _kv_blocks(self) -> int:
        s, g, m = self.shape, self.gpu, self.model
        total = g.memory_gib
        budget = total * s.gpu_memory_utilization
        if budget > total - DRIVER_RESERVED_GIB:
            raise StartFailure(
                f"CUDA out of memory: gpu_memory_utilization {s.gpu_memory_utilization} asks for "
                f"{budget:.1f} GiB of {total:.1f} GiB, leaving none for the driver", "oom")
        weights = self.weight_bytes_gpu / GIB
        activation = s.max_num_batched_tokens * m.hidden_size * 2 * 24 / GIB
        graphs = 0.0 if g.device == "cpu" else 0.4 + 0.6 * min(s.max_num_seqs, 512) / 512
        kv_gib = budget - weights - activation - graphs - CUDA_CONTEXT_GIB
        block_bytes = s.block_size * self.kv_bytes_token_gpu
        blocks = int(kv_gib * GIB // block_bytes) if kv_gib > 0 else 0
        if blocks * s.block_size < s.max_model_len:
            raise StartFailure(
                f"out of memory: {max(kv_gib, 0):.2f} GiB left for the KV cache after "
                f"{weights:.1f} GiB of weights and {activation:.2f} GiB of activations holds "
                f"{blocks * s.block_size} tokens, fewer than max_model_len {s.max_model_len}", "oom")
        return blocks

    def step_s(self, decode_seqs: int, prefill_tokens: int, prefill_attn_tokens2: float,
               kv_tokens_read: float | np.ndarray, blocks_read: float | np.ndarray
               ) -> float | np.ndarray:
        """Duration of one engine step.

        decode_seqs: sequences decoding one token; prefill_tokens: prompt tokens computed;
        prefill_attn_tokens2: sum over prefill chunks of chunk * (context + chunk / 2);
        kv_tokens_read: KV tokens the decodes attend over; blocks_read: KV blocks they touch.
The last two may be arrays (one entry per step of a decode run).
        """
        m, s = self.model, self.shape
        tokens = decode_seqs + prefill_tokens
        if prefill_tokens == 0 and decode_seqs <= 512:
            tokens = int(math.ceil(decode_seqs / 8) * 8)  # decode batches pad to CUDA-graph sizes
        touched = 1.0 - (1.0 - self.k_over_e) ** tokens if self.expert_params else 0.0
        weight_bytes = (self.dense_params + self.expert_params * touched) * m.weight_bytes_per_param
        bytes_read = weight_bytes / s.tensor_parallel_size + kv_tokens_read * self.kv_bytes_token_gpu
        flops = (2 * m.active_params_b * 1e9 * tokens
                 + 4 * m.num_layers * m.hidden_size * prefill_attn_tokens2) / s.tensor_parallel_size
        roofline = np.maximum(bytes_read / self.hbm_bps, flops / self.flops)
        tp = s.tensor_parallel_size
        allreduce = 0.0
        if tp > 1:
            per_layer = ALLREDUCE_LATENCY_S + tokens * m.hidden_size * 2 * 2 * (tp - 1) / tp / (
                self.gpu.link_gb_s * 1e9)
            allreduce = 2 * m.num_layers * per_layer
        overhead = CPU_STEP_S + CPU_SEQ_S * (decode_seqs + (prefill_tokens > 0))
        return roofline + allreduce + overhead + BLOCK_S * blocks_read * m.num_layers

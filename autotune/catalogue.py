"""Hardware and model facts the baselines and the simulator need.

Numbers are vendors' datasheet figures (dense, no sparsity) and the models' published sizes.
The simulator's per-model KV layouts here are first approximations; the simulator issue replaces
them with full layouts from the models' configurations.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import ConfigError


@dataclass(frozen=True)
class GPU:
    name: str
    device: str  # "gpu" or "cpu"
    memory_gib: float  # as the driver reports it (141 GB = 140.4 GiB on an H200)
    hbm_tb_s: float  # memory bandwidth, TB/s
    bf16_tflops: float  # dense
    fp8_tflops: float  # dense; equal to bf16 where there is no FP8 unit
    link_gb_s: float  # per-GPU interconnect bandwidth for all-reduce (NVLink or PCIe)
    a100_class: bool = False


@dataclass(frozen=True)
class Model:
    name: str
    total_params_b: float  # billions
    active_params_b: float  # billions per token
    weight_bytes_per_param: float  # as served (FP8 = 1, BF16 = 2)
    num_layers: int
    hidden_size: int
    kv_bytes_per_token: int  # whole model, all layers, as served
    kv_replicated_across_tp: bool  # MLA-style latent caches are replicated on every TP rank
    max_context: int
    source: str
    num_experts: int = 0  # routed experts per MoE layer; 0 for a dense model
    experts_per_token: int = 0


GPUS: dict[str, GPU] = {
    g.name: g
    for g in (
        # NVIDIA datasheets (A100 80GB SXM, H100 SXM, H200 SXM, L40S).
        GPU("A100-80GB", "gpu", 80.0, 2.039, 312, 312, 300, a100_class=True),
        GPU("H100-80GB", "gpu", 79.6, 3.35, 989, 1979, 450),
        GPU("H200-141GB", "gpu", 140.4, 4.8, 989, 1979, 450),
        GPU("L40S", "gpu", 45.0, 0.864, 362, 733, 32),
        # The vLLM CPU build; memory is what VLLM_CPU_KVCACHE_SPACE and weights may use.
        GPU("cpu", "cpu", 16.0, 0.05, 1.0, 1.0, 10),
    )
}

MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        Model("DeepSeek-V4-Flash", 284, 13, 1.0, 43, 4096, 9_000, True, 1_048_576,
              "DeepSeek-V4 model card (284B total, 13B active, 1M context, FP8 weights); "
              "KV per token approximated from its ~10x compressed hybrid attention vs V3; "
              "expert counts assumed as in V3 (256 routed, 8 per token)", 256, 8),
        Model("DeepSeek-V3", 671, 37, 1.0, 61, 7168, 70_272, True, 163_840,
              "DeepSeek-V3 config.json: 61 layers, MLA kv_lora_rank 512 + rope 64, bf16 cache; "
              "256 routed experts, 8 per token", 256, 8),
        Model("Llama-3.1-8B", 8.03, 8.03, 2.0, 32, 4096, 131_072, False, 131_072,
              "Llama-3.1-8B config.json: 32 layers, 8 KV heads of dim 128, bf16"),
        Model("tiny-llama", 0.02, 0.02, 2.0, 2, 256, 2_048, False, 2_048,
              "the tiny test model autotune writes: 2 layers, 2 KV heads of dim 128, bf16"),
    )
}


def _lookup(kind: str, table: dict, name: str):  # type: ignore[no-untyped-def]
    for key, value in table.items():
        if key.lower() == name.lower() or key.lower().split("-")[0] == name.lower():
            return value
    raise ConfigError(f"unknown {kind} {name!r}; known: {', '.join(table)}")


def gpu(name: str) -> GPU:
    """A GPU by name; the short form ("H200") works too."""
    return _lookup("GPU", GPUS, name)  # type: ignore[no-any-return]


def model(name: str) -> Model:
    return _lookup("model", MODELS, name)  # type: ignore[no-any-return]

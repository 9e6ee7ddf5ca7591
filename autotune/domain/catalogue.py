"""Hardware and model facts the baselines and the simulator need.

GPU figures are the vendors' datasheet numbers (dense, no sparsity). Model figures are the
architecture numbers of each model's published `config.json` and model card; every entry names
its source. Parameter counts are the model cards' (total and active per token); the simulator
derives its KV-cache layout and its expert counts from the architecture numbers here.
"""

from __future__ import annotations

from autotune.domain.catalogue_dsv4 import DSV4_MODELS
from autotune.domain.model_sources import resolve
from autotune.domain.specs import (  # noqa: F401  (re-exported)
    DSV4,
    GPU,
    GQA,
    MLA,
    QUANT_FORMATS,
    GatedDeltaNet,
    KimiDeltaAttention,
    Mamba2,
    Model,
)
from autotune.errors import ConfigError

GPUS: dict[str, GPU] = {
    g.name: g
    for g in (
        # NVIDIA datasheets (A100 80GB SXM, H100 SXM, H200 SXM, L40S).
        GPU("A100-80GB", "gpu", 80.0, 2.039, 312, 312, 300, 80, a100_class=True),
        GPU("H100-80GB", "gpu", 79.6, 3.35, 989, 1979, 450, 90),
        GPU("H200-141GB", "gpu", 140.4, 4.8, 989, 1979, 450, 90),
        GPU("L40S", "gpu", 45.0, 0.864, 362, 733, 32, 89),
        # NVIDIA HGX B200 datasheet, per GPU: 180 GB HBM3e (183,359 MiB as nvidia-smi reports
        # it), 7.7 TB/s, dense BF16 2.25 PFLOPS and FP8 4.5 PFLOPS (half the sparse figures),
        # NVLink 5 at 1.8 TB/s both directions (900 GB/s each way); sm_100.
        GPU("B200-180GB", "gpu", 179.1, 7.7, 2250, 4500, 900, 100),
        # NVIDIA HGX B300 datasheet, per GPU: 288 GB HBM3e (275,040 MiB as nvidia-smi reports
        # it), 7.75 TB/s (62 TB/s for 8), dense BF16 2.25 and FP8 4.5 PFLOPS, NVLink 5 as B200;
        # sm_103. Figures as aiconfigurator-core 0.12.0's systems/b300_sxm.yaml restates them.
        GPU("B300-288GB", "gpu", 268.6, 7.75, 2250, 4500, 900, 103),
        # The vLLM CPU build; its KV cache is VLLM_CPU_KVCACHE_SPACE, not a share of memory.
        # Bandwidth and FLOPs are a 2-core VM's order of magnitude; calibration fits the rest.
        GPU("cpu", "cpu", 16.0, 0.02, 0.2, 0.2, 10, 0),
    )
}

MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        *DSV4_MODELS,
        Model("DeepSeek-V3", 671, 37, 1.0, 1.0, 61, 7168, 129_280, 163_840,
              MLA, 128, 1, 192, 18_432,
              "deepseek-ai/DeepSeek-V3 config.json: 61 layers, hidden 7168, 128 heads, MLA "
              "kv_lora_rank 512 + qk_rope 64 (qk_nope 128, v 128); 256 routed experts + 1 "
              "shared, 8 per token, expert width 2048, first 3 layers dense (18432); FP8; "
              "num_nextn_predict_layers 1 (MTP); quantization_config fp8, weight_block_size [128, 128]",
              kv_lora_rank=512, qk_rope_head_dim=64, v_head_dim=128, num_experts=256,
              experts_per_token=8, moe_intermediate_size=2048, num_shared_experts=1,
              first_dense_layers=3, mtp=True, dense_quant="fp8_block",
              expert_quant="fp8_block", quant_block=128, hf_id="deepseek-ai/DeepSeek-V3"),
        Model("Llama-3.1-8B", 8.03, 8.03, 2.0, 2.0, 32, 4096, 128_256, 131_072,
              GQA, 32, 8, 128, 14_336,
              "meta-llama/Llama-3.1-8B config.json: 32 layers, hidden 4096, 32 heads, 8 KV "
              "heads of dim 128, MLP 14336, vocab 128256; BF16",
              # The recipe serves the Instruct model (the same architecture).
              hf_id="meta-llama/Llama-3.1-8B-Instruct"),
        Model("Qwen3-8B", 8.19, 8.19, 2.0, 2.0, 36, 4096, 151_936, 40_960,
              GQA, 32, 8, 128, 12_288,
              "Qwen/Qwen3-8B config.json: 36 layers, hidden 4096, 32 heads, 8 KV heads of dim "
              "128, MLP 12288, vocab 151936, max_position_embeddings 40960; BF16",
              hf_id="Qwen/Qwen3-8B"),
        Model("tiny-llama", 0.003, 0.003, 2.0, 2.0, 2, 256, 2_048, 4_096,
              GQA, 4, 2, 64, 1_024,
              "the tiny model `autotune models make-tiny` writes (autotune/measure/tiny_model.py "
              "defaults): 2 layers, hidden 256, 4 heads, 2 KV heads of dim 64, MLP 1024, vocab "
              "2048; BF16"),
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
    """A model by catalogue name (or its short form), by Hugging Face id (the hand-checked
    entries first, then the bundled config.json files), or from a local model directory or
    config.json (autotune/domain/model_sources.py). ConfigError for anything else."""
    try:
        return _lookup("model", MODELS, name)  # type: ignore[no-any-return]
    except ConfigError:
        pass
    for entry in MODELS.values():
        if entry.hf_id and entry.hf_id.lower() == name.lower():
            return entry
    return resolve(name)  # reads files: only for names not found above

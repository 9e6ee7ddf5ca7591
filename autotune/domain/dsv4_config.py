"""DeepSeek-V4 checkpoints read from their config.json.

V4's hybrid attention (a compression ratio per layer, the CSA indexer, hyper-connections, the
grouped output projection) has no published parameter breakdown a reader could check its own
count against, so a V4 config is read as the hand-checked catalogue entry whose architecture it
has (DeepSeek-V4-Flash or DeepSeek-V4-Pro: every field `ARCHITECTURE` names equal), with the
checkpoint's own weight formats as vLLM serves them. That covers the exports of the same
weights: NVIDIA's NVFP4 experts (nvidia/DeepSeek-V4-Flash-NVFP4, -Pro-NVFP4) and FP8 experts
(expert_dtype "fp8", as DeepSeek-V4-Flash-Base ships them). A V4 config of other shapes is
refused with the fields that differ.

Weight formats, as vLLM 0.32 serves a V4 checkpoint (vllm/models/deepseek_v4/quant_config.py,
DeepseekV4FP8Config): quant_method "fp8" routes the model to that config, whose linear layers
are FP8 block-128 (Fp8Config); the routed experts follow hf_config.expert_dtype (default
"fp4"): "fp4" is MXFP4 (Mxfp4MoEMethod), or NVFP4 where quantization_config.moe_quant_algo is
"NVFP4" (ModelOptNvFp4FusedMoE); "fp8" is FP8 block (Fp8MoEMethod). NVIDIA's export lists
attention, shared experts and the head under ModelOpt's `ignore` (not re-quantised by it: they
stay the source checkpoint's FP8 block, and Fp8Config reads only `ignored_layers` /
`modules_to_not_convert`, so vLLM serves them as FP8 block either way).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from autotune.domain.config_fields import need
from autotune.domain.specs import QUANT_FORMATS, Model
from autotune.errors import ConfigError

# Model field -> config.json key: the architecture a V4 config must share with a catalogue
# entry (tests/domain/test_model_config.py holds the entries to their published configs on
# these fields, and compress_ratios).
ARCHITECTURE = {"num_layers": "num_hidden_layers", "hidden_size": "hidden_size",
                "num_heads": "num_attention_heads", "head_dim": "head_dim",
                "qk_rope_head_dim": "qk_rope_head_dim", "sliding_window": "sliding_window",
                "index_head_dim": "index_head_dim", "index_topk": "index_topk",
                "num_experts": "n_routed_experts", "experts_per_token": "num_experts_per_tok",
                "moe_intermediate_size": "moe_intermediate_size",
                "num_shared_experts": "n_shared_experts", "vocab_size": "vocab_size",
                "max_context": "max_position_embeddings"}
EXPERT_DTYPES = ("fp4", "fp8")  # quant_config.py, _DEEPSEEK_V4_EXPERT_DTYPES


def architecture(cfg: dict[str, Any], where: str) -> dict[str, object]:
    """A V4 config's architecture fields by Model field name; ConfigError for a missing one."""
    arch: dict[str, object] = {field: need(cfg, key, where) for field, key in ARCHITECTURE.items()}
    ratios = cfg.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < cfg["num_hidden_layers"]:
        raise ConfigError(f"{where}: field 'compress_ratios' needs one entry per layer "
                          f"({cfg['num_hidden_layers']}), got {ratios!r}")
    # The list has one more entry than there are layers: the MTP layer's.
    arch["compress_ratios"] = tuple(ratios[:cfg["num_hidden_layers"]])
    return arch


def read_dsv4(cfg: dict[str, Any], entries: list[Model], where: str, name: str,
              hf_id: str) -> Model:
    """The Model of a DeepSeek-V4 config.json: the entry of `entries` (the catalogue's V4
    models) with its architecture, in the checkpoint's weight formats."""
    model_type = cfg.get("model_type")
    if model_type != "deepseek_v4":
        raise ConfigError(
            f"{where}: model_type {model_type!r} is not one vLLM reads as DeepSeek-V4 (it "
            "registers 'deepseek_v4', vllm/transformers_utils/config.py); an export for another "
            "engine (SGLang's is 'deepseek_ref') does not load in vLLM. Use the published "
            "checkpoint (deepseek-ai/DeepSeek-V4-Flash or -Pro) or NVIDIA's NVFP4 export")
    arch = architecture(cfg, where)
    entry, differ = _closest(arch, entries)
    if differ:
        raise ConfigError(
            f"{where}: a DeepSeek-V4 config whose shapes match no catalogue entry (closest "
            f"{entry.name}; differs in {', '.join(differ)}); the simulator has V4's parameter "
            "counts only for DeepSeek-V4-Flash and DeepSeek-V4-Pro")
    expert = _expert_quant(cfg, where)
    formats = ("MXFP4" if expert == "fp4" else "NVFP4 (moe_quant_algo)" if expert == "nvfp4"
               else "FP8 block (expert_dtype fp8)")
    source = (f"{where}: read as the catalogue's {entry.name} (its architecture fields match; "
              f"parameter counts from that entry's model card); routed experts {formats}, the "
              "rest FP8 block-128, as vLLM's DeepseekV4FP8Config serves the checkpoint")
    return dataclasses.replace(entry, name=name, hf_id=hf_id, source=source, expert_quant=expert,
                               expert_bytes_per_param=QUANT_FORMATS[expert],
                               mtp=bool(cfg.get("num_nextn_predict_layers")))


def _closest(arch: dict[str, object], entries: list[Model]) -> tuple[Model, list[str]]:
    """The entry with the fewest differing fields, and those fields."""
    scored = []
    for entry in entries:
        differ = [field for field, value in arch.items() if getattr(entry, field) != value]
        scored.append((len(differ), entry.name, entry, differ))
    _, _, entry, differ = min(scored, key=lambda s: (s[0], s[1]))
    return entry, differ


def _expert_quant(cfg: dict[str, Any], where: str) -> str:
    q = cfg.get("quantization_config")
    if not isinstance(q, dict):
        q = {}
    method = q.get("quant_method")
    if method not in ("fp8", "deepseek_v4_fp8"):
        raise ConfigError(
            f"{where}: quantization_config.quant_method {method!r}; the simulator reads the "
            "DeepSeek-V4 checkpoints vLLM serves with DeepseekV4FP8Config (quant_method "
            "'fp8': FP8 block linear layers)")
    expert_dtype = cfg.get("expert_dtype", "fp4")
    if expert_dtype not in EXPERT_DTYPES:
        raise ConfigError(f"{where}: expert_dtype {expert_dtype!r}; vLLM accepts "
                          f"{' or '.join(EXPERT_DTYPES)} (DeepseekV4FP8Config.expert_dtype)")
    if expert_dtype == "fp8":
        return "fp8_block"
    return "nvfp4" if str(q.get("moe_quant_algo") or "").upper() == "NVFP4" else "fp4"


def is_dsv4(cfg: dict[str, Any]) -> bool:
    """Whether a config describes DeepSeek-V4's hybrid attention."""
    return "compress_ratios" in cfg

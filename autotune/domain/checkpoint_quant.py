"""How a checkpoint's weights are stored, as vLLM's quantisation configs read them: the format
of a `quantization_config` (or a ModelOpt `hf_quant_config.json`), which modules its exclusion
list (or a ModelOpt MIXED_PRECISION export's `quantized_layers`) leaves in another format, and
the KV cache a ModelOpt config declares."""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from autotune.domain.specs import QUANT_FORMATS
from autotune.errors import ConfigError

# A representative module per part of a decoder layer, as checkpoints name them under a layer's
# prefix; the exclusion lists (`ignore`, `modules_to_not_convert`, `exclude_modules`) are matched
# on these, layer by layer, under each prefix checkpoints use (multimodal ones nest the language
# model: Qwen3.5 model.language_model, Kimi-K2.5 language_model.model).
MODULES = {"attention": "self_attn.o_proj", "linear_attention": "linear_attn.out_proj",
           "mlp": "mlp.down_proj", "shared": "mlp.shared_experts.down_proj",
           "experts": "mlp.experts.0.down_proj"}
_LAYER_PREFIXES = ("model.layers", "model.language_model.layers", "language_model.model.layers",
                   "backbone.layers")


@dataclass(frozen=True)
class CheckpointQuant:
    """A checkpoint's weight format and what its config leaves in another."""

    name: str  # a QUANT_FORMATS key
    block: int  # quant_block (fp8_block); 0 otherwise
    bytes_per_param: float
    excluded: tuple[str, ...]  # exclusion patterns
    experts_only: bool = False  # mxfp4: vLLM quantises the MoE layers only
    # ModelOpt MIXED_PRECISION: each listed module's format (module path, format); a module not
    # listed stays unquantised. Empty for one format throughout.
    per_module: tuple[tuple[str, str], ...] = ()
    kv_cache_dtype: str = ""  # the KV cache dtype a ModelOpt config declares ("": none)

    def bytes_of(self, fmt: str) -> float:
        """Bytes per parameter of a part served in `fmt`."""
        return self.bytes_per_param if fmt == self.name else QUANT_FORMATS[fmt]

    @property
    def kv_cache_note(self) -> str:
        """The declared KV cache, for a model's source line ("" where none is declared)."""
        return f", KV cache {self.kv_cache_dtype} as declared" if self.kv_cache_dtype else ""


def dense_bytes_per_param(quant: CheckpointQuant, parts: dict[str, float],
                          formats: dict[str, str], bf16_params: float) -> float:
    """Bytes per dense parameter as served: each quantisable dense part (attention, MLP, shared
    experts, those `parts` has) in its format, and `bf16_params` (embeddings, the LM head,
    routers) in bf16: vLLM's Fp8Config and the others quantise linear layers, and the exclusion
    lists name lm_head and the routers."""
    quantisable = [p for p in ("attention", "mlp", "shared") if p in parts]
    stored = sum(parts[p] * quant.bytes_of(formats[p]) for p in quantisable)
    return (stored + 2.0 * bf16_params) / (sum(parts[p] for p in quantisable) + bf16_params)


def read_quant(qcfg: dict[str, Any] | None, where: str) -> CheckpointQuant:
    """The weight format of a quantization_config (or hf_quant_config.json)."""
    if not qcfg:
        return CheckpointQuant("bf16", 0, 2.0, ())
    if "quantization" in qcfg and isinstance(qcfg["quantization"], dict):  # hf_quant_config.json
        qcfg = {"quant_method": "modelopt", **qcfg["quantization"]}
    method = str(qcfg.get("quant_method", "")).lower()
    if not method and (qcfg.get("producer") or {}).get("name") == "modelopt":
        # A ModelOpt export's config.json copy names only its producer; vLLM sets the method
        # from it (vllm/config/model.py, ModelConfig._normalize_quantization_config).
        method = "modelopt"
    excluded = tuple(str(p) for p in (qcfg.get("ignore") or qcfg.get("modules_to_not_convert")
                                      or qcfg.get("exclude_modules") or []))
    if method == "fp8":
        # vllm/model_executor/layers/quantization/fp8.py::Fp8Config: weight_block_size gives
        # one scale per [n, k] tile; without it one scale per tensor.
        block = qcfg.get("weight_block_size")
        if block:
            return CheckpointQuant("fp8_block", int(block[0]), 1.0, excluded)
        return CheckpointQuant("fp8", 0, 1.0, excluded)
    if method == "mxfp4":
        # vllm/model_executor/layers/quantization/mxfp4.py::Mxfp4Config.get_quant_method: linear
        # layers stay unquantised, the MoE experts are MXFP4.
        return CheckpointQuant("mxfp4", 0, QUANT_FORMATS["mxfp4"], excluded, experts_only=True)
    if method.startswith("modelopt"):
        # vllm/model_executor/layers/quantization/modelopt.py QUANT_ALGOS.
        algo = str(qcfg.get("quant_algo", "")).upper()
        kv = _modelopt_kv_cache_dtype(qcfg)
        if algo in _MODELOPT_FORMATS:
            fmt = _MODELOPT_FORMATS[algo]
            return CheckpointQuant(fmt, 128 if fmt == "fp8_block" else 0, QUANT_FORMATS[fmt],
                                   excluded, kv_cache_dtype=kv)
        if algo == "MIXED_PRECISION":
            return replace(_mixed_precision(qcfg, excluded, where), kv_cache_dtype=kv)
        raise ConfigError(f"{where}: ModelOpt quant_algo {algo or 'missing'!r} is not one autotune "
                          f"knows ({', '.join([*_MODELOPT_FORMATS, 'MIXED_PRECISION'])})")
    if method == "compressed-tensors" and qcfg.get("format") == "mxfp4-pack-quantized":
        # Kimi-K3: vLLM serves it as mxfp4 (vllm/model_executor/models/config.py,
        # KimiK3ForConditionalGenerationConfig.verify_and_update_model_config), whose linear
        # layers all stay unquantised (Mxfp4Config.get_quant_method), whatever the ignore list.
        return CheckpointQuant("mxfp4", 0, QUANT_FORMATS["mxfp4"], (), experts_only=True)
    if method == "compressed-tensors":
        return _compressed_tensors(qcfg, excluded, where)
    raise ConfigError(f"{where}: quant_method {method or 'missing'!r} is not one autotune knows "
                      "(fp8, mxfp4, modelopt, compressed-tensors; none for bf16 weights)")


# ModelOpt's per-format quant_algo names (vllm/model_executor/layers/quantization/modelopt.py
# QUANT_ALGOS) as the catalogue's formats: MXFP8 (one E8M0 scale per 32 weights) weighs as FP8
# does to a percent; W4A16_NVFP4 (weight-only) weighs as NVFP4 and is read as NVFP4.
_MODELOPT_FORMATS = {"FP8": "fp8", "FP8_PER_CHANNEL_PER_TOKEN": "fp8", "FP8_PB_WO": "fp8_block",
                     "NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4", "MXFP8": "fp8"}


def _modelopt_kv_cache_dtype(qcfg: dict[str, Any]) -> str:
    """The KV cache dtype vLLM serves for "auto" from a ModelOpt config's kv_cache_scheme or
    kv_cache_quant_algo (vllm/utils/torch_utils.py, get_kv_cache_quant_algo_string: FP8 is
    fp8_e4m3, a 4-bit float scheme nvfp4, anything else the model's dtype); "" for none."""
    kv = qcfg.get("kv_cache_scheme") or qcfg.get("kv_cache_quant_algo")
    if isinstance(kv, dict):
        if kv.get("dynamic") is False and kv.get("num_bits") == 8 and kv.get("type") == "float":
            kv = "fp8"
        elif kv.get("num_bits") == 4 and kv.get("type") == "float":
            kv = "nvfp4"
        else:
            return ""
    return {"fp8": "fp8_e4m3", "nvfp4": "nvfp4"}.get(str(kv).lower(), "") if kv else ""


def _mixed_precision(qcfg: dict[str, Any], excluded: tuple[str, ...],
                     where: str) -> CheckpointQuant:
    """ModelOpt MIXED_PRECISION: quantized_layers gives each quantised module its quant_algo
    (vllm/model_executor/layers/quantization/modelopt.py, ModelOptMixedPrecisionConfig: a
    module it does not list stays unquantised)."""
    layers = qcfg.get("quantized_layers")
    if not isinstance(layers, dict) or not layers:
        raise ConfigError(f"{where}: ModelOpt MIXED_PRECISION without quantized_layers")
    per_module = []
    for module, spec in layers.items():
        algo = str((spec or {}).get("quant_algo", "")).upper()
        if algo not in _MODELOPT_FORMATS:
            raise ConfigError(f"{where}: quantized_layers {module!r}: quant_algo {algo!r} is not "
                              f"one autotune knows ({', '.join(_MODELOPT_FORMATS)})")
        per_module.append((str(module), _MODELOPT_FORMATS[algo]))
    # The name (and bytes) of its most common format stand for it where a single one is asked.
    name = Counter(fmt for _, fmt in per_module).most_common(1)[0][0]
    return CheckpointQuant(name, 128 if name == "fp8_block" else 0, QUANT_FORMATS[name],
                           excluded, per_module=tuple(per_module))


def _compressed_tensors(qcfg: dict[str, Any], excluded: tuple[str, ...],
                        where: str) -> CheckpointQuant:
    groups = qcfg.get("config_groups") or {}
    weights = next((g.get("weights") for g in groups.values()
                    if isinstance(g, dict) and g.get("weights")), None)
    if not weights:
        raise ConfigError(f"{where}: compressed-tensors quantization_config has no "
                          "config_groups.*.weights")
    bits, kind = weights.get("num_bits"), weights.get("type")
    group = weights.get("group_size")
    if kind == "int" and bits == 4:
        # W4A16 (vllm/model_executor/layers/quantization/compressed_tensors/schemes/
        # compressed_tensors_wNa16.py): 4-bit weights, a bf16 scale per group.
        return CheckpointQuant("int4_wo", 0, 0.5 + (2.0 / group if group else 0.0), excluded)
    if kind == "float" and bits == 8:
        block = weights.get("block_structure")
        if weights.get("strategy") == "block" and block:
            return CheckpointQuant("fp8_block", int(block[0]), 1.0, excluded)
        return CheckpointQuant("fp8", 0, 1.0, excluded)
    if kind == "float" and bits == 4 and group == 16:
        return CheckpointQuant("nvfp4", 0, QUANT_FORMATS["nvfp4"], excluded)
    raise ConfigError(f"{where}: compressed-tensors weights of {bits}-bit {kind} (group "
                      f"{group}) are not a format autotune knows (int4 weight-only, fp8, nvfp4)")


def _excluded(module: str, patterns: tuple[str, ...]) -> bool:
    """Whether a module is left unquantised: "re:" regexes (compressed-tensors), wildcards
    (ModelOpt, gpt-oss) and plain names, matched as prefixes or substrings as vLLM's
    is_layer_skipped and ModelOptQuantConfigBase.is_layer_excluded do."""
    for p in patterns:
        if p.startswith("re:"):
            if re.match(p[3:], module):
                return True
        elif "*" in p:
            if fnmatch.fnmatch(module, p):
                return True
        elif p in module:
            return True
    return False


def _module_format(module: str, quant: CheckpointQuant) -> str:
    """One layer's module (`module`: its path under the layers, "3.mlp.down_proj"): the format
    the checkpoint stores it in, under whichever layer prefix the checkpoint uses."""
    paths = [f"{prefix}.{module}" for prefix in _LAYER_PREFIXES]
    if quant.per_module:
        return next((fmt for path in paths for key, fmt in quant.per_module
                     if path == key or path.startswith(key + ".")), "bf16")
    return "bf16" if any(_excluded(path, quant.excluded) for path in paths) else quant.name


def part_format(part: str, quant: CheckpointQuant, modules: list[str]) -> str:
    """The format a part is served in: the one most of its layers have (`modules`: the part's
    module in each layer that has it; exclusion lists that name layers one by one, or keep the
    first layers whole, are read as the bulk is)."""
    if quant.name == "bf16" or (quant.experts_only and part != "experts") or not modules:
        return "bf16"
    return Counter(_module_format(m, quant) for m in modules).most_common(1)[0][0]

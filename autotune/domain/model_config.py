"""A catalogue Model from a Hugging Face `config.json`.

Reads the architecture fields vLLM's model classes read (vllm/model_executor/models/<arch>.py)
for three families: dense and MoE GQA models (Llama, Qwen3, Mistral, Qwen3-MoE, Mixtral,
MiniMax-M2, gpt-oss, Gemma 4), and MLA models (DeepSeek-V3, Kimi-K2/K2.5, whose multimodal config nests
the language model under `text_config`). Parameter counts are derived from the architecture
(embeddings, attention projections, MLPs, routed and shared experts, routers; norms and biases
are left out, under 0.1%), and the weight formats and bytes from `quantization_config` (or a
ModelOpt `hf_quant_config.json` beside the file): which modules are quantised follows the
checkpoint's exclusion list the way vLLM's quantisation configs apply it.

Active parameters count what one token's forward pass multiplies by: everything but the input
embedding table (a lookup) and the routed experts a token does not use; the model cards count
the same way (gpt-oss-120b: 5.1B active of 117B).
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autotune.domain.specs import GQA, MLA, QUANT_FORMATS, GatedDeltaNet, Mamba2, Model
from autotune.errors import ConfigError

# A representative module per part of a decoder layer, as checkpoints name them under a layer's
# prefix; the exclusion lists (`ignore`, `modules_to_not_convert`, `exclude_modules`) are matched
# on these, layer by layer, under each prefix checkpoints use (multimodal ones nest the language
# model: Qwen3.5 model.language_model, Kimi-K2.5 language_model.model).
_MODULES = {"attention": "self_attn.o_proj", "linear_attention": "linear_attn.out_proj",
            "mlp": "mlp.down_proj", "shared": "mlp.shared_experts.down_proj",
            "experts": "mlp.experts.0.down_proj"}
_LAYER_PREFIXES = ("model.layers", "model.language_model.layers", "language_model.model.layers",
                   "backbone.layers")


@dataclass(frozen=True)
class _Quant:
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


def read_model_config(path: Path, name: str | None = None, hf_id: str = "",
                      quant_path: Path | None = None) -> Model:
    """The Model of a config.json. name: the catalogue name to give it (default: its folder's,
    or the file's stem); quant_path: a ModelOpt hf_quant_config.json (default: the one beside
    the file, if any). ConfigError naming the file and the field for anything missing."""
    cfg = _load(path)
    if quant_path is None:
        beside = path.with_name("hf_quant_config.json" if path.name == "config.json"
                                else path.name.replace("_config.json", "_hf_quant_config.json"))
        quant_path = beside if beside != path and beside.is_file() else None
    text = cfg.get("text_config")
    # Multimodal checkpoints (Kimi-K2.5) describe the language model in text_config.
    arch = text if isinstance(text, dict) and "num_hidden_layers" in text else cfg
    qcfg = arch.get("quantization_config") or cfg.get("quantization_config")
    if qcfg is None and quant_path is not None:
        qcfg = _load(quant_path)
    where = str(path)
    if "compress_ratios" in arch:
        raise ConfigError(f"{where}: DeepSeek-V4's hybrid attention is not read from config.json; "
                          "use the catalogue entries DeepSeek-V4-Flash or DeepSeek-V4-Pro")
    pattern = _layer_pattern(arch, where)
    if pattern:
        return _layer_pattern_model(arch, pattern, _quant(qcfg, where), where,
                                    name or _default_name(path), hf_id)
    if arch.get("block_configs"):
        return _nas_blocks_model(arch, _quant(qcfg, where), where, name or _default_name(path),
                                 hf_id)
    _refuse_hybrid(arch, where)
    _refuse_layer_sharing(arch, where)
    quant = _quant(qcfg, where)
    return _model(arch, quant, where, name or _default_name(path), hf_id)


# Fields of layer kinds the simulator has no model for: Mamba/SSM layers outside a Nemotron-H
# layer pattern, linear attention other than the gated delta net (Kimi-K3's).
_HYBRID_PREFIXES = ("mamba_", "linear_", "ssm_", "hybrid_", "layers_block_type",
                    "full_attention_interval")
_KNOWN_LAYER_TYPES = {"full_attention", "sliding_attention"}
# The gated delta net's fields (Qwen3.5, Qwen3-Next), which the reader does model.
_GDN_FIELDS = {"linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
               "linear_value_head_dim", "linear_conv_kernel_dim", "full_attention_interval",
               "mamba_ssm_dtype"}


def _is_gated_delta_net(cfg: dict[str, Any]) -> bool:
    return "linear_num_value_heads" in cfg and not cfg.get("linear_attn_config")


def _refuse_hybrid(cfg: dict[str, Any], where: str) -> None:
    """ConfigError for a config whose layers are not all (sliding-window) attention or gated
    delta nets: read as plain attention it would be modelled wrong without a word."""
    gdn = _is_gated_delta_net(cfg)
    odd = sorted(k for k in cfg if k.startswith(_HYBRID_PREFIXES)
                 and not (gdn and k in _GDN_FIELDS)
                 and not (k == "hybrid_layer_pattern" and _is_mimo_sliding(cfg)))
    known = _KNOWN_LAYER_TYPES | ({"linear_attention"} if gdn else set())
    if cfg.get("kv_lora_rank") is not None and cfg.get("index_topk"):
        # GLM-5.2's MLA layers with DeepSeek-V3.2's sparse indexer (vllm/models/deepseek_v32,
        # GlmMoeDsaForCausalLM), read as MLA attention as GLM-5's are (see the source note).
        known |= {"deepseek_sparse_attention"}
    odd += [f"layer_types {t!r}" for t in sorted(set(cfg.get("layer_types") or []))
            if t not in known]
    if odd:
        raise ConfigError(f"{where}: {', '.join(odd[:3])}: layers other than attention and "
                          "gated delta nets (Mamba, other linear attention) are not modelled; "
                          "choose a catalogue model or a transformer-only config")


def _refuse_layer_sharing(cfg: dict[str, Any], where: str) -> None:
    """ConfigError for Gemma's on-device variants: layers that reuse an earlier layer's KV
    cache (num_kv_shared_layers) and per-layer input embeddings (hidden_size_per_layer_input),
    which the reader does not model."""
    odd = [k for k in ("num_kv_shared_layers", "hidden_size_per_layer_input") if cfg.get(k)]
    if odd:
        raise ConfigError(f"{where}: {', '.join(odd)}: KV-shared layers and per-layer input "
                          "embeddings are not modelled; choose a catalogue model or a config "
                          "without them")


# Bytes per element of a recurrent state dtype (mamba_ssm_dtype); absent: the model's (bf16).
_STATE_DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}


def _gated_delta_net(cfg: dict[str, Any], layers: int, where: str) -> GatedDeltaNet:
    """The linear-attention layers of a Qwen3.5 / Qwen3-Next config: those layer_types names
    linear_attention, or where there is no layer_types every layer but each
    full_attention_interval-th (Qwen3NextConfig's layout). Their recurrent state is stored in
    mamba_ssm_dtype where the config gives one (vllm/model_executor/models/config.py,
    Qwen3_5ForConditionalGenerationConfig), else in the model's dtype."""
    types = cfg.get("layer_types")
    if types:
        linear = sum(1 for t in types if t == "linear_attention")
    else:
        interval = _need(cfg, "full_attention_interval", where)
        linear = layers - layers // interval
    dtype = str(cfg.get("mamba_ssm_dtype") or "bfloat16")
    if dtype not in _STATE_DTYPE_BYTES:
        raise ConfigError(f"{where}: mamba_ssm_dtype {dtype!r} is not one of "
                          f"{', '.join(_STATE_DTYPE_BYTES)}")
    return GatedDeltaNet(linear, _need(cfg, "linear_num_key_heads", where),
                         _need(cfg, "linear_num_value_heads", where),
                         _need(cfg, "linear_key_head_dim", where),
                         _need(cfg, "linear_value_head_dim", where),
                         _need(cfg, "linear_conv_kernel_dim", where),
                         recurrent_bytes=_STATE_DTYPE_BYTES[dtype])


# Nemotron-H's layer kinds as layers_block_type names them (transformers' NemotronHConfig
# ._list_to_pattern; the legacy names its remap_legacy_layer_types renames).
_PATTERN_KINDS = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*",
                  "mlp": "-", "moe": "E"}


def _layer_pattern(cfg: dict[str, Any], where: str) -> str:
    """A Nemotron-H config's layer pattern (hybrid_override_pattern, or layers_block_type as a
    pattern); "" for a config without one."""
    pattern = cfg.get("hybrid_override_pattern")
    kinds = cfg.get("layers_block_type")
    if pattern is None and isinstance(kinds, list):
        odd = sorted({str(k) for k in kinds} - set(_PATTERN_KINDS))
        if odd:
            raise ConfigError(f"{where}: layers_block_type {odd[0]!r} is not a layer kind autotune "
                              f"knows ({', '.join(_PATTERN_KINDS)})")
        pattern = "".join(_PATTERN_KINDS[k] for k in kinds)
    if pattern is None:
        return ""
    if not isinstance(pattern, str) or not pattern or set(pattern) - set("M*-E"):
        raise ConfigError(f"{where}: hybrid_override_pattern {pattern!r} is not a string of "
                          "layer kinds M (Mamba2), * (attention), - (MLP) and E (MoE)")
    return pattern


def _layer_pattern_model(cfg: dict[str, Any], pattern: str, quant: _Quant, where: str,
                         name: str, hf_id: str) -> Model:
    """The Model of a Nemotron-H / Nemotron-3 config, built as vLLM builds it
    (vllm/model_executor/models/nemotron_h.py): one mixer per layer after its norm, as the
    pattern says. Mamba2 layers (MambaMixer2): in_proj to z, x, B, C and dt, a causal
    convolution over x, B and C, out_proj. Attention layers (NemotronHAttention): GQA, no
    rotary. MLP layers (NemotronHMLP): up and down projections with relu2, two matrices. MoE
    layers (NemotronHMoE): a router, routed experts of two projections (relu2) at the latent
    width moe_latent_size where there is one (fc1_latent_proj and fc2_latent_proj around them,
    replicated on every TP rank), and shared experts of moe_shared_expert_intermediate_size.
    The MTP layers are not loaded with the model (its hf_to_vllm_mapper drops mtp.*)."""
    hidden = _need(cfg, "hidden_size", where)
    vocab = _need(cfg, "vocab_size", where)
    max_context = _need(cfg, "max_position_embeddings", where)
    heads = _need(cfg, "num_attention_heads", where)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(_first(cfg, "head_dim", "attention_head_dim") or hidden // heads)
    count = Counter(pattern)
    mamba = None
    if count["M"]:
        dtype = str(cfg.get("mamba_ssm_cache_dtype") or "float32")  # NemotronHConfig's default
        if dtype not in _STATE_DTYPE_BYTES:
            raise ConfigError(f"{where}: mamba_ssm_cache_dtype {dtype!r} is not one of "
                              f"{', '.join(_STATE_DTYPE_BYTES)}")
        mamba = Mamba2(count["M"], _need(cfg, "mamba_num_heads", where),
                       _need(cfg, "mamba_head_dim", where), _need(cfg, "n_groups", where),
                       _need(cfg, "ssm_state_size", where), _need(cfg, "conv_kernel", where),
                       recurrent_bytes=_STATE_DTYPE_BYTES[dtype])
    mlp_width = 0
    if count["-"]:
        if not isinstance(cfg.get("intermediate_size"), int):
            raise ConfigError(f"{where}: field 'intermediate_size' is "
                              f"{cfg.get('intermediate_size')!r}; one width for every MLP layer "
                              "is modelled (a list per layer is not)")
        mlp_width = _need(cfg, "intermediate_size", where)
    experts = per_token = moe_width = latent = shared = shared_width = 0
    if count["E"]:
        experts = _need(cfg, "n_routed_experts", where)
        per_token = _need(cfg, "num_experts_per_tok", where)
        moe_width = _need(cfg, "moe_intermediate_size", where)
        latent = int(cfg.get("moe_latent_size") or 0)
        shared = int(cfg.get("n_shared_experts") or 0)
        shared_width = int(cfg.get("moe_shared_expert_intermediate_size") or 0) if shared else 0

    # Parameters per layer of each kind (norms, biases and the per-head A, D, dt_bias left out).
    mamba_params = 0
    if mamba:
        inner, bc = mamba.inner_size, 2 * mamba.n_groups * mamba.state_size
        mamba_params = (hidden * (2 * inner + bc + mamba.num_heads)  # in_proj: z, x, B, C, dt
                        + (inner + bc) * mamba.conv_kernel + inner * hidden)  # conv1d, out_proj
    attention_params = hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden
    expert_width = latent or hidden
    per_expert = 2 * expert_width * moe_width
    parts = {"attention": float(mamba_params * count["M"] + attention_params * count["*"]),
             "mlp": float(2 * hidden * mlp_width * count["-"]),
             # The latent projections are dense, beside the shared experts.
             "shared": float((2 * hidden * shared_width * shared + 2 * hidden * latent)
                             * count["E"]),
             "router": float(experts * hidden * count["E"]),
             "experts": float(per_expert * experts * count["E"])}
    embed = vocab * hidden
    lm_head = 0 if cfg.get("tie_word_embeddings") else vocab * hidden
    total = sum(parts.values()) + embed + lm_head
    active = total - embed - (parts["experts"] * (1 - per_token / experts) if experts else 0.0)

    def modules(kind: str, module: str) -> list[str]:
        return [f"{i}.mixer.{module}" for i, k in enumerate(pattern) if k == kind]

    formats = {"attention": _quant_of("attention", quant, modules("M", "in_proj")
                                      + modules("*", "o_proj")),
               "mlp": _quant_of("mlp", quant, modules("-", "down_proj")),
               "shared": _quant_of("shared", quant, modules("E", "shared_experts.down_proj")
                                   if shared else []),
               "experts": _quant_of("experts", quant, modules("E", "experts.0.down_proj"))}
    part_bytes = {p: quant.bytes_of(formats[p]) for p in formats}
    dense_params = total - parts["experts"]
    dense_bytes = (sum(parts[p] * part_bytes[p] for p in ("attention", "mlp", "shared"))
                   + 2.0 * (embed + lm_head + parts["router"])) / dense_params
    main = max(("attention", "mlp", "shared"), key=lambda p: parts[p])
    dense_quant, expert_quant = formats[main], formats["experts"] if experts else "bf16"
    arch = ",".join(cfg.get("architectures") or [cfg.get("model_type", "?")])
    source = (f"{where} ({arch}): {len(pattern)} layers, one mixer each: {count['M']} Mamba2, "
              f"{count['*']} attention, {count['-']} MLP, {count['E']} MoE; hidden {hidden}, "
              f"{heads} heads, {kv_heads} KV heads of dim {head_dim}"
              + (f"; Mamba2 {mamba.num_heads} heads of {mamba.head_dim}, {mamba.n_groups} groups, "
                 f"state {mamba.state_size}, SSM state {mamba.recurrent_bytes:g} B per element"
                 if mamba else "")
              + (f"; MLP {mlp_width} (relu2)" if mlp_width else "")
              + (f"; {experts} routed experts + {shared} shared of {shared_width}, {per_token} per "
                 f"token, width {moe_width}" + (f" at latent width {latent}" if latent else "")
                 if experts else "")
              + f"; vocab {vocab}; weights {dense_quant}/{expert_quant}"
              + (f", KV cache {quant.kv_cache_dtype} as declared" if quant.kv_cache_dtype else "")
              + "; total "
              f"{total / 1e9:.1f}B and active {active / 1e9:.1f}B derived from the architecture "
              "(autotune/domain/model_config.py)")
    return Model(name, round(total / 1e9, 3), round(active / 1e9, 3), round(dense_bytes, 4),
                 quant.bytes_of(expert_quant), len(pattern), hidden, vocab, max_context, GQA,
                 heads, kv_heads, head_dim, mlp_width, source, mamba_layers=mamba,
                 layer_pattern=pattern, num_experts=experts, experts_per_token=per_token,
                 moe_intermediate_size=moe_width, params_per_expert=per_expert,
                 num_shared_experts=shared, mtp=int(cfg.get("num_nextn_predict_layers") or 0) > 0,
                 dense_quant=dense_quant, expert_quant=expert_quant,
                 quant_block=quant.block if "fp8_block" in (dense_quant, expert_quant) else 0,
                 checkpoint_kv_cache_dtype=quant.kv_cache_dtype, hf_id=hf_id)


def _is_mimo_sliding(cfg: dict[str, Any]) -> bool:
    """MiMo-V2-Flash's hybrid_layer_pattern: 1 marks a sliding-window layer."""
    pattern = cfg.get("hybrid_layer_pattern")
    return isinstance(pattern, list) and set(pattern) <= {0, 1} and "swa_head_dim" in cfg


def _mimo_layer_types(cfg: dict[str, Any], layers: int, heads: int, where: str) -> list[str]:
    """MiMo-V2-Flash's layers as layer_types would name them: hybrid_layer_pattern's 1s are
    sliding-window layers (vllm/model_executor/models/mimo_v2.py,
    MiMoV2FlashDecoderLayer.is_swa_layer), built with the swa_* heads. Refused where the two
    kinds differ in what one Model cannot hold: query heads or V head width."""
    pattern = cfg["hybrid_layer_pattern"]
    if len(pattern) != layers:
        raise ConfigError(f"{where}: hybrid_layer_pattern has {len(pattern)} entries for "
                          f"{layers} layers")
    for swa, full in (("swa_num_attention_heads", heads),
                      ("swa_v_head_dim", cfg.get("v_head_dim"))):
        if cfg.get(swa) not in (None, full):
            raise ConfigError(f"{where}: {swa} {cfg.get(swa)} differs from the full-attention "
                              f"layers' {full}; sliding layers of other query heads or V width "
                              "are not modelled")
    return ["sliding_attention" if p else "full_attention" for p in pattern]


def _nas_blocks_model(cfg: dict[str, Any], quant: _Quant, where: str, name: str,
                      hf_id: str) -> Model:
    """The Model of a NAS-derived Llama-Nemotron config (block_configs), as vLLM builds it
    (vllm/model_executor/models/nemotron_nas.py, DeciLMDecoderLayer): each layer's attention
    has num_attention_heads / n_heads_in_group KV heads or is a no-op, and its FFN is a Llama
    MLP (gate, up and down) of _ffn_mult_to_intermediate_size(ffn_mult) or is a no-op. Read as a
    layer pattern of those sublayers ("*" attention, "-" MLP); attention layers with different
    KV heads, and the block options vLLM does not build (replace_with_linear, sparsify,
    window_length), are refused."""
    hidden = _need(cfg, "hidden_size", where)
    vocab = _need(cfg, "vocab_size", where)
    max_context = _need(cfg, "max_position_embeddings", where)
    heads = _need(cfg, "num_attention_heads", where)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    blocks = cfg["block_configs"]
    if not isinstance(blocks, list) or len(blocks) != _need(cfg, "num_hidden_layers", where):
        raise ConfigError(f"{where}: block_configs must list one block per layer "
                          "(num_hidden_layers)")
    pattern, widths, kv_heads = "", [], set()
    modules: dict[str, list[str]] = {"attention": [], "mlp": []}  # each part's, per layer
    for i, block in enumerate(blocks):
        attention, ffn = (block or {}).get("attention") or {}, (block or {}).get("ffn") or {}
        odd = [f"{part}.{k}" for part, fields in (("attention", attention), ("ffn", ffn))
               for k in ("replace_with_linear", "sparsify", "window_length") if fields.get(k)]
        if odd:
            raise ConfigError(f"{where}: block_configs[{i}] sets {', '.join(odd)}, which vLLM's "
                              "DeciLM layers do not build; not modelled")
        if not attention.get("no_op"):
            group = attention.get("n_heads_in_group")
            if not isinstance(group, int) or group <= 0 or heads % group:
                raise ConfigError(f"{where}: block_configs[{i}].attention.n_heads_in_group "
                                  f"{group!r} does not divide the {heads} attention heads")
            kv_heads.add(heads // group)
            pattern += "*"
            modules["attention"].append(f"{i}.{_MODULES['attention']}")
        if not ffn.get("no_op"):
            width = ffn.get("intermediate_size") or (
                _round_up(int(2 * float(ffn["ffn_mult"]) * hidden / 3), 256)
                if ffn.get("ffn_mult") else 0)
            if not width:
                raise ConfigError(f"{where}: block_configs[{i}].ffn has neither ffn_mult nor "
                                  "intermediate_size")
            widths.append(int(width))
            pattern += "-"
            modules["mlp"].append(f"{i}.{_MODULES['mlp']}")
    if len(kv_heads) > 1:
        raise ConfigError(f"{where}: block_configs: attention layers with {sorted(kv_heads)} KV "
                          "heads; one KV head count for every attention layer is modelled")
    kv = kv_heads.pop() if kv_heads else heads
    attention_layers = pattern.count("*")
    parts = {"attention": float(attention_layers * (2 * hidden * heads * head_dim
                                                     + 2 * hidden * kv * head_dim)),
             "mlp": float(sum(3 * hidden * w for w in widths))}
    embed = vocab * hidden
    lm_head = 0 if cfg.get("tie_word_embeddings") else vocab * hidden
    total = sum(parts.values()) + embed + lm_head
    formats = {part: _quant_of(part, quant, modules[part]) for part in modules}
    dense_bytes = (parts["attention"] * quant.bytes_of(formats["attention"])
                   + parts["mlp"] * quant.bytes_of(formats["mlp"]) + 2.0 * (embed + lm_head)) / total
    dense_quant = formats[max(parts, key=lambda p: parts[p])]
    # One width stands for all in the shard rules: their greatest common divisor, since a
    # shard divisible for it is divisible for every layer's.
    width = math.gcd(*widths) if widths else 0
    arch = ",".join(cfg.get("architectures") or [cfg.get("model_type", "?")])
    source = (f"{where} ({arch}): {len(blocks)} NAS blocks: {attention_layers} attention "
              f"({heads} heads, {kv} KV heads of dim {head_dim}), {len(widths)} Llama MLPs of "
              f"{min(widths, default=0)}-{max(widths, default=0)}; vocab {vocab}; weights "
              f"{dense_quant}"
              + (f", KV cache {quant.kv_cache_dtype} as declared" if quant.kv_cache_dtype else "")
              + f"; total {total / 1e9:.1f}B derived from the architecture "
              "(autotune/domain/model_config.py)")
    return Model(name, round(total / 1e9, 3), round((total - embed) / 1e9, 3),
                 round(dense_bytes, 4), quant.bytes_of(dense_quant), len(pattern), hidden, vocab,
                 max_context, GQA, heads, kv, head_dim, width, source, layer_pattern=pattern,
                 dense_quant=dense_quant, expert_quant="bf16",
                 quant_block=quant.block if dense_quant == "fp8_block" else 0,
                 checkpoint_kv_cache_dtype=quant.kv_cache_dtype, hf_id=hf_id)


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


def _shared_module(cfg: dict[str, Any]) -> str:
    """A shared expert's down projection as the checkpoint names it: Qwen3.5-MoE's one shared
    expert (shared_expert_intermediate_size) is mlp.shared_expert, DeepSeek's mlp.shared_experts."""
    if cfg.get("shared_expert_intermediate_size"):
        return "mlp.shared_expert.down_proj"
    return _MODULES["shared"]


def _experts_module(cfg: dict[str, Any], beside_mlp: bool) -> str:
    """One routed expert's down projection as the checkpoint names it: Gemma 4's experts sit
    beside its MLP (Gemma4DecoderLayer.moe), Mixtral's and MiniMax's in block_sparse_moe with
    w1/w2/w3 projections (vllm/model_executor/models/minimax_m2.py,
    MiniMaxM2Model.get_expert_mapping: ckpt_down_proj_name "w2"), everyone else's under mlp."""
    if beside_mlp:
        return "moe.experts.0.down_proj"
    if any(a.startswith(("Mixtral", "MiniMax")) for a in cfg.get("architectures") or []):
        return "block_sparse_moe.experts.0.w2"
    return _MODULES["experts"]


def _leading_dense(freq: Any, where: str) -> int:
    """How many leading layers a moe_layer_freq list keeps dense (0s before the 1s); a list
    that mixes them further on is refused, not misread."""
    if not isinstance(freq, list):
        return 0
    leading = next((i for i, f in enumerate(freq) if f), len(freq))
    if not all(freq[leading:]):
        raise ConfigError(f"{where}: moe_layer_freq mixes dense and MoE layers after the first "
                          "MoE layer; only leading dense layers are modelled")
    return leading


def _gdn_params(gdn: GatedDeltaNet | None, hidden: int) -> int:
    """One gated-delta-net layer's weights (vllm/model_executor/layers/mamba/gdn_linear_attn.py,
    GatedDeltaNetAttention): in_proj_qkvz (q, k, v and the output gate z), in_proj_ba (a beta and
    a decay per value head), the causal convolution over q, k and v, and out_proj."""
    if gdn is None:
        return 0
    conv_dim = 2 * gdn.key_dim + gdn.value_dim
    return (hidden * (2 * gdn.key_dim + 2 * gdn.value_dim) + hidden * 2 * gdn.num_value_heads
            + conv_dim * gdn.conv_kernel + gdn.value_dim * hidden)


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"model config {path}: cannot read it ({exc.strerror}); pass a "
                          "config.json or a model directory holding one") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"model config {path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"model config {path}: expected a JSON object")
    return data


def _default_name(path: Path) -> str:
    if path.name == "config.json":
        return path.resolve().parent.name
    return path.name.removesuffix(".json").removesuffix("_config")


def _need(cfg: dict[str, Any], key: str, where: str) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        found = "missing" if value is None else f"{value!r}, not a positive integer"
        raise ConfigError(f"{where}: field {key!r} is {found}; a model config needs it "
                          "(the model's published config.json has it)")
    return value


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    return next((cfg[k] for k in keys if cfg.get(k) is not None), None)


def _quant(qcfg: dict[str, Any] | None, where: str) -> _Quant:
    """The weight format of a quantization_config (or hf_quant_config.json)."""
    if not qcfg:
        return _Quant("bf16", 0, 2.0, ())
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
            return _Quant("fp8_block", int(block[0]), 1.0, excluded)
        return _Quant("fp8", 0, 1.0, excluded)
    if method == "mxfp4":
        # vllm/model_executor/layers/quantization/mxfp4.py::Mxfp4Config.get_quant_method: linear
        # layers stay unquantised, the MoE experts are MXFP4.
        return _Quant("mxfp4", 0, QUANT_FORMATS["mxfp4"], excluded, experts_only=True)
    if method.startswith("modelopt"):
        # vllm/model_executor/layers/quantization/modelopt.py QUANT_ALGOS.
        algo = str(qcfg.get("quant_algo", "")).upper()
        kv = _modelopt_kv_cache_dtype(qcfg)
        if algo in _MODELOPT_FORMATS:
            fmt = _MODELOPT_FORMATS[algo]
            return _Quant(fmt, 128 if fmt == "fp8_block" else 0, QUANT_FORMATS[fmt], excluded,
                          kv_cache_dtype=kv)
        if algo == "MIXED_PRECISION":
            return replace(_mixed_precision(qcfg, excluded, where), kv_cache_dtype=kv)
        raise ConfigError(f"{where}: ModelOpt quant_algo {algo or 'missing'!r} is not one autotune "
                          f"knows ({', '.join([*_MODELOPT_FORMATS, 'MIXED_PRECISION'])})")
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


def _mixed_precision(qcfg: dict[str, Any], excluded: tuple[str, ...], where: str) -> _Quant:
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
    return _Quant(name, 128 if name == "fp8_block" else 0, QUANT_FORMATS[name], excluded,
                  per_module=tuple(per_module))


def _compressed_tensors(qcfg: dict[str, Any], excluded: tuple[str, ...], where: str) -> _Quant:
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
        return _Quant("int4_wo", 0, 0.5 + (2.0 / group if group else 0.0), excluded)
    if kind == "float" and bits == 8:
        block = weights.get("block_structure")
        if weights.get("strategy") == "block" and block:
            return _Quant("fp8_block", int(block[0]), 1.0, excluded)
        return _Quant("fp8", 0, 1.0, excluded)
    if kind == "float" and bits == 4 and group == 16:
        return _Quant("nvfp4", 0, QUANT_FORMATS["nvfp4"], excluded)
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


def _module_format(module: str, quant: _Quant) -> str:
    """One layer's module (`module`: its path under the layers, "3.mlp.down_proj"): the format
    the checkpoint stores it in, under whichever layer prefix the checkpoint uses."""
    paths = [f"{prefix}.{module}" for prefix in _LAYER_PREFIXES]
    if quant.per_module:
        return next((fmt for path in paths for key, fmt in quant.per_module
                     if path == key or path.startswith(key + ".")), "bf16")
    return "bf16" if any(_excluded(path, quant.excluded) for path in paths) else quant.name


def _quant_of(part: str, quant: _Quant, modules: list[str]) -> str:
    """The format a part is served in: the one most of its layers have (`modules`: the part's
    module in each layer that has it; exclusion lists that name layers one by one, or keep the
    first layers whole, are read as the bulk is)."""
    if quant.name == "bf16" or (quant.experts_only and part != "experts") or not modules:
        return "bf16"
    return Counter(_module_format(m, quant) for m in modules).most_common(1)[0][0]


def _model(cfg: dict[str, Any], quant: _Quant, where: str, name: str, hf_id: str) -> Model:
    layers = _need(cfg, "num_hidden_layers", where)
    hidden = _need(cfg, "hidden_size", where)
    vocab = _need(cfg, "vocab_size", where)
    max_context = _need(cfg, "max_position_embeddings", where)
    heads = _need(cfg, "num_attention_heads", where)

    # Experts: DeepSeek n_routed_experts, Qwen3-MoE and Gemma 4 num_experts, Mixtral/MiniMax/
    # gpt-oss num_local_experts; per token: Gemma 4 says top_k_experts. The expert width is
    # moe_intermediate_size where the model has one, else intermediate_size (Mixtral,
    # MiniMax-M2, gpt-oss have no dense MLP).
    experts = int(_first(cfg, "n_routed_experts", "num_experts", "num_local_experts") or 0)
    moe_width = per_token = shared = first_dense = 0
    # Gemma 4's MoE layers run a dense MLP beside the experts, every layer (enable_moe_block:
    # Gemma4DecoderLayer runs self.mlp unconditionally and adds self.moe's output).
    mlp_beside_experts = bool(cfg.get("enable_moe_block") or cfg.get("use_second_mlp_block"))
    if experts:
        per_token = int(_first(cfg, "num_experts_per_tok", "experts_per_token", "top_k_experts")
                        or 0)
        if not per_token:
            raise ConfigError(f"{where}: field 'num_experts_per_tok' is missing; a mixture-of-"
                              "experts config needs it")
        moe_width = int(_first(cfg, "moe_intermediate_size", "expert_intermediate_size")
                        or _need(cfg, "intermediate_size", where))
        shared = int(cfg.get("n_shared_experts") or 0)
        # Qwen3.5-MoE's one shared expert, of its own width (shared_expert_intermediate_size).
        if cfg.get("shared_expert_intermediate_size"):
            shared_width = int(cfg["shared_expert_intermediate_size"])
            if shared_width % moe_width:
                raise ConfigError(f"{where}: a shared expert {shared_width} wide beside experts "
                                  f"{moe_width} wide is not modelled")
            shared = shared_width // moe_width
        # DeepSeek's first_k_dense_replace; Qwen3-MoE's mlp_only_layers (taken as leading);
        # MiniMax-M3's moe_layer_freq (0: a dense layer), which must lead too. (MiniMax-M3's
        # fields as its published config defines them; vLLM's model file for it was not among
        # the sources searched.)
        first_dense = int(cfg.get("first_k_dense_replace") or len(cfg.get("mlp_only_layers") or [])
                          or _leading_dense(cfg.get("moe_layer_freq"), where))
    dense_layers = layers if not experts or mlp_beside_experts else first_dense
    # MiniMax-M3's dense layers have a width of their own (intermediate_size is its experts').
    dense_width = (int(_first(cfg, "dense_intermediate_size")
                       or _need(cfg, "intermediate_size", where)) if dense_layers else 0)
    moe_layers = layers - first_dense if experts else 0

    mla = cfg.get("kv_lora_rank") is not None
    if mla:
        kv_lora = _need(cfg, "kv_lora_rank", where)
        rope, nope = _need(cfg, "qk_rope_head_dim", where), _need(cfg, "qk_nope_head_dim", where)
        v_dim = _need(cfg, "v_head_dim", where)
        q_lora = cfg.get("q_lora_rank")
        q = (hidden * q_lora + q_lora * heads * (nope + rope)) if q_lora else hidden * heads * (nope + rope)
        attn = q + hidden * (kv_lora + rope) + kv_lora * heads * (nope + v_dim) + heads * v_dim * hidden
        kv_heads, head_dim = 1, nope + rope
    else:
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or hidden // heads)
    gqa_v_dim = 0  # GQA's V head width where it is not the K head width

    # gpt-oss, Gemma 4, Qwen3.5: layer_types names each layer; sliding layers attend to
    # sliding_window tokens. (gpt-oss's per-head attention sinks are one learned logit per head:
    # no KV, no weights to count.)
    layer_types = cfg.get("layer_types") or []
    gdn = _gated_delta_net(cfg, layers, where) if _is_gated_delta_net(cfg) else None
    linear_layers = gdn.layers if gdn else 0
    # Gemma 4's full-attention layers: head width global_head_dim, and with attention_k_eq_v
    # num_global_key_value_heads KV heads, whose K vLLM loads into both the K and the V slot
    # (vllm/model_executor/models/gemma4.py, Gemma4DecoderLayer.__init__, Gemma4Attention).
    full_head_dim = int(cfg.get("global_head_dim") or 0) if layer_types else 0
    full_kv_heads = (int(cfg.get("num_global_key_value_heads") or 0)
                     if layer_types and cfg.get("attention_k_eq_v") else 0)
    if _is_mimo_sliding(cfg):
        # MiMo-V2-Flash: its sliding layers' attention has KV heads of its own (swa_*), and
        # the full layers' are the plain fields; both have V heads narrower than K.
        layer_types = _mimo_layer_types(cfg, layers, heads, where)
        full_kv_heads, full_head_dim = kv_heads, head_dim
        kv_heads = _need(cfg, "swa_num_key_value_heads", where)
        head_dim = _need(cfg, "swa_head_dim", where)
        gqa_v_dim = _need(cfg, "v_head_dim", where)
    window_layers = sum(1 for t in layer_types if t == "sliding_attention")
    window = int(_first(cfg, "sliding_window_size", "sliding_window") or 0) if window_layers else 0
    if not mla:
        # Qwen3.5's and Qwen3-Next's attn_output_gate: q_proj also gives a gate per head
        # (vllm/model_executor/models/qwen3_next.py, Qwen3NextAttention).
        q_width = 2 if cfg.get("attn_output_gate") else 1

        def attn_per_layer(kv: int, dim: int) -> int:  # q, k, v and o projections
            v_dim = gqa_v_dim or dim
            return (q_width * hidden * heads * dim + heads * v_dim * hidden
                    + hidden * kv * (dim + v_dim))

        full_layers = layers - window_layers - linear_layers
        attn = (attn_per_layer(kv_heads, head_dim) * window_layers
                + attn_per_layer(full_kv_heads or kv_heads, full_head_dim or head_dim)
                * full_layers + _gdn_params(gdn, hidden) * linear_layers) / layers

    embed = vocab * hidden
    lm_head = 0 if cfg.get("tie_word_embeddings") else vocab * hidden
    parts = {"attention": float(attn * layers),
             "mlp": float(3 * hidden * dense_width * dense_layers),
             "shared": float(3 * hidden * moe_width * shared * moe_layers),
             "router": float(experts * hidden * moe_layers),
             "experts": float(3 * hidden * moe_width * experts * moe_layers)}
    total = sum(parts.values()) + embed + lm_head
    active = total - embed - (parts["experts"] * (1 - per_token / experts) if experts else 0.0)

    kinds = layer_types or ["full_attention"] * layers
    modules = {
        "attention": [f"{i}.{_MODULES['linear_attention' if t == 'linear_attention' else 'attention']}"
                      for i, t in enumerate(kinds)],
        "mlp": [f"{i}.{_MODULES['mlp']}" for i in range(dense_layers)],
        "shared": [f"{i}.{_shared_module(cfg)}" for i in range(first_dense, layers)] if shared else [],
        "experts": [f"{i}.{_experts_module(cfg, mlp_beside_experts)}"
                    for i in range(first_dense, layers)] if experts else []}
    formats = {part: _quant_of(part, quant, modules[part]) for part in modules}
    part_bytes = {p: quant.bytes_of(formats[p]) for p in formats}
    # Embeddings, the LM head and routers stay bf16 (vLLM's Fp8Config and the others quantise
    # linear layers; the exclusion lists name lm_head and the routers).
    dense_params = total - parts["experts"]
    dense_bytes = (sum(parts[p] * part_bytes[p] for p in ("attention", "mlp", "shared"))
                   + 2.0 * (embed + lm_head + parts["router"])) / dense_params
    # The dense format the rules key on: the largest quantisable dense part's.
    main = max(("attention", "mlp", "shared"), key=lambda p: parts[p])
    dense_quant = formats[main]
    expert_quant = formats["experts"] if experts else "bf16"
    mtp = int(cfg.get("num_nextn_predict_layers") or 0) > 0

    arch = ",".join(cfg.get("architectures") or [cfg.get("model_type", "?")])
    source = (f"{where} ({arch}): {layers} layers, hidden {hidden}, {heads} heads, "
              + (f"MLA kv_lora_rank {cfg.get('kv_lora_rank')} + rope {cfg.get('qk_rope_head_dim')}"
                 if mla else f"{kv_heads} KV heads of dim {head_dim}"
                 + (f" (V {gqa_v_dim})" if gqa_v_dim else ""))
              + (f", {window_layers} sliding-window layers of {window}" if window_layers else "")
              + (f", full-attention layers {full_kv_heads or kv_heads} KV heads of dim "
                 f"{full_head_dim or head_dim}" if full_kv_heads or full_head_dim else "")
              + (f", {linear_layers} gated-delta-net layers ({gdn.num_key_heads} key and "
                 f"{gdn.num_value_heads} value heads of {gdn.key_head_dim} / "
                 f"{gdn.value_head_dim}, recurrent state {gdn.recurrent_bytes:g} B per element)"
                 if gdn else "")
              + (f"; {experts} routed experts + {shared} shared, {per_token} per token, width "
                 f"{moe_width}, first {first_dense} layers dense"
                 + (f", a dense MLP {dense_width} beside them" if mlp_beside_experts else "")
                 if experts else
                 f"; MLP {dense_width}")
              + ("; its sparse indexer (index_topk, sparse_attention_config) is not modelled: "
                 "attention reads every context token" if cfg.get("index_topk")
                 or (cfg.get("sparse_attention_config") or {}).get("use_sparse_attention") else "")
              + f"; vocab {vocab}; weights {dense_quant}/{expert_quant}"
              + (f", KV cache {quant.kv_cache_dtype} as declared" if quant.kv_cache_dtype else "")
              + "; total "
              f"{total / 1e9:.1f}B and active {active / 1e9:.1f}B derived from the architecture "
              "(autotune/domain/model_config.py)")
    return Model(name, round(total / 1e9, 3), round(active / 1e9, 3), round(dense_bytes, 4),
                 quant.bytes_of(expert_quant), layers, hidden, vocab,
                 max_context, MLA if mla else GQA, heads, kv_heads, head_dim,
                 dense_width, source,
                 kv_lora_rank=int(cfg.get("kv_lora_rank") or 0) if mla else 0,
                 qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0) if mla else 0,
                 v_head_dim=int(cfg.get("v_head_dim") or 0) if mla else gqa_v_dim,
                 sliding_window=window, sliding_window_layers=window_layers,
                 full_attention_kv_heads=full_kv_heads, full_attention_head_dim=full_head_dim,
                 mamba_layers=gdn,
                 num_experts=experts, experts_per_token=per_token, moe_intermediate_size=moe_width,
                 num_shared_experts=shared, first_dense_layers=first_dense, mtp=mtp,
                 dense_quant=dense_quant, expert_quant=expert_quant,
                 quant_block=quant.block if "fp8_block" in (dense_quant, expert_quant) else 0,
                 checkpoint_kv_cache_dtype=quant.kv_cache_dtype, hf_id=hf_id)

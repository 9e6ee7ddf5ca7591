"""Models whose layers each hold one part, read as a layer pattern (Model.layer_pattern):
Nemotron-H and Nemotron-3 (hybrid_override_pattern: Mamba2, attention, MLP or MoE per layer) and
Llama-Nemotron's NAS blocks (block_configs: an attention and an MLP, either of which may be
missing). Parameter counts follow what vLLM builds, as in model_config.py."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from autotune.domain.checkpoint_quant import (
    MODULES,
    CheckpointQuant,
    dense_bytes_per_param,
    part_format,
)
from autotune.domain.config_fields import STATE_DTYPE_BYTES, first, need
from autotune.domain.specs import GQA, Mamba2, Model
from autotune.errors import ConfigError

# Nemotron-H's layer kinds as layers_block_type names them (transformers' NemotronHConfig
# ._list_to_pattern; the legacy names its remap_legacy_layer_types renames).
_PATTERN_KINDS = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*",
                  "mlp": "-", "moe": "E"}


def layer_pattern(cfg: dict[str, Any], where: str) -> str:
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


def layer_pattern_model(cfg: dict[str, Any], pattern: str, quant: CheckpointQuant, where: str,
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
    hidden = need(cfg, "hidden_size", where)
    vocab = need(cfg, "vocab_size", where)
    max_context = need(cfg, "max_position_embeddings", where)
    heads = need(cfg, "num_attention_heads", where)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(first(cfg, "head_dim", "attention_head_dim") or hidden // heads)
    count = Counter(pattern)
    mamba = None
    if count["M"]:
        dtype = str(cfg.get("mamba_ssm_cache_dtype") or "float32")  # NemotronHConfig's default
        if dtype not in STATE_DTYPE_BYTES:
            raise ConfigError(f"{where}: mamba_ssm_cache_dtype {dtype!r} is not one of "
                              f"{', '.join(STATE_DTYPE_BYTES)}")
        mamba = Mamba2(count["M"], need(cfg, "mamba_num_heads", where),
                       need(cfg, "mamba_head_dim", where), need(cfg, "n_groups", where),
                       need(cfg, "ssm_state_size", where), need(cfg, "conv_kernel", where),
                       recurrent_bytes=STATE_DTYPE_BYTES[dtype])
    mlp_width = 0
    if count["-"]:
        if not isinstance(cfg.get("intermediate_size"), int):
            raise ConfigError(f"{where}: field 'intermediate_size' is "
                              f"{cfg.get('intermediate_size')!r}; one width for every MLP layer "
                              "is modelled (a list per layer is not)")
        mlp_width = need(cfg, "intermediate_size", where)
    experts = per_token = moe_width = latent = shared = shared_width = 0
    if count["E"]:
        experts = need(cfg, "n_routed_experts", where)
        per_token = need(cfg, "num_experts_per_tok", where)
        moe_width = need(cfg, "moe_intermediate_size", where)
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

    formats = {"attention": part_format("attention", quant, modules("M", "in_proj")
                                        + modules("*", "o_proj")),
               "mlp": part_format("mlp", quant, modules("-", "down_proj")),
               "shared": part_format("shared", quant, modules("E", "shared_experts.down_proj")
                                     if shared else []),
               "experts": part_format("experts", quant, modules("E", "experts.0.down_proj"))}
    dense_bytes = dense_bytes_per_param(quant, parts, formats, embed + lm_head + parts["router"])
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
              + quant.kv_cache_note
              + "; total "
              f"{total / 1e9:.1f}B and active {active / 1e9:.1f}B derived from the architecture "
              "(autotune/domain/layer_pattern_config.py)")
    return Model(name, round(total / 1e9, 3), round(active / 1e9, 3), round(dense_bytes, 4),
                 quant.bytes_of(expert_quant), len(pattern), hidden, vocab, max_context, GQA,
                 heads, kv_heads, head_dim, mlp_width, source, mamba_layers=mamba,
                 layer_pattern=pattern, num_experts=experts, experts_per_token=per_token,
                 moe_intermediate_size=moe_width, params_per_expert=per_expert,
                 num_shared_experts=shared, mtp=int(cfg.get("num_nextn_predict_layers") or 0) > 0,
                 dense_quant=dense_quant, expert_quant=expert_quant,
                 quant_block=quant.block if "fp8_block" in (dense_quant, expert_quant) else 0,
                 checkpoint_kv_cache_dtype=quant.kv_cache_dtype, hf_id=hf_id)


def nas_blocks_model(cfg: dict[str, Any], quant: CheckpointQuant, where: str, name: str,
                      hf_id: str) -> Model:
    """The Model of a NAS-derived Llama-Nemotron config (block_configs), as vLLM builds it
    (vllm/model_executor/models/nemotron_nas.py, DeciLMDecoderLayer): each layer's attention
    has num_attention_heads / n_heads_in_group KV heads or is a no-op, and its FFN is a Llama
    MLP (gate, up and down) of _ffn_mult_to_intermediate_size(ffn_mult) or is a no-op. Read as a
    layer pattern of those sublayers ("*" attention, "-" MLP); attention layers with different
    KV heads, and the block options vLLM does not build (replace_with_linear, sparsify,
    window_length), are refused."""
    hidden = need(cfg, "hidden_size", where)
    vocab = need(cfg, "vocab_size", where)
    max_context = need(cfg, "max_position_embeddings", where)
    heads = need(cfg, "num_attention_heads", where)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    blocks = cfg["block_configs"]
    if not isinstance(blocks, list) or len(blocks) != need(cfg, "num_hidden_layers", where):
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
            modules["attention"].append(f"{i}.{MODULES['attention']}")
        if not ffn.get("no_op"):
            width = ffn.get("intermediate_size") or (
                _round_up(int(2 * float(ffn["ffn_mult"]) * hidden / 3), 256)
                if ffn.get("ffn_mult") else 0)
            if not width:
                raise ConfigError(f"{where}: block_configs[{i}].ffn has neither ffn_mult nor "
                                  "intermediate_size")
            widths.append(int(width))
            pattern += "-"
            modules["mlp"].append(f"{i}.{MODULES['mlp']}")
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
    formats = {part: part_format(part, quant, modules[part]) for part in modules}
    dense_bytes = dense_bytes_per_param(quant, parts, formats, embed + lm_head)
    dense_quant = formats[max(parts, key=lambda p: parts[p])]
    # One width stands for all in the shard rules: their greatest common divisor, since a
    # shard divisible for it is divisible for every layer's.
    width = math.gcd(*widths) if widths else 0
    arch = ",".join(cfg.get("architectures") or [cfg.get("model_type", "?")])
    source = (f"{where} ({arch}): {len(blocks)} NAS blocks: {attention_layers} attention "
              f"({heads} heads, {kv} KV heads of dim {head_dim}), {len(widths)} Llama MLPs of "
              f"{min(widths, default=0)}-{max(widths, default=0)}; vocab {vocab}; weights "
              f"{dense_quant}"
              + quant.kv_cache_note
              + f"; total {total / 1e9:.1f}B derived from the architecture "
              "(autotune/domain/layer_pattern_config.py)")
    return Model(name, round(total / 1e9, 3), round((total - embed) / 1e9, 3),
                 round(dense_bytes, 4), quant.bytes_of(dense_quant), len(pattern), hidden, vocab,
                 max_context, GQA, heads, kv, head_dim, width, source, layer_pattern=pattern,
                 dense_quant=dense_quant, expert_quant="bf16",
                 quant_block=quant.block if dense_quant == "fp8_block" else 0,
                 checkpoint_kv_cache_dtype=quant.kv_cache_dtype, hf_id=hf_id)


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k

"""A catalogue Model from a Hugging Face `config.json`.

Reads the architecture fields vLLM's model classes read (vllm/model_executor/models/<arch>.py):
dense and MoE GQA models (Llama, Qwen3, Mistral, Qwen3-MoE, Mixtral, MiniMax-M2, gpt-oss,
Gemma 4, MiMo-V2-Flash), Qwen3.5's gated-delta-net hybrids, and MLA models (DeepSeek-V3,
Kimi-K2/K2.5, whose multimodal config nests the language model under `text_config`, GLM-5);
models whose layers each hold one part (Nemotron-H, Llama-Nemotron's NAS blocks) are read by
layer_pattern_config.py. Parameter counts are derived from the architecture (embeddings,
attention projections, MLPs, routed and shared experts, routers; norms and biases are left out,
under 0.1%), and the weight formats and bytes from `quantization_config` (or a ModelOpt
`hf_quant_config.json` beside the file) as checkpoint_quant.py reads them.

Active parameters count what one token's forward pass multiplies by: everything but the input
embedding table (a lookup) and the routed experts a token does not use; the model cards count
the same way (gpt-oss-120b: 5.1B active of 117B).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autotune.domain.catalogue_dsv4 import DSV4_MODELS
from autotune.domain.checkpoint_quant import (
    MODULES,
    CheckpointQuant,
    dense_bytes_per_param,
    part_format,
    read_quant,
)
from autotune.domain.config_fields import STATE_DTYPE_BYTES, first, need
from autotune.domain.dsv4_config import is_dsv4, read_dsv4
from autotune.domain.layer_pattern_config import layer_pattern, layer_pattern_model, nas_blocks_model
from autotune.domain.specs import GQA, MLA, GatedDeltaNet, KimiDeltaAttention, Model
from autotune.errors import ConfigError


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
    if is_dsv4(arch):
        return read_dsv4(arch, list(DSV4_MODELS), where, name or _default_name(path), hf_id)
    pattern = layer_pattern(arch, where)
    if pattern:
        return layer_pattern_model(arch, pattern, read_quant(qcfg, where), where,
                                    name or _default_name(path), hf_id)
    if arch.get("block_configs"):
        return nas_blocks_model(arch, read_quant(qcfg, where), where, name or _default_name(path),
                                 hf_id)
    _refuse_hybrid(arch, where)
    _refuse_layer_sharing(arch, where)
    quant = read_quant(qcfg, where)
    return _model(arch, quant, where, name or _default_name(path), hf_id)


# Fields of layer kinds the simulator has no model for: Mamba/SSM layers outside a Nemotron-H
# layer pattern, linear attention other than the gated delta net and Kimi's KDA.
_HYBRID_PREFIXES = ("mamba_", "linear_", "ssm_", "hybrid_", "layers_block_type",
                    "full_attention_interval")
_KNOWN_LAYER_TYPES = {"full_attention", "sliding_attention"}
# The gated delta net's fields (Qwen3.5, Qwen3-Next), which the reader does model.
_GDN_FIELDS = {"linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
               "linear_value_head_dim", "linear_conv_kernel_dim", "full_attention_interval",
               "mamba_ssm_dtype"}


def _is_gated_delta_net(cfg: dict[str, Any]) -> bool:
    return "linear_num_value_heads" in cfg and not cfg.get("linear_attn_config")


def _is_kimi_delta_attention(cfg: dict[str, Any]) -> bool:
    """Kimi-K3's linear_attn_config: KDA layers with the full-rank gate vLLM builds
    (vllm/models/kimi_k3/nvidia/kda.py, KimiK3DeltaAttention)."""
    linear = cfg.get("linear_attn_config")
    return (isinstance(linear, dict) and bool(linear.get("kda_layers"))
            and bool(linear.get("use_full_rank_gate")))


def _refuse_hybrid(cfg: dict[str, Any], where: str) -> None:
    """ConfigError for a config whose layers are not all (sliding-window) attention, gated
    delta nets or KDA: read as plain attention it would be modelled wrong without a word."""
    gdn = _is_gated_delta_net(cfg)
    odd = sorted(k for k in cfg if k.startswith(_HYBRID_PREFIXES)
                 and not (gdn and k in _GDN_FIELDS)
                 and not (k == "linear_attn_config" and _is_kimi_delta_attention(cfg))
                 and not (k == "hybrid_layer_pattern" and _is_mimo_sliding(cfg)))
    known = _KNOWN_LAYER_TYPES | ({"linear_attention"} if gdn else set())
    if cfg.get("kv_lora_rank") is not None and cfg.get("index_topk"):
        # GLM-5.2's MLA layers with DeepSeek-V3.2's sparse indexer (vllm/models/deepseek_v32,
        # GlmMoeDsaForCausalLM), read as MLA attention as GLM-5's are (see the source note).
        known |= {"deepseek_sparse_attention"}
    odd += [f"layer_types {t!r}" for t in sorted(set(cfg.get("layer_types") or []))
            if t not in known]
    if odd:
        raise ConfigError(f"{where}: {', '.join(odd[:3])}: layers other than attention, gated "
                          "delta nets, Kimi's KDA and Nemotron-H's Mamba2 are not modelled; "
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
        interval = need(cfg, "full_attention_interval", where)
        linear = layers - layers // interval
    dtype = str(cfg.get("mamba_ssm_dtype") or "bfloat16")
    if dtype not in STATE_DTYPE_BYTES:
        raise ConfigError(f"{where}: mamba_ssm_dtype {dtype!r} is not one of "
                          f"{', '.join(STATE_DTYPE_BYTES)}")
    return GatedDeltaNet(linear, need(cfg, "linear_num_key_heads", where),
                         need(cfg, "linear_num_value_heads", where),
                         need(cfg, "linear_key_head_dim", where),
                         need(cfg, "linear_value_head_dim", where),
                         need(cfg, "linear_conv_kernel_dim", where),
                         recurrent_bytes=STATE_DTYPE_BYTES[dtype])


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


def _shared_module(cfg: dict[str, Any]) -> str:
    """A shared expert's down projection as the checkpoint names it: Qwen3.5-MoE's one shared
    expert (shared_expert_intermediate_size) is mlp.shared_expert, DeepSeek's mlp.shared_experts."""
    if cfg.get("shared_expert_intermediate_size"):
        return "mlp.shared_expert.down_proj"
    return MODULES["shared"]


def _experts_module(cfg: dict[str, Any], beside_mlp: bool) -> str:
    """One routed expert's down projection as the checkpoint names it: Gemma 4's experts sit
    beside its MLP (Gemma4DecoderLayer.moe), Mixtral's and MiniMax's in block_sparse_moe with
    w1/w2/w3 projections (vllm/model_executor/models/minimax_m2.py,
    MiniMaxM2Model.get_expert_mapping: ckpt_down_proj_name "w2"), everyone else's under mlp."""
    if beside_mlp:
        return "moe.experts.0.down_proj"
    if any(a.startswith(("Mixtral", "MiniMax")) for a in cfg.get("architectures") or []):
        return "block_sparse_moe.experts.0.w2"
    return MODULES["experts"]


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


def _kimi_delta_attention(cfg: dict[str, Any], layers: int, where: str) -> KimiDeltaAttention:
    """Kimi-K3's KDA layers: those linear_attn_config.kda_layers names, 1-based
    (vllm/transformers_utils/configs/kimi_linear.py, KimiLinearConfig.is_kda_layer); every
    other layer is MLA. The recurrent state is float32 (mamba_ssm_cache_dtype auto:
    MambaStateDtypeCalculator.kda_state_dtype)."""
    linear = cfg["linear_attn_config"]
    kda = [i for i in linear["kda_layers"] if isinstance(i, int) and 1 <= i <= layers]
    if len(kda) != len(linear["kda_layers"]):
        raise ConfigError(f"{where}: linear_attn_config.kda_layers names layers outside 1.."
                          f"{layers}")
    return KimiDeltaAttention(len(kda), need(linear, "num_heads", where),
                              need(linear, "head_dim", where),
                              need(linear, "short_conv_kernel_size", where))


def _kda_params(kda: KimiDeltaAttention, hidden: int) -> int:
    """One KDA layer's weights (vllm/models/kimi_k3/nvidia/kda.py, KimiK3DeltaAttention):
    in_proj_qkvgfab (q, k, v, the full-rank output gate g, the decay's low-rank f_a of 128 and
    a beta per head), f_b_proj back to the heads, the short convolution over q, k and v, and
    o_proj."""
    inner = kda.inner_size
    return (hidden * (4 * inner + 128 + kda.num_heads) + 128 * inner
            + 3 * inner * kda.conv_kernel + inner * hidden)


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


@dataclass(frozen=True)
class _Experts:
    """A mixture of experts' routed and shared experts; count 0 for a dense model."""

    count: int = 0  # routed experts
    per_token: int = 0
    width: int = 0  # one expert's intermediate size
    shared: int = 0  # shared experts, counted in experts of `width`
    first_dense: int = 0  # the leading layers that have a dense MLP instead
    latent: int = 0  # Kimi-K3's latent MoE: the hidden width its experts run at
    # Gemma 4's MoE layers run a dense MLP beside the experts, every layer (enable_moe_block:
    # Gemma4DecoderLayer runs self.mlp unconditionally and adds self.moe's output).
    beside_mlp: bool = False


def _experts(cfg: dict[str, Any], where: str) -> _Experts:
    """Experts: DeepSeek n_routed_experts, Qwen3-MoE and Gemma 4 num_experts, Mixtral/MiniMax/
    gpt-oss num_local_experts; per token: Gemma 4 says top_k_experts. The expert width is
    moe_intermediate_size where the model has one, else intermediate_size (Mixtral,
    MiniMax-M2, gpt-oss have no dense MLP)."""
    count = int(first(cfg, "n_routed_experts", "num_experts", "num_local_experts") or 0)
    if not count:
        return _Experts()
    per_token = int(first(cfg, "num_experts_per_tok", "experts_per_token", "top_k_experts",
                          "num_experts_per_token") or 0)
    if not per_token:
        raise ConfigError(f"{where}: field 'num_experts_per_tok' is missing; a mixture-of-"
                          "experts config needs it")
    width = int(first(cfg, "moe_intermediate_size", "expert_intermediate_size")
                or need(cfg, "intermediate_size", where))
    # Kimi-K3's latent MoE: its experts run at routed_expert_hidden_size, between a down and an
    # up projection replicated on every rank (vllm/models/kimi_k3/nvidia/model.py, KimiMoE).
    return _Experts(count, per_token, width, _shared_experts(cfg, width, where),
                    _first_dense(cfg, where), int(cfg.get("routed_expert_hidden_size") or 0),
                    bool(cfg.get("enable_moe_block") or cfg.get("use_second_mlp_block")))


def _shared_experts(cfg: dict[str, Any], width: int, where: str) -> int:
    """How many experts of `width` the shared experts make: DeepSeek's n_shared_experts, or
    Qwen3.5-MoE's one shared expert of its own width (shared_expert_intermediate_size)."""
    shared = int(first(cfg, "n_shared_experts", "num_shared_experts") or 0)
    if cfg.get("shared_expert_intermediate_size"):
        shared_width = int(cfg["shared_expert_intermediate_size"])
        if shared_width % width:
            raise ConfigError(f"{where}: a shared expert {shared_width} wide beside experts "
                              f"{width} wide is not modelled")
        shared = shared_width // width
    return shared


def _first_dense(cfg: dict[str, Any], where: str) -> int:
    """The leading layers without experts: DeepSeek's first_k_dense_replace; Qwen3-MoE's
    mlp_only_layers (taken as leading); MiniMax-M3's moe_layer_freq (0: a dense layer), which
    must lead too. (MiniMax-M3's fields as its published config defines them; vLLM's model file
    for it was not among the sources searched.)"""
    return int(cfg.get("first_k_dense_replace") or len(cfg.get("mlp_only_layers") or [])
               or _leading_dense(cfg.get("moe_layer_freq"), where))


def _dense_mlp(cfg: dict[str, Any], experts: _Experts, layers: int,
               where: str) -> tuple[int, int]:
    """(layers with a dense MLP, its intermediate size): every layer of a dense model or of
    Gemma 4, else a MoE model's leading dense layers."""
    dense_layers = layers if not experts.count or experts.beside_mlp else experts.first_dense
    # MiniMax-M3's dense layers have a width of their own (intermediate_size is its experts').
    width = (int(first(cfg, "dense_intermediate_size") or need(cfg, "intermediate_size", where))
             if dense_layers else 0)
    return dense_layers, width


@dataclass(frozen=True)
class _Attention:
    """How the layers attend: the heads of MLA or GQA, and which layers are sliding-window,
    full-attention (with heads of their own) or linear (gated delta net, KDA)."""

    kv_heads: int
    head_dim: int  # GQA: K's width (sliding layers' where they differ); MLA: qk_nope + rope
    v_head_dim: int = 0  # MLA's; GQA's where V is not as wide as K (MiMo), else 0
    kv_lora_rank: int = 0  # MLA's latent width; 0 for GQA
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    layer_types: list[str] = field(default_factory=list)  # empty: every layer full attention
    full_kv_heads: int = 0  # the full-attention layers' where they differ, else 0
    full_head_dim: int = 0
    window_layers: int = 0
    window: int = 0
    gdn: GatedDeltaNet | None = None
    kda: KimiDeltaAttention | None = None

    @property
    def mla(self) -> bool:
        return bool(self.kv_lora_rank)

    @property
    def linear_layers(self) -> int:
        return self.gdn.layers if self.gdn else self.kda.layers if self.kda else 0


def _attention(cfg: dict[str, Any], layers: int, hidden: int, heads: int,
               where: str) -> _Attention:
    """The heads of MLA or GQA, then the layers' kinds, MiMo's sliding heads and the window."""
    att = (_mla_heads(cfg, where) if cfg.get("kv_lora_rank") is not None
           else _Attention(int(cfg.get("num_key_value_heads") or heads),
                           int(cfg.get("head_dim") or hidden // heads)))
    att = _layer_kinds(cfg, att, layers, where)
    if _is_mimo_sliding(cfg):
        att = _mimo_heads(cfg, att, layers, heads, where)
    window_layers = sum(1 for t in att.layer_types if t == "sliding_attention")
    window = int(first(cfg, "sliding_window_size", "sliding_window") or 0) if window_layers else 0
    return replace(att, window_layers=window_layers, window=window)


def _mla_heads(cfg: dict[str, Any], where: str) -> _Attention:
    """MLA's one latent KV head, its K width qk_nope + rope."""
    kv_lora = need(cfg, "kv_lora_rank", where)
    rope, nope = need(cfg, "qk_rope_head_dim", where), need(cfg, "qk_nope_head_dim", where)
    return _Attention(1, nope + rope, need(cfg, "v_head_dim", where), kv_lora, rope, nope)


def _layer_kinds(cfg: dict[str, Any], att: _Attention, layers: int, where: str) -> _Attention:
    """gpt-oss, Gemma 4, Qwen3.5: layer_types names each layer; sliding layers attend to
    sliding_window tokens. (gpt-oss's per-head attention sinks are one learned logit per head:
    no KV, no weights to count.)"""
    types = cfg.get("layer_types") or []
    # Gemma 4's full-attention layers: head width global_head_dim, and with attention_k_eq_v
    # num_global_key_value_heads KV heads, whose K vLLM loads into both the K and the V slot
    # (vllm/model_executor/models/gemma4.py, Gemma4DecoderLayer.__init__, Gemma4Attention).
    return replace(
        att, layer_types=types,
        gdn=_gated_delta_net(cfg, layers, where) if _is_gated_delta_net(cfg) else None,
        kda=_kimi_delta_attention(cfg, layers, where) if _is_kimi_delta_attention(cfg) else None,
        full_head_dim=int(cfg.get("global_head_dim") or 0) if types else 0,
        full_kv_heads=(int(cfg.get("num_global_key_value_heads") or 0)
                       if types and cfg.get("attention_k_eq_v") else 0))


def _mimo_heads(cfg: dict[str, Any], att: _Attention, layers: int, heads: int,
                where: str) -> _Attention:
    """MiMo-V2-Flash: its sliding layers' attention has KV heads of its own (swa_*), and the
    full layers' are the plain fields; both have V heads narrower than K."""
    return replace(att, layer_types=_mimo_layer_types(cfg, layers, heads, where),
                   full_kv_heads=att.kv_heads, full_head_dim=att.head_dim,
                   kv_heads=need(cfg, "swa_num_key_value_heads", where),
                   head_dim=need(cfg, "swa_head_dim", where),
                   v_head_dim=need(cfg, "v_head_dim", where))


def _attention_weights(cfg: dict[str, Any], att: _Attention, layers: int, hidden: int,
                       heads: int) -> float:
    """Every layer's attention weights (the linear layers' included), as the mean of one
    layer's times the layers."""
    if not att.mla:
        return float(_gqa_weights(cfg, att, layers, hidden, heads) * layers)
    attn: float = _mla_weights(cfg, att, hidden, heads)
    if att.kda:
        attn = (attn * (layers - att.linear_layers)
                + _kda_params(att.kda, hidden) * att.linear_layers) / layers
    return float(attn * layers)


def _mla_weights(cfg: dict[str, Any], att: _Attention, hidden: int, heads: int) -> float:
    """One MLA layer's weights: the (low-rank) query, the latent KV down-projection, its
    up-projection to K's nope part and V, and o_proj."""
    kv_lora, rope, nope, v_dim = (att.kv_lora_rank, att.qk_rope_head_dim, att.qk_nope_head_dim,
                                  att.v_head_dim)
    q_lora = cfg.get("q_lora_rank")
    q = (hidden * q_lora + q_lora * heads * (nope + rope)) if q_lora else hidden * heads * (nope + rope)
    attn = q + hidden * (kv_lora + rope) + kv_lora * heads * (nope + v_dim) + heads * v_dim * hidden
    if cfg.get("mla_use_output_gate"):  # Kimi-K3: a sigmoid gate per head before o_proj
        attn += hidden * heads * v_dim
    return attn


def _gqa_weights(cfg: dict[str, Any], att: _Attention, layers: int, hidden: int,
                 heads: int) -> float:
    """One GQA layer's weights, the mean over sliding, full-attention and gated-delta-net
    layers."""
    # Qwen3.5's and Qwen3-Next's attn_output_gate: q_proj also gives a gate per head
    # (vllm/model_executor/models/qwen3_next.py, Qwen3NextAttention).
    q_width = 2 if cfg.get("attn_output_gate") else 1

    def attn_per_layer(kv: int, dim: int) -> int:  # q, k, v and o projections
        v_dim = att.v_head_dim or dim
        return (q_width * hidden * heads * dim + heads * v_dim * hidden
                + hidden * kv * (dim + v_dim))

    full_layers = layers - att.window_layers - att.linear_layers
    return (attn_per_layer(att.kv_heads, att.head_dim) * att.window_layers
            + attn_per_layer(att.full_kv_heads or att.kv_heads, att.full_head_dim or att.head_dim)
            * full_layers + _gdn_params(att.gdn, hidden) * att.linear_layers) / layers


def _expert_params(experts: _Experts, hidden: int) -> int:
    """One routed expert's gate, up and down projections, at the latent width if it has one."""
    return 3 * (experts.latent or hidden) * experts.width


def _weight_parts(attention: float, experts: _Experts, dense_layers: int, dense_width: int,
                  layers: int, hidden: int) -> dict[str, float]:
    """The weights of each part the checkpoint may quantise apart, embeddings left out."""
    moe_layers = layers - experts.first_dense if experts.count else 0
    moe_width, latent = experts.width, experts.latent
    return {"attention": attention,
            "mlp": float(3 * hidden * dense_width * dense_layers),
            # The latent projections are dense, beside the shared experts.
            "shared": float((3 * hidden * moe_width * experts.shared + 2 * hidden * latent)
                            * moe_layers),
            "router": float(experts.count * hidden * moe_layers),
            "experts": float(_expert_params(experts, hidden) * experts.count * moe_layers)}


@dataclass(frozen=True)
class _Weights:
    parts: dict[str, float]  # _weight_parts
    embeddings: int  # the input embedding table and the LM head (0 where tied)
    total: float
    active: float  # what one token multiplies by: no input lookup, only its routed experts


def _weights(cfg: dict[str, Any], parts: dict[str, float], experts: _Experts, vocab: int,
             hidden: int) -> _Weights:
    embed = vocab * hidden
    lm_head = 0 if cfg.get("tie_word_embeddings") else vocab * hidden
    total = sum(parts.values()) + embed + lm_head
    active = total - embed - (parts["experts"] * (1 - experts.per_token / experts.count)
                              if experts.count else 0.0)
    return _Weights(parts, embed + lm_head, total, active)


@dataclass(frozen=True)
class _Formats:
    dense: str  # the format the rules key on: the largest quantisable dense part's
    experts: str
    dense_bytes: float  # bytes per dense parameter, the parts' formats weighted by their size


def _checkpoint_modules(cfg: dict[str, Any], att: _Attention, experts: _Experts,
                        dense_layers: int, layers: int) -> dict[str, list[str]]:
    """Each part's modules as the checkpoint names them, which its quantisation config lists."""
    kinds = att.layer_types or ["full_attention"] * layers
    return {
        "attention": [f"{i}.{MODULES['linear_attention' if t == 'linear_attention' else 'attention']}"
                      for i, t in enumerate(kinds)],
        "mlp": [f"{i}.{MODULES['mlp']}" for i in range(dense_layers)],
        "shared": ([f"{i}.{_shared_module(cfg)}" for i in range(experts.first_dense, layers)]
                   if experts.shared else []),
        "experts": [f"{i}.{_experts_module(cfg, experts.beside_mlp)}"
                    for i in range(experts.first_dense, layers)] if experts.count else []}


def _formats(quant: CheckpointQuant, modules: dict[str, list[str]], weights: _Weights,
             has_experts: bool) -> _Formats:
    formats = {part: part_format(part, quant, modules[part]) for part in modules}
    parts = weights.parts
    dense_bytes = dense_bytes_per_param(quant, parts, formats, weights.embeddings + parts["router"])
    main = max(("attention", "mlp", "shared"), key=lambda p: parts[p])
    return _Formats(formats[main], formats["experts"] if has_experts else "bf16", dense_bytes)


def _attention_note(att: _Attention) -> str:
    gdn, kda = att.gdn, att.kda
    return ((f"MLA kv_lora_rank {att.kv_lora_rank} + rope {att.qk_rope_head_dim}" if att.mla
             else f"{att.kv_heads} KV heads of dim {att.head_dim}"
             + (f" (V {att.v_head_dim})" if att.v_head_dim else ""))
            + (f", {att.window_layers} sliding-window layers of {att.window}"
               if att.window_layers else "")
            + (f", full-attention layers {att.full_kv_heads or att.kv_heads} KV heads of dim "
               f"{att.full_head_dim or att.head_dim}" if att.full_kv_heads or att.full_head_dim
               else "")
            + (f", {att.linear_layers} gated-delta-net layers ({gdn.num_key_heads} key and "
               f"{gdn.num_value_heads} value heads of {gdn.key_head_dim} / "
               f"{gdn.value_head_dim}, recurrent state {gdn.recurrent_bytes:g} B per element)"
               if gdn else "")
            + (f", {att.linear_layers} KDA layers ({kda.num_heads} heads of {kda.head_dim}, "
               f"recurrent state {kda.recurrent_bytes:g} B per element)" if kda else ""))


def _mlp_note(experts: _Experts, dense_width: int) -> str:
    if not experts.count:
        return f"; MLP {dense_width}"
    return (f"; {experts.count} routed experts + {experts.shared} shared, {experts.per_token} "
            f"per token, width {experts.width}"
            + (f" at latent width {experts.latent}" if experts.latent else "")
            + f", first {experts.first_dense} layers dense"
            + (f", a dense MLP {dense_width} beside them" if experts.beside_mlp else ""))


def _indexer_note(cfg: dict[str, Any]) -> str:
    if cfg.get("index_topk") or (cfg.get("sparse_attention_config") or {}).get(
            "use_sparse_attention"):
        return ("; its sparse indexer (index_topk, sparse_attention_config) is not modelled: "
                "attention reads every context token")
    return ""


def _model(cfg: dict[str, Any], quant: CheckpointQuant, where: str, name: str,
           hf_id: str) -> Model:
    layers = need(cfg, "num_hidden_layers", where)
    hidden = need(cfg, "hidden_size", where)
    vocab = need(cfg, "vocab_size", where)
    max_context = need(cfg, "max_position_embeddings", where)
    heads = need(cfg, "num_attention_heads", where)
    experts = _experts(cfg, where)
    dense_layers, dense_width = _dense_mlp(cfg, experts, layers, where)
    att = _attention(cfg, layers, hidden, heads, where)
    parts = _weight_parts(_attention_weights(cfg, att, layers, hidden, heads), experts,
                          dense_layers, dense_width, layers, hidden)
    weights = _weights(cfg, parts, experts, vocab, hidden)
    fmt = _formats(quant, _checkpoint_modules(cfg, att, experts, dense_layers, layers), weights,
                   bool(experts.count))
    arch = ",".join(cfg.get("architectures") or [cfg.get("model_type", "?")])
    source = (f"{where} ({arch}): {layers} layers, hidden {hidden}, {heads} heads, "
              + _attention_note(att) + _mlp_note(experts, dense_width) + _indexer_note(cfg)
              + f"; vocab {vocab}; weights {fmt.dense}/{fmt.experts}" + quant.kv_cache_note
              + f"; total {weights.total / 1e9:.1f}B and active {weights.active / 1e9:.1f}B "
              "derived from the architecture (autotune/domain/model_config.py)")
    latent = experts.latent
    return Model(name, round(weights.total / 1e9, 3), round(weights.active / 1e9, 3),
                 round(fmt.dense_bytes, 4), quant.bytes_of(fmt.experts), layers, hidden, vocab,
                 max_context, MLA if att.mla else GQA, heads, att.kv_heads, att.head_dim,
                 dense_width, source, kv_lora_rank=att.kv_lora_rank,
                 qk_rope_head_dim=att.qk_rope_head_dim, v_head_dim=att.v_head_dim,
                 sliding_window=att.window, sliding_window_layers=att.window_layers,
                 full_attention_kv_heads=att.full_kv_heads,
                 full_attention_head_dim=att.full_head_dim, mamba_layers=att.gdn or att.kda,
                 params_per_expert=_expert_params(experts, hidden) if latent else 0,
                 allreduces_per_moe_layer=2 if latent else 1, num_experts=experts.count,
                 experts_per_token=experts.per_token, moe_intermediate_size=experts.width,
                 num_shared_experts=experts.shared, first_dense_layers=experts.first_dense,
                 mtp=int(cfg.get("num_nextn_predict_layers") or 0) > 0,
                 dense_quant=fmt.dense, expert_quant=fmt.experts,
                 quant_block=quant.block if "fp8_block" in (fmt.dense, fmt.experts) else 0,
                 checkpoint_kv_cache_dtype=quant.kv_cache_dtype, hf_id=hf_id)

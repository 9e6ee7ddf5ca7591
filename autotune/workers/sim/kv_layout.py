"""KV-cache bytes per token on one GPU, from a model's attention layout.

Three layouts:
- standard (GQA/MHA): K and V per KV head per layer; the heads are split over tensor-parallel
  ranks (and replicated once there are more ranks than KV heads); sliding-window layers
  (gpt-oss, Gemma 4) hold a fixed window per sequence, and full-attention layers may have KV
  heads and a head width of their own (Gemma 4); the mamba layers of a hybrid model (Qwen3.5's
  gated delta net, Nemotron-H's Mamba2) hold a fixed state per sequence, read and written each
  decode step;
- MLA (DeepSeek-V3): one latent of kv_lora_rank + rope dims per layer, replicated on every rank
  (Kimi-K3's KDA layers hold a fixed state per sequence instead);
- DeepSeek-V4 hybrid: every layer keeps a raw sliding window of `sliding_window` entries (a
  fixed cost per sequence); CSA layers (ratio 4) add one compressed entry per 4 tokens plus an
  indexer key, HCA layers (ratio 128) one entry per 128 tokens. A decode step reads the window,
  the indexer keys and the top-k compressed entries of CSA layers, and every HCA entry.
An fp8 cache stores one byte per element instead of two.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.domain.catalogue import DSV4, GQA, MLA, Model
from autotune.errors import ConfigError

# fp8_ds_mla's per-entry scales are not counted; nvfp4 packs two elements a byte and one FP8
# scale per 16 (vllm/utils/torch_utils.py, nvfp4_kv_cache_full_dim).
KV_DTYPE_BYTES = {"auto": 2.0, "bfloat16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0,
                  "fp8_ds_mla": 1.0, "nvfp4": 0.5625}


@dataclass(frozen=True)
class KVLayout:
    bytes_per_token: float  # stored per context token, this GPU, all layers
    fixed_bytes_per_seq: float  # stored per sequence whatever its length (sliding windows)
    read_bytes_per_token: float  # read by one decode step per context token
    read_fixed_bytes_per_seq: float  # read by one decode step per sequence (windows, top-k)
    # FLOPs of attention per (query token, attended context token), this GPU, all layers.
    attn_flops_per_pair: float
    attended_cap_tokens: float  # a query attends to at most this many tokens (inf: all)


def kv_layout(model: Model, kv_cache_dtype: str, tensor_parallel_size: int,
              min_q_heads: int = 0) -> KVLayout:
    """min_q_heads: the query heads per rank a kernel pads to (DeepSeek-V4's FlashMLA decode
    kernel runs 64 or 128, so 8 heads per rank at TP8 cost as much as 64)."""
    try:
        elem = KV_DTYPE_BYTES[kv_cache_dtype]
    except KeyError:
        raise ConfigError(f"kv_cache_dtype {kv_cache_dtype!r} is not one of "
                          f"{', '.join(KV_DTYPE_BYTES)}") from None
    tp, layers = tensor_parallel_size, model.num_layers
    heads_gpu = max(1.0, model.num_heads / tp, float(min_q_heads))
    if model.attention == GQA:
        def per_layer(kv_heads: int, head_dim: int) -> float:  # K and V, this GPU's share
            return max(1.0, kv_heads / tp) * (head_dim + (model.v_head_dim or head_dim)) * elem

        # Sliding-window layers (gpt-oss, Gemma 4) keep and read only their window: a fixed
        # cost per sequence, as vLLM's SlidingWindowManager frees the blocks behind it
        # (vllm/v1/core/single_type_kv_cache_manager.py). Their attention FLOPs (at most
        # `window` pairs per query) are left out; the full layers' grow with the context.
        # Gemma 4's full layers have their own KV heads and head width
        # (vllm/model_executor/models/gemma4.py, Gemma4DecoderLayer.__init__).
        # Mamba layers (Qwen3.5's gated delta net, Nemotron-H's Mamba2) hold a fixed state per
        # sequence, which a decode step reads and writes back.
        mamba = model.mamba_layers
        linear = mamba.layers if mamba else 0
        state = mamba.state_bytes(tp) if mamba else 0.0
        full = model.full_attention_layers
        full_head_dim = model.full_attention_head_dim or model.head_dim
        window = (model.sliding_window * per_layer(model.num_kv_heads, model.head_dim)
                  * model.sliding_window_layers)
        per_token = per_layer(model.full_attention_kv_heads or model.num_kv_heads,
                              full_head_dim) * full
        # QK^T and PV, 2 FLOPs per MAC.
        flops = 2 * heads_gpu * (full_head_dim + (model.v_head_dim or full_head_dim)) * full
        # The state's page is padded to the block's attention page (effective_values raises the
        # block size until one holds it); counted unpadded, it takes as many blocks.
        return KVLayout(per_token, window + linear * state, per_token,
                        window + 2 * linear * state, flops, float("inf"))
    if model.attention == MLA:
        # Kimi-K3's KDA layers hold a fixed state per sequence instead, as the GQA hybrids'.
        mla_layers = model.full_attention_layers
        state = (model.mamba_layers.layers * model.mamba_layers.state_bytes(tp)
                 if model.mamba_layers else 0.0)
        per_token = (model.kv_lora_rank + model.qk_rope_head_dim) * elem * mla_layers
        flops = 2 * heads_gpu * (model.head_dim + model.v_head_dim) * mla_layers
        return KVLayout(per_token, state, per_token, 2 * state, flops, float("inf"))
    if model.attention == DSV4:
        entry = model.head_dim * elem
        index_key = model.index_head_dim * elem
        csa = sum(1 for r in model.compress_ratios if r == 4)
        hca = sum(1 for r in model.compress_ratios if r == 128)
        window = model.sliding_window * entry * layers
        per_token = csa * (entry + index_key) / 4 + hca * entry / 128
        read_per_token = csa * index_key / 4 + hca * entry / 128
        read_fixed = window + csa * model.index_topk * entry
        flops = 4 * heads_gpu * model.head_dim * layers
        # Attended per query: window + top-k on CSA layers, window + ctx/128 on HCA layers;
        # averaged over layers, capped as the flops of a long prompt would be.
        cap = model.sliding_window + (csa * model.index_topk) / layers
        return KVLayout(per_token, window, read_per_token, read_fixed, flops, cap)
    raise ConfigError(f"model {model.name}: unknown attention kind {model.attention!r}")

"""What a model and a GPU are, as the rules and the simulator see them: the GPU and Model
records, the attention kinds and the weight formats. The catalogue (catalogue.py) holds the
hand-checked entries; model_config.py reads the same records from a config.json."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPU:
    name: str
    device: str  # "gpu" or "cpu"
    memory_gib: float  # as the driver reports it (141 GB = 140.4 GiB on an H200)
    hbm_tb_s: float  # memory bandwidth, TB/s
    bf16_tflops: float  # dense
    fp8_tflops: float  # dense; equal to bf16 where there is no FP8 unit
    link_gb_s: float  # per-GPU interconnect bandwidth for all-reduce (NVLink or PCIe)
    # CUDA compute capability as vLLM's DeviceCapability.to_int() writes it: 90 for 9.0
    # (Hopper), 80 for Ampere's A100, 89 for Ada; 0 for the CPU build. Rules on attention
    # backends and quantisation kernels are keyed on it.
    compute_capability: int
    a100_class: bool = False


# Attention kinds the simulator's KV layout knows.
GQA, MLA, DSV4 = "gqa", "mla", "dsv4"

# Weight formats (dense_quant / expert_quant) and their bytes per parameter, scales included:
# "fp8" one scale per tensor or channel, "fp8_block" one per quant_block x quant_block tile
# (both ~1 byte); "fp4" DeepSeek-V4's 4-bit experts (0.5 B + block scales); "nvfp4" E2M1 with
# one FP8 scale per 16 weights (0.5 + 1/16); "mxfp4" E2M1 with one E8M0 scale per 32 weights
# (0.5 + 1/32, gpt-oss's experts); "int4_wo" 4-bit integer weights with bf16 activations
# (0.5 B + a bf16 scale per group, 32 in Kimi-K2.5: 0.5 + 2/32).
QUANT_FORMATS: dict[str, float] = {"bf16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "fp4": 0.53,
                                   "nvfp4": 0.5625, "mxfp4": 0.53125, "int4_wo": 0.5625}


@dataclass(frozen=True)
class GatedDeltaNet:
    """The linear-attention layers of a hybrid model (Qwen3.5's and Qwen3-Next's gated delta
    net): each keeps a fixed state per sequence, a causal-convolution window and a recurrent
    state, instead of a KV cache (vllm/model_executor/layers/mamba/mamba_utils.py,
    MambaStateShapeCalculator.gated_delta_net_state_shape)."""

    layers: int
    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    # Bytes per element: the convolution window in the model's dtype (mamba_cache_dtype
    # "auto"), the recurrent state in mamba_ssm_dtype (float32 in Qwen3.5's configs).
    conv_bytes: float = 2.0
    recurrent_bytes: float = 2.0

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    def state_bytes(self, tensor_parallel_size: int) -> float:
        """One layer's state of one sequence on one of `tensor_parallel_size` ranks."""
        conv_dim = 2 * self.key_dim + self.value_dim  # q, k and v go through the convolution
        conv = conv_dim / tensor_parallel_size * (self.conv_kernel - 1) * self.conv_bytes
        recurrent = (self.num_value_heads / tensor_parallel_size * self.value_head_dim
                     * self.key_head_dim * self.recurrent_bytes)
        return conv + recurrent


@dataclass(frozen=True)
class KimiDeltaAttention:
    """The KDA layers of Kimi-K3 (Kimi Linear): a short convolution over q, k and v and a
    recurrent state per head per sequence (vllm/models/kimi_k3/nvidia/kda.py,
    KimiK3DeltaAttention; state shapes from mamba_utils.py,
    MambaStateShapeCalculator.kda_state_shape, the recurrent state float32)."""

    layers: int
    num_heads: int
    head_dim: int  # q, k and v alike
    conv_kernel: int
    conv_bytes: float = 2.0
    recurrent_bytes: float = 4.0

    @property
    def inner_size(self) -> int:
        return self.num_heads * self.head_dim

    def state_bytes(self, tensor_parallel_size: int) -> float:
        """One layer's state of one sequence on one of `tensor_parallel_size` ranks."""
        tp = tensor_parallel_size
        conv = 3 * self.inner_size / tp * (self.conv_kernel - 1) * self.conv_bytes
        return conv + self.num_heads / tp * self.head_dim * self.head_dim * self.recurrent_bytes


@dataclass(frozen=True)
class Mamba2:
    """The Mamba2 mixer layers of a hybrid model (Nemotron-H, Nemotron-3): each keeps a causal-
    convolution window over x, B and C and an SSM state per head per sequence
    (vllm/model_executor/layers/mamba/mamba_mixer2.py, MambaMixer2; state shapes from
    mamba_utils.py, MambaStateShapeCalculator.mamba2_state_shape)."""

    layers: int
    num_heads: int
    head_dim: int
    n_groups: int
    state_size: int  # ssm_state_size: N
    conv_kernel: int
    conv_bytes: float = 2.0
    # mamba_ssm_cache_dtype: float32 in the Nemotron configs, which vLLM follows
    # (vllm/model_executor/models/config.py, NemotronHForCausalLMConfig).
    recurrent_bytes: float = 4.0

    @property
    def inner_size(self) -> int:
        return self.num_heads * self.head_dim

    def groups(self, tensor_parallel_size: int) -> int:
        """B and C groups as vLLM shards them: a single group is replicated once per rank
        (mamba_utils.py, extra_groups_for_head_shards); otherwise the groups split evenly."""
        tp = tensor_parallel_size
        return self.n_groups if self.n_groups % tp == 0 else self.n_groups + tp - self.n_groups

    def state_bytes(self, tensor_parallel_size: int) -> float:
        """One layer's state of one sequence on one of `tensor_parallel_size` ranks."""
        tp = tensor_parallel_size
        conv_dim = self.inner_size + 2 * self.groups(tp) * self.state_size
        conv = conv_dim / tp * (self.conv_kernel - 1) * self.conv_bytes
        ssm = self.num_heads / tp * self.head_dim * self.state_size * self.recurrent_bytes
        return conv + ssm


@dataclass(frozen=True)
class Model:
    name: str
    total_params_b: float  # billions, model card
    active_params_b: float  # billions per token, model card
    # Bytes per parameter as served: dense (attention, shared experts, embeddings) and routed
    # experts separately, since DeepSeek-V4 ships its experts in FP4 and the rest in FP8.
    dense_bytes_per_param: float
    expert_bytes_per_param: float
    num_layers: int
    hidden_size: int
    vocab_size: int
    max_context: int
    attention: str  # GQA, MLA or DSV4
    num_heads: int
    num_kv_heads: int  # GQA; 1 for the latent (replicated) caches of MLA and DSV4
    head_dim: int  # GQA and DSV4 (the shared K=V entry width); MLA: qk_nope + rope
    intermediate_size: int  # dense MLP width (dense layers only)
    source: str
    kv_lora_rank: int = 0  # MLA latent width
    qk_rope_head_dim: int = 0  # MLA / DSV4 rotary part of each entry
    # MLA: the value head width. GQA: the V head width where it is not the K head width
    # (MiMo-V2-Flash: K 192, V 128, every layer); 0 = each layer's head width.
    v_head_dim: int = 0
    # DSV4 hybrid attention: per-layer compression ratio (0 = sliding window only), the raw
    # window every layer keeps, and the CSA indexer's key width and top-k.
    compress_ratios: tuple[int, ...] = ()
    sliding_window: int = 0
    # GQA models with sliding-window layers (gpt-oss: every other layer attends to the last
    # `sliding_window` tokens only): how many of the layers do. 0 = all layers attend fully.
    sliding_window_layers: int = 0
    # GQA models whose full-attention layers have KV heads and a head width of their own
    # (Gemma 4: global_head_dim 512, and num_global_key_value_heads where attention_k_eq_v);
    # 0 = the same as every layer's (num_kv_heads, head_dim).
    full_attention_kv_heads: int = 0
    full_attention_head_dim: int = 0
    # Hybrid models: the layers that keep a fixed state per sequence instead of a KV cache,
    # vLLM's "mamba" layers (MambaBase, MambaSpec: the gated delta net, Kimi's KDA, Mamba2);
    # None: none.
    mamba_layers: GatedDeltaNet | KimiDeltaAttention | Mamba2 | None = None
    # Models built from a layer pattern (Nemotron-H's hybrid_override_pattern): one mixer per
    # layer, "M" Mamba2, "*" attention, "-" MLP, "E" MoE (vllm/model_executor/models/
    # nemotron_h.py, ALL_DECODER_LAYER_TYPES); num_layers is its length. Empty: every layer is
    # attention (or a mamba layer) followed by an MLP or MoE.
    layer_pattern: str = ""
    index_head_dim: int = 0
    index_topk: int = 0
    # Mixture of experts: routed experts per MoE layer (0 = dense model), how many a token
    # uses, the width of one expert, shared experts, and how many leading layers are dense.
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    # Parameters of one routed expert; 0: gate, up and down projections at the hidden width
    # (3 x hidden_size x moe_intermediate_size). Nemotron-3's experts have two projections, at
    # the latent width moe_latent_size where there is one.
    params_per_expert: int = 0
    num_shared_experts: int = 0
    first_dense_layers: int = 0
    # Kimi-K3's latent MoE all-reduces its latent output and its shared experts' output apart
    # (vllm/models/kimi_k3/nvidia/model.py, LatentMoERunner): 2; one sum elsewhere.
    allreduces_per_moe_layer: int = 1
    # Multi-token-prediction layers shipped with the checkpoint, which vLLM drafts with
    # (speculative_config method `mtp`; no separate draft model).
    mtp: bool = False
    # Weight formats as served, which the rules on kernels and shard sizes key on: one of
    # QUANT_FORMATS. Dense means attention, shared experts, dense MLPs and embeddings.
    dense_quant: str = "bf16"
    expert_quant: str = "bf16"
    quant_block: int = 0  # the block of a block-wise quantisation (128); 0 = none
    # The KV cache dtype the checkpoint's ModelOpt quantisation config declares (its
    # kv_cache_quant_algo or kv_cache_scheme), which vLLM serves when --kv-cache-dtype is
    # "auto": "fp8_e4m3"; empty where it declares none.
    checkpoint_kv_cache_dtype: str = ""
    # The checkpoint's Hugging Face id, as vLLM's recipe (vllm-project/recipes,
    # models/<org>/<model>.yaml) serves it: what a published config names as `model` when the
    # deployment's campaigns loaded no other path. Empty for a model with none (tiny-llama).
    hf_id: str = ""

    @property
    def moe_layers(self) -> int:
        if self.layer_pattern:
            return self.layer_pattern.count("E")
        return self.num_layers - self.first_dense_layers if self.num_experts else 0

    @property
    def full_attention_layers(self) -> int:
        """Layers that attend to the whole context, keeping KV for every token."""
        if self.layer_pattern:
            return self.layer_pattern.count("*") - self.sliding_window_layers
        mamba = self.mamba_layers.layers if self.mamba_layers else 0
        return self.num_layers - self.sliding_window_layers - mamba

    @property
    def sublayers(self) -> int:
        """Mixers and MLPs (or MoEs) one forward pass runs: two per layer, or one per layer of
        a layer pattern."""
        return len(self.layer_pattern) if self.layer_pattern else 2 * self.num_layers

    @property
    def tp_allreduces(self) -> int:
        """All-reduces of one forward pass under tensor parallelism: one after each sublayer,
        and one more per MoE layer that reduces its latent and shared outputs apart."""
        return self.sublayers + (self.allreduces_per_moe_layer - 1) * self.moe_layers

    @property
    def routed_expert_params(self) -> float:
        """Parameters of all routed experts together."""
        each = self.params_per_expert or 3 * self.hidden_size * self.moe_intermediate_size
        return float(self.moe_layers * self.num_experts * each)

    @property
    def weight_bytes(self) -> float:
        """Bytes of the served weights, all GPUs together."""
        experts = min(self.routed_expert_params, self.total_params_b * 1e9)
        dense = self.total_params_b * 1e9 - experts
        return dense * self.dense_bytes_per_param + experts * self.expert_bytes_per_param

"""Models from Hugging Face config.json files: the reader, the lookup and their errors."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from autotune.domain import catalogue
from autotune.domain.deployment import DeploymentSpec
from autotune.domain.model_config import read_model_config
from autotune.domain.model_sources import VENDORED
from autotune.errors import ConfigError
from autotune.search.baselines import vllm_defaults
from autotune.search.spaces.violations import common_rule_violations
from autotune.workers.sim.kernels_build import SYSTEMS, system_gpu
from autotune.workers.sim.kv_layout import kv_layout

# The model cards' total and active parameters (billions) of the judge rows' models.
CARDS = {
    "meta-llama/Llama-3.1-70B": (70.6, 70.6),
    "Qwen/Qwen3-32B": (32.8, 32.8),
    "Qwen/Qwen3-235B-A22B-FP8": (235.0, 22.0),
    "openai/gpt-oss-120b": (116.8, 5.13),
    "moonshotai/Kimi-K2.5": (1000.0, 32.0),  # Kimi-K2's card: 1T total, 32B active
    "MiniMaxAI/MiniMax-M2.5": (230.0, 10.0),
    "nvidia/Llama-3.1-8B-Instruct-FP8": (8.03, 8.03),
}


@pytest.mark.parametrize("hf_id", sorted(CARDS))
def test_each_judge_model_resolves_by_hf_id_with_the_cards_parameter_counts(hf_id: str) -> None:
    m = catalogue.model(hf_id)
    total, active = CARDS[hf_id]
    assert m.hf_id == hf_id and m.name == hf_id.split("/")[1]
    assert m.total_params_b == pytest.approx(total, rel=0.03)
    # Dense cards count the input embedding as active; the derivation leaves the lookup out.
    assert m.active_params_b == pytest.approx(active, rel=0.07)


def test_the_readers_fields_follow_each_architecture() -> None:
    kimi = catalogue.model("moonshotai/Kimi-K2.5")  # nested text_config, DeepSeek-V3 layout
    assert (kimi.attention, kimi.kv_lora_rank, kimi.qk_rope_head_dim, kimi.head_dim) == (
        catalogue.MLA, 512, 64, 192)
    assert (kimi.num_experts, kimi.experts_per_token, kimi.first_dense_layers,
            kimi.num_shared_experts) == (384, 8, 1, 1)
    # compressed-tensors int4, group 32: experts only (attention and shared experts ignored).
    assert (kimi.dense_quant, kimi.expert_quant) == ("bf16", "int4_wo")
    assert kimi.expert_bytes_per_param == 0.5 + 2 / 32
    oss = catalogue.model("openai/gpt-oss-120b")
    assert (oss.sliding_window, oss.sliding_window_layers, oss.head_dim) == (128, 18, 64)
    assert (oss.dense_quant, oss.expert_quant, oss.num_experts) == ("bf16", "mxfp4", 128)
    qwen = catalogue.model("Qwen/Qwen3-235B-A22B-FP8")
    assert (qwen.dense_quant, qwen.expert_quant, qwen.quant_block) == ("fp8_block", "fp8_block", 128)
    assert qwen.intermediate_size == 0 and qwen.moe_intermediate_size == 1536  # no dense MLP
    minimax = catalogue.model("MiniMaxAI/MiniMax-M2.5")
    assert (minimax.num_heads, minimax.num_kv_heads, minimax.moe_intermediate_size) == (48, 8, 1536)
    fp8 = catalogue.model("nvidia/Llama-3.1-8B-Instruct-FP8")  # ModelOpt hf_quant_config.json
    assert fp8.dense_quant == "fp8" and 1.0 < fp8.dense_bytes_per_param < 1.2  # bf16 embeddings
    assert catalogue.model("Qwen/Qwen3-32B").intermediate_size == 25600


def test_hand_checked_entries_win_over_configs() -> None:
    assert catalogue.model("deepseek-ai/DeepSeek-V3") is catalogue.MODELS["DeepSeek-V3"]
    assert catalogue.model("Qwen/Qwen3-8B") is catalogue.MODELS["Qwen3-8B"]


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                    reason="the aiconfigurator extra is not installed")
def test_the_aiconfigurator_extras_configs_count_as_known_models() -> None:
    r1 = catalogue.model("deepseek-ai/DeepSeek-R1")
    assert r1.total_params_b == pytest.approx(671, rel=0.03)
    assert r1.active_params_b == pytest.approx(37, rel=0.05)


def test_a_local_directory_and_a_config_path_resolve(tmp_path: Path) -> None:
    shutil.copy(VENDORED / "Qwen--Qwen3-32B_config.json", tmp_path / "config.json")
    by_dir = catalogue.model(str(tmp_path))
    by_file = catalogue.model(str(tmp_path / "config.json"))
    assert by_dir == by_file and by_dir.name == tmp_path.name
    assert by_dir.total_params_b == catalogue.model("Qwen/Qwen3-32B").total_params_b


def test_a_config_missing_a_field_is_one_line_naming_it_and_the_file(tmp_path: Path) -> None:
    cfg = json.loads((VENDORED / "Qwen--Qwen3-32B_config.json").read_text())
    del cfg["hidden_size"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as err:
        read_model_config(path)
    message = str(err.value)
    assert "'hidden_size'" in message and str(path) in message and "\n" not in message


@pytest.mark.parametrize("name, fragment", [
    ("acme/no-such-model", "unknown model 'acme/no-such-model'"),
    ("./nowhere/config.json", "no such file or directory"),
])
def test_unknown_models_raise_config_error(name: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        catalogue.model(name)


def test_the_new_gpus_and_their_aiconfigurator_systems() -> None:
    b200 = catalogue.gpu("B200")
    assert (b200.compute_capability, b200.fp8_tflops, b200.link_gb_s) == (100, 4500, 900)
    assert catalogue.gpu("B300").compute_capability == 103
    assert {system_gpu(s) for s in ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm")} == {
        "H100-80GB", "H200-141GB", "B200-180GB", "B300-288GB"}
    assert all(g in catalogue.GPUS for g in SYSTEMS)


def test_gpt_oss_sliding_layers_hold_a_window_not_the_context() -> None:
    oss = catalogue.model("openai/gpt-oss-120b")
    layout = kv_layout(oss, "auto", 2)
    per_layer = 2 * (8 / 2) * 64 * 2  # K and V, 4 KV heads per rank, dim 64, bf16
    assert layout.bytes_per_token == per_layer * 18  # the 18 full-attention layers
    assert layout.fixed_bytes_per_seq == per_layer * 128 * 18  # each sliding layer's window


def _nvfp4_model(tmp_path: Path) -> str:
    shutil.copy(VENDORED / "meta-llama--Llama-3.1-70B_config.json", tmp_path / "config.json")
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {
        "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}}))
    return str(tmp_path)


@pytest.mark.parametrize("gpu, broken", [("B200", set()), ("H100", {"nvfp4_without_fp4_tensor_cores"}),
                                         ("A100", {"nvfp4_without_fp4_tensor_cores"})])
def test_nvfp4_weights_are_slow_below_blackwell(tmp_path: Path, gpu: str, broken: set[str]) -> None:
    model = _nvfp4_model(tmp_path)
    assert catalogue.model(model).dense_quant == "nvfp4"
    dep = DeploymentSpec.build(name="d", model=model, gpu=gpu, gpu_count=2,
                               tensor_parallel_size=2, max_model_len=8192)
    found = {v.rule for v in common_rule_violations(vllm_defaults(dep), dep)
             if "nvfp4" in v.rule}
    assert found == broken


@pytest.mark.parametrize("hf_id, broken", [("moonshotai/Kimi-K2.5", {"int4_weight_only_capability"}),
                                           ("openai/gpt-oss-120b", {"fp4_experts_capability"})])
def test_four_bit_experts_need_ampere(hf_id: str, broken: set[str]) -> None:
    volta = catalogue.GPU("V100", "gpu", 32.0, 0.9, 125, 125, 150, 70)
    catalogue.GPUS["V100"] = volta
    try:
        dep = DeploymentSpec.build(name="d", model=hf_id, gpu="V100", gpu_count=8,
                                   tensor_parallel_size=8, max_model_len=8192)
        found = {v.rule for v in common_rule_violations(vllm_defaults(dep), dep)
                 if v.rule.endswith("capability")}
    finally:
        del catalogue.GPUS["V100"]
    assert found == broken


def test_a_mamba_pattern_without_its_mamba_fields_is_refused_not_misread(tmp_path: Path) -> None:
    cfg = json.loads((VENDORED / "Qwen--Qwen3-32B_config.json").read_text())
    cfg.update(mamba_num_heads=64, hybrid_override_pattern="M-M-M*")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="field 'mamba_head_dim' is missing"):
        read_model_config(path)
    cfg = json.loads((VENDORED / "Qwen--Qwen3-32B_config.json").read_text())
    cfg.update(mamba_num_heads=64)  # Mamba fields without a layer pattern: not read as attention
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="mamba_num_heads: layers other than attention"):
        read_model_config(path)


def _mimo_v2_flash_config(**changes: object) -> dict[str, object]:
    """A MiMo-V2-Flash config.json in the published shape (XiaomiMiMo/MiMo-V2-Flash's fields,
    layers cut to 6: full, 4 sliding, full; the first dense)."""
    return {"architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash",
            "num_hidden_layers": 6, "hidden_size": 4096, "num_attention_heads": 64,
            "num_key_value_heads": 4, "head_dim": 192, "v_head_dim": 128,
            "swa_num_attention_heads": 64, "swa_num_key_value_heads": 8, "swa_head_dim": 192,
            "swa_v_head_dim": 128, "sliding_window": 128, "sliding_window_size": 128,
            "hybrid_layer_pattern": [0, 1, 1, 1, 1, 0], "moe_layer_freq": [0, 1, 1, 1, 1, 1],
            "intermediate_size": 16384, "moe_intermediate_size": 2048, "n_routed_experts": 256,
            "n_shared_experts": None, "num_experts_per_tok": 8, "vocab_size": 152576,
            "max_position_embeddings": 262144, "add_swa_attention_sink_bias": True,
            "tie_word_embeddings": False, **changes}


def test_mimo_v2_flash_sliding_layers_are_read_with_their_own_heads(tmp_path: Path) -> None:
    m = read_model_config(_write(tmp_path, _mimo_v2_flash_config()))
    assert (m.sliding_window_layers, m.sliding_window, m.full_attention_layers) == (4, 128, 2)
    assert (m.num_kv_heads, m.head_dim, m.full_attention_kv_heads, m.v_head_dim) == (8, 192, 4, 128)
    hidden = 4096

    def attention(kv: int) -> int:  # vllm/model_executor/models/mimo_v2.py, MiMoV2Attention
        return hidden * 64 * 192 + hidden * kv * (192 + 128) + 64 * 128 * hidden

    total = (4 * attention(8) + 2 * attention(4) + 3 * hidden * 16384
             + 5 * (256 * 3 * hidden * 2048 + 256 * hidden) + 2 * 152576 * hidden)
    assert m.total_params_b == pytest.approx(total / 1e9, abs=1e-3)
    layout = kv_layout(m, "auto", 1)
    assert layout.bytes_per_token == 2 * 4 * (192 + 128) * 2  # full layers: K 192 and V 128
    assert layout.fixed_bytes_per_seq == 4 * 128 * 8 * (192 + 128) * 2  # sliding windows


@pytest.mark.parametrize("changes, fragment", [
    ({"swa_v_head_dim": 192}, "swa_v_head_dim 192 differs"),
    ({"hybrid_layer_pattern": [0, 1, 1]}, "hybrid_layer_pattern has 3 entries for 6 layers"),
    ({"hybrid_layer_pattern": [0, 2, 1, 1, 1, 0]}, "hybrid_layer_pattern: layers other than"),
])
def test_a_bad_mimo_config_is_one_line(tmp_path: Path, changes: dict[str, object],
                                       fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        read_model_config(_write(tmp_path, _mimo_v2_flash_config(**changes)))


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                    reason="the aiconfigurator extra is not installed")
@pytest.mark.parametrize("hf_id, total_b, active_b", [
    ("XiaomiMiMo/MiMo-V2-Flash", 309, 15),
    # Every layer DeepSeek-V3.2's sparse attention (layer_types): read as GLM-5's MLA is.
    ("nvidia/GLM-5.2-NVFP4", 744, 40), ("nvidia/GLM-5.3-NVFP4", 744, 40)])
def test_the_bundled_mimo_and_glm52_configs_derive_the_sizes_their_cards_give(
        hf_id: str, total_b: float, active_b: float) -> None:
    m = catalogue.model(hf_id)
    assert m.total_params_b == pytest.approx(total_b, rel=0.01)
    assert m.active_params_b == pytest.approx(active_b, rel=0.03)


def _nemotron_h_config(**changes: object) -> dict[str, object]:
    """A Nemotron-H config.json in the published shape (nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B's
    fields, its pattern cut to 7 layers and given one MLP layer as Nemotron-H-56B has)."""
    return {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
            "hybrid_override_pattern": "MEM*EM-", "num_hidden_layers": 7, "hidden_size": 2688,
            "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
            "mamba_num_heads": 64, "mamba_head_dim": 64, "n_groups": 8, "ssm_state_size": 128,
            "conv_kernel": 4, "chunk_size": 128, "mamba_ssm_cache_dtype": "float32",
            "intermediate_size": 1856, "mlp_hidden_act": "relu2", "n_routed_experts": 128,
            "num_experts_per_tok": 6, "moe_intermediate_size": 1856, "n_shared_experts": 1,
            "moe_shared_expert_intermediate_size": 3712, "vocab_size": 131072,
            "max_position_embeddings": 262144, "tie_word_embeddings": False, **changes}


def test_a_nemotron_h_layer_pattern_is_built_as_vllm_builds_it(tmp_path: Path) -> None:
    m = read_model_config(_write(tmp_path, _nemotron_h_config()))
    mamba = m.mamba_layers
    assert isinstance(mamba, catalogue.Mamba2) and mamba.layers == 3
    assert (m.num_layers, m.full_attention_layers, m.moe_layers, m.sublayers) == (7, 1, 2, 7)
    hidden, inner, bc = 2688, 64 * 64, 2 * 8 * 128
    # vllm/model_executor/layers/mamba/mamba_mixer2.py, MambaMixer2: in_proj to z, x, B, C and
    # one dt per head; conv1d over x, B and C; out_proj.
    mamba_layer = hidden * (2 * inner + bc + 64) + (inner + bc) * 4 + inner * hidden
    attention_layer = hidden * (32 + 2 * 2) * 128 + 32 * 128 * hidden  # no output gate
    mlp_layer = 2 * hidden * 1856  # NemotronHMLP: up and down (relu2)
    expert = 2 * hidden * 1856
    moe_layer = 128 * expert + 2 * hidden * 3712 + 128 * hidden  # experts, shared, router
    embed = 131072 * hidden
    total = 3 * mamba_layer + attention_layer + mlp_layer + 2 * moe_layer + 2 * embed
    assert m.total_params_b == pytest.approx(total / 1e9, abs=1e-3)
    assert m.active_params_b == pytest.approx((total - embed - 2 * 122 * expert) / 1e9, abs=1e-3)
    assert m.params_per_expert == expert and m.routed_expert_params == 2 * 128 * expert
    # MambaStateShapeCalculator.mamba2_state_shape: a (4096 + 2 x 8 x 128) x 3 window in bf16,
    # a 64 x 64 x 128 SSM state in float32 (mamba_ssm_cache_dtype); both split over TP ranks.
    assert mamba.state_bytes(1) == 6144 * 3 * 2 + 64 * 64 * 128 * 4 == 2_134_016
    assert mamba.state_bytes(4) == 2_134_016 / 4
    # A single group is replicated once per rank (extra_groups_for_head_shards).
    assert read_model_config(_write(tmp_path, _nemotron_h_config(n_groups=1))).mamba_layers \
        .groups(4) == 4
    # The latent MoE (Nemotron-3 Super, Ultra): experts at moe_latent_size, projections around them.
    latent = read_model_config(_write(tmp_path, _nemotron_h_config(moe_latent_size=1024)))
    assert latent.params_per_expert == 2 * 1024 * 1856
    assert latent.total_params_b == pytest.approx(
        (total - 2 * 128 * expert + 2 * (128 * 2 * 1024 * 1856 + 2 * hidden * 1024)) / 1e9, abs=1e-3)


def test_a_layers_block_type_list_reads_as_its_pattern(tmp_path: Path) -> None:
    names = ["mamba", "moe", "linear_attention", "attention", "moe", "mamba", "mlp"]
    cfg = _nemotron_h_config(layers_block_type=names)
    del cfg["hybrid_override_pattern"], cfg["num_hidden_layers"]
    assert read_model_config(_write(tmp_path, cfg)).layer_pattern == "MEM*EM-"


@pytest.mark.parametrize("changes, fragment", [
    ({"hybrid_override_pattern": "MEX*"}, "hybrid_override_pattern 'MEX\\*' is not a string"),
    ({"hybrid_override_pattern": None, "layers_block_type": ["mamba", "sliding"]},
     "layers_block_type 'sliding' is not a layer kind"),
    ({"intermediate_size": [1856, 2048]}, "one width for every MLP layer"),
    ({"n_groups": None}, "field 'n_groups' is missing"),
    ({"mamba_ssm_cache_dtype": "float8"}, "mamba_ssm_cache_dtype 'float8'"),
])
def test_a_bad_nemotron_h_config_is_one_line(tmp_path: Path, changes: dict[str, object],
                                             fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        read_model_config(_write(tmp_path, _nemotron_h_config(**changes)))


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                    reason="the aiconfigurator extra is not installed")
@pytest.mark.parametrize("hf_id, total_b, active_b, formats", [
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 31.6, 3.2, ("bf16", "bf16")),
    # Attention and the Mamba layers before it kept in bf16; most Mamba layers are FP4.
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4", 31.6, 3.2, ("nvfp4", "nvfp4")),
    # MIXED_PRECISION: Mamba projections FP8, experts W4A16 NVFP4.
    ("nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4", 31.6, 3.2, ("fp8", "nvfp4")),
    ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8", 120.7, 12.2, ("fp8", "fp8")),
    ("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16", 549.3, 55.0, ("bf16", "bf16")),
    ("nvidia/Nemotron-H-56B-Base-8K", 56.3, 55.2, ("bf16", "bf16")),
])
def test_the_bundled_nemotron_configs_derive_the_sizes_their_names_give(
        hf_id: str, total_b: float, active_b: float, formats: tuple[str, str]) -> None:
    m = catalogue.model(hf_id)
    assert m.total_params_b == pytest.approx(total_b, abs=0.05)
    assert m.active_params_b == pytest.approx(active_b, abs=0.05)
    assert (m.dense_quant, m.expert_quant if m.num_experts else "bf16") == formats


def _gemma4_text_config(**changes: object) -> dict[str, object]:
    """A Gemma 4 config.json in the published shape (google/gemma-4-26B-A4B's text_config,
    layers cut to 6): 5 sliding layers of 8 KV heads x 256, then 1 full-attention layer of
    2 KV heads x 512 (attention_k_eq_v), 128 experts of width 704 (top 8) beside a dense MLP."""
    text = {"model_type": "gemma4_text", "num_hidden_layers": 6, "hidden_size": 2816,
            "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
            "global_head_dim": 512, "num_global_key_value_heads": 2, "attention_k_eq_v": True,
            "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
            "sliding_window": 1024, "intermediate_size": 2112, "enable_moe_block": True,
            "num_experts": 128, "top_k_experts": 8, "moe_intermediate_size": 704,
            "num_kv_shared_layers": 0, "hidden_size_per_layer_input": 0,
            "vocab_size": 262144, "max_position_embeddings": 262144,
            "tie_word_embeddings": True, **changes}
    return {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
            "text_config": text}


def _write(tmp_path: Path, cfg: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_gemma4_full_attention_layers_have_their_own_kv_heads_and_width(tmp_path: Path) -> None:
    # vllm/model_executor/models/gemma4.py, Gemma4DecoderLayer.__init__: a full-attention
    # layer's head_dim is global_head_dim, and with attention_k_eq_v its KV heads are
    # num_global_key_value_heads; K is loaded into both the K and the V slot, so both are cached.
    m = read_model_config(_write(tmp_path, _gemma4_text_config()))
    assert (m.num_kv_heads, m.head_dim) == (8, 256)
    assert (m.full_attention_kv_heads, m.full_attention_head_dim) == (2, 512)
    assert (m.sliding_window, m.sliding_window_layers) == (1024, 5)
    for tp in (1, 2, 4):
        layout = kv_layout(m, "auto", tp)
        full = 2 * max(1, 2 / tp) * 512 * 2  # K and V of the full layer, bf16
        sliding = 2 * max(1, 8 / tp) * 256 * 2
        assert layout.bytes_per_token == full
        assert layout.fixed_bytes_per_seq == sliding * 1024 * 5
        assert layout.attn_flops_per_pair == 4 * (16 / tp) * 512
    # Without attention_k_eq_v the full layers keep num_key_value_heads (and global_head_dim).
    plain = read_model_config(_write(tmp_path, _gemma4_text_config(attention_k_eq_v=False)))
    assert (plain.full_attention_kv_heads, plain.full_attention_head_dim) == (0, 512)
    assert kv_layout(plain, "auto", 1).bytes_per_token == 2 * 8 * 512 * 2


def test_gemma4_moe_reads_top_k_experts_and_the_dense_mlp_beside_them(tmp_path: Path) -> None:
    m = read_model_config(_write(tmp_path, _gemma4_text_config()))
    assert (m.num_experts, m.experts_per_token, m.moe_intermediate_size) == (128, 8, 704)
    assert m.intermediate_size == 2112 and m.first_dense_layers == 0 and m.moe_layers == 6
    hidden, layers = 2816, 6
    attention = (5 * (2 * hidden * 16 * 256 + 2 * hidden * 8 * 256)
                 + (2 * hidden * 16 * 512 + 2 * hidden * 2 * 512))
    dense_mlp = 3 * hidden * 2112 * layers  # every layer, beside the experts
    experts = 3 * hidden * 704 * 128 * layers
    router = 128 * hidden * layers
    embed = 262144 * hidden  # tied: no separate LM head
    total = attention + dense_mlp + experts + router + embed
    assert m.total_params_b == pytest.approx(total / 1e9, abs=1e-3)
    assert m.active_params_b == pytest.approx(
        (total - embed - experts * (1 - 8 / 128)) / 1e9, abs=1e-3)
    # A dense Gemma 4 (31B's shape: no experts) keeps its MLP on every layer.
    dense = read_model_config(_write(tmp_path, _gemma4_text_config(
        num_experts=None, top_k_experts=None, enable_moe_block=False, intermediate_size=21504)))
    assert dense.num_experts == 0 and dense.intermediate_size == 21504


@pytest.mark.parametrize("field", ["num_kv_shared_layers", "hidden_size_per_layer_input"])
def test_gemmas_shared_kv_layers_and_per_layer_inputs_are_refused_not_misread(
        tmp_path: Path, field: str) -> None:
    path = _write(tmp_path, _gemma4_text_config(**{field: 20}))
    with pytest.raises(ConfigError, match=f"{field}: KV-shared layers") as err:
        read_model_config(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                    reason="the aiconfigurator extra is not installed")
@pytest.mark.parametrize("hf_id, full_kv_heads, experts", [("google/gemma-4-26B-A4B", 2, 128),
                                                           ("nvidia/Gemma-4-31B-IT-NVFP4", 4, 0)])
def test_the_bundled_gemma4_configs_are_read(hf_id: str, full_kv_heads: int, experts: int) -> None:
    m = catalogue.model(hf_id)  # the package's copies of the published config.json files
    assert (m.full_attention_kv_heads, m.full_attention_head_dim) == (full_kv_heads, 512)
    assert m.num_experts == experts and m.sliding_window == 1024


def _qwen35_text_config(**changes: object) -> dict[str, object]:
    """A Qwen3.5 config.json in the published shape (Qwen/Qwen3.5-27B's text_config, layers cut
    to 8): three gated-delta-net layers to one full-attention layer."""
    text = {"model_type": "qwen3_5_text", "num_hidden_layers": 8, "hidden_size": 5120,
            "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
            "attn_output_gate": True, "intermediate_size": 17408,
            "layer_types": ["linear_attention"] * 3 + ["full_attention"]
            + ["linear_attention"] * 3 + ["full_attention"],
            "full_attention_interval": 4, "linear_num_key_heads": 16,
            "linear_num_value_heads": 48, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
            "mamba_ssm_dtype": "float32", "vocab_size": 248320,
            "max_position_embeddings": 262144, "tie_word_embeddings": False, **changes}
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
            "text_config": text}


def test_qwen35_gated_delta_net_layers_are_read_as_vllm_builds_them(tmp_path: Path) -> None:
    m = read_model_config(_write(tmp_path, _qwen35_text_config()))
    gdn = m.mamba_layers
    assert isinstance(gdn, catalogue.GatedDeltaNet) and gdn.layers == 6
    assert (gdn.num_key_heads, gdn.num_value_heads, gdn.key_head_dim, gdn.value_head_dim,
            gdn.conv_kernel) == (16, 48, 128, 128, 4)
    assert gdn.recurrent_bytes == 4.0  # mamba_ssm_dtype float32
    hidden, key_dim, value_dim = 5120, 16 * 128, 48 * 128
    # vllm/model_executor/layers/mamba/gdn_linear_attn.py: in_proj_qkvz, in_proj_ba, conv1d, out_proj
    gdn_layer = (hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * 48
                 + (2 * key_dim + value_dim) * 4 + value_dim * hidden)
    # Qwen3NextAttention: q_proj gives the query and its output gate.
    attention_layer = 3 * hidden * 24 * 256 + 2 * hidden * 4 * 256
    total = (6 * gdn_layer + 2 * attention_layer + 8 * 3 * hidden * 17408
             + 2 * 248320 * hidden)
    assert m.total_params_b == pytest.approx(total / 1e9, abs=1e-3)
    # Without layer_types, every full_attention_interval-th layer is attention (Qwen3-Next).
    text = _qwen35_text_config()["text_config"]
    del text["layer_types"], text["mamba_ssm_dtype"]
    plain = read_model_config(_write(tmp_path, text))
    assert plain.mamba_layers is not None and plain.mamba_layers.layers == 6
    assert plain.mamba_layers.recurrent_bytes == 2.0  # the model's dtype


@pytest.mark.parametrize("changes, fragment", [
    ({"linear_attn_config": {"kda_layers": [1, 2]}}, "linear_attn_config"),  # Kimi's KDA
    ({"mamba_num_heads": 64}, "mamba_num_heads"),
    ({"linear_num_key_heads": None}, "'linear_num_key_heads' is missing"),
    ({"mamba_ssm_dtype": "float8"}, "mamba_ssm_dtype 'float8'"),
])
def test_other_hybrid_layers_are_still_refused(tmp_path: Path, changes: dict[str, object],
                                               fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        read_model_config(_write(tmp_path, _qwen35_text_config(**changes)))


def _nas_config(blocks: list[dict[str, object]]) -> dict[str, object]:
    """A Llama-Nemotron NAS config in the published shape (nvidia/Llama-3_3-Nemotron-Super-49B
    -v1's fields) with these blocks."""
    cfg = json.loads((VENDORED / "meta-llama--Llama-3.1-70B_config.json").read_text())
    cfg.update(architectures=["DeciLMForCausalLM"], model_type="nemotron-nas",
               intermediate_size=None, num_key_value_heads=None, num_hidden_layers=len(blocks),
               block_configs=blocks)
    return cfg


def _nas_block(group: int | None, ffn_mult: float | None) -> dict[str, object]:
    return {"attention": {"n_heads_in_group": group, "no_op": group is None},
            "ffn": {"ffn_mult": ffn_mult, "no_op": ffn_mult is None}}


def test_a_nas_configs_blocks_are_read_as_vllm_builds_them(tmp_path: Path) -> None:
    # vllm/model_executor/models/nemotron_nas.py, DeciLMDecoderLayer: 64 / 8 KV heads, or no
    # attention; a Llama MLP of _ffn_mult_to_intermediate_size (2 x mult x hidden / 3, up to a
    # multiple of 256), or none.
    blocks = [_nas_block(8, 5.25), _nas_block(None, 1.0), _nas_block(8, None),
              _nas_block(None, 0.5)]
    m = read_model_config(_write(tmp_path, _nas_config(blocks)))
    hidden = 8192
    widths = (28672, 5632, 2816)  # 5.25, 1.0 (5461 -> 5632) and 0.5 (2730 -> 2816)
    assert (m.layer_pattern, m.full_attention_layers, m.num_kv_heads) == ("*--*-", 2, 8)
    assert m.sublayers == 5 and m.intermediate_size == 256  # the widths' common divisor
    attention = 2 * hidden * 64 * 128 + 2 * hidden * 8 * 128
    total = 2 * attention + sum(3 * hidden * w for w in widths) + 2 * 128256 * hidden
    assert m.total_params_b == pytest.approx(total / 1e9, abs=1e-3)
    assert kv_layout(m, "auto", 1).bytes_per_token == 2 * 2 * 8 * 128 * 2  # two attention layers


@pytest.mark.parametrize("blocks, fragment", [
    ([_nas_block(8, 1.0), _nas_block(4, 1.0)], "attention layers with \\[8, 16\\] KV heads"),
    ([_nas_block(7, 1.0)], "n_heads_in_group 7 does not divide"),
    ([{"attention": {"no_op": False, "n_heads_in_group": 8, "replace_with_linear": True},
       "ffn": {"ffn_mult": 1.0}}], "attention.replace_with_linear"),
])
def test_a_nas_config_vllm_would_not_build_as_given_is_one_line(
        tmp_path: Path, blocks: list[dict[str, object]], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        read_model_config(_write(tmp_path, _nas_config(blocks)))


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                    reason="the aiconfigurator extra is not installed")
@pytest.mark.parametrize("hf_id, total_b, active_b", [
    ("Qwen/Qwen3.5-27B", 27, 27), ("Qwen/Qwen3.5-35B-A3B", 35, 3),
    ("Qwen/Qwen3.5-122B-A10B", 122, 10), ("Qwen/Qwen3.5-397B-A17B", 397, 17)])
def test_the_bundled_qwen35_configs_derive_the_sizes_their_names_give(
        hf_id: str, total_b: float, active_b: float) -> None:
    m = catalogue.model(hf_id)
    assert m.total_params_b == pytest.approx(total_b, rel=0.03)
    assert m.active_params_b == pytest.approx(active_b, rel=0.12)  # the names round


@pytest.mark.parametrize("excluded, dense, experts", [
    (["lm_head", "model.layers.0*"], "nvfp4", "nvfp4"),  # the first layer kept whole: the bulk is FP4
    ([f"model.language_model.layers.{i}.self_attn*" for i in range(8)], "bf16", "nvfp4"),
    (["*.mlp.experts*"], "nvfp4", "bf16"),
])
def test_exclusion_lists_are_read_as_most_layers_have_them(
        tmp_path: Path, excluded: list[str], dense: str, experts: str) -> None:
    # A Qwen3-MoE-shaped model, 8 layers, its attention the largest dense part.
    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "num_hidden_layers": 8, "hidden_size": 4096,
           "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
           "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 1536,
           "intermediate_size": 12288, "vocab_size": 151936, "max_position_embeddings": 40960}
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {
        "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": excluded}}))
    m = read_model_config(_write(tmp_path, cfg))
    assert (m.dense_quant, m.expert_quant) == (dense, experts)


@pytest.mark.parametrize("kv, expected", [
    ({"kv_cache_quant_algo": "FP8"}, "fp8_e4m3"),  # hf_quant_config.json's form
    ({"kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}}, "fp8_e4m3"),
    ({"kv_cache_quant_algo": "INT8"}, ""),  # unknown: vLLM falls back to the model's dtype
    ({}, ""),
])
def test_a_checkpoints_declared_kv_cache_is_what_vllm_serves_for_auto(
        tmp_path: Path, kv: dict[str, object], expected: str) -> None:
    """vllm/engine/arg_utils.py resolves --kv-cache-dtype auto through
    vllm/utils/torch_utils.py::resolve_kv_cache_dtype_string: a ModelOpt checkpoint's FP8 KV
    cache is served as fp8_e4m3, half the bytes of the bf16 cache the model would otherwise keep."""
    from autotune.domain.engine_config import EngineConfig
    from autotune.domain.vllm_defaults import effective_values
    from autotune.search.spaces.deployment import deployment_space, space_params
    from autotune.workers.sim.engine import start_perf
    from autotune.workers.sim.profile import BUNDLED, load_profile
    from autotune.workers.sim.shape import engine_shape

    cfg = json.loads((VENDORED / "meta-llama--Llama-3.1-8B_config.json").read_text())
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8", **kv}}))
    m = read_model_config(_write(tmp_path, cfg))
    assert m.checkpoint_kv_cache_dtype == expected
    dep = DeploymentSpec(name="k", model=str(tmp_path / "config.json"), gpu="H100-80GB",
                         gpu_count=1, tensor_parallel_size=1, max_model_len=8192)
    defaults = vllm_defaults(dep)
    assert effective_values(defaults, dep)["kv_cache_dtype"] == (expected or "auto")
    asked_bf16 = EngineConfig.from_mapping({"kv_cache_dtype": "bfloat16"})
    assert effective_values(asked_bf16, dep)["kv_cache_dtype"] == "bfloat16"
    # The search space names what a trial asks for: "auto".
    assert space_params(deployment_space("chat", dep), defaults, dep)["kv_cache_dtype"] == "auto"
    perf = start_perf(engine_shape(defaults, dep), dep, load_profile(BUNDLED / "gpu.yaml"))
    assert perf.layout.bytes_per_token == 2 * 8 * 128 * 32 * (1 if expected else 2)


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                    reason="the aiconfigurator extra is not installed")
@pytest.mark.parametrize("hf_id, dense, experts", [
    ("nvidia/GLM-5.1-NVFP4", "bf16", "nvfp4"),  # excludes all of layers 0 and 1 only
    ("nvidia/Gemma-4-26B-A4B-NVFP4", "bf16", "nvfp4"),  # MLP, router, attention per layer
    ("nvidia/Qwen3.5-397B-A17B-NVFP4", "bf16", "nvfp4"),  # linear_attn and self_attn per layer
    ("nvidia/Kimi-K2.5-NVFP4", "bf16", "nvfp4"),  # self_attn per layer, language_model.model.
    ("nvidia/Qwen3.6-35B-A3B-NVFP4", "fp8", "nvfp4"),  # MIXED_PRECISION: FP8 and W4A16 NVFP4
    ("nvidia/Qwen3.6-27B-NVFP4", "nvfp4", "bf16"),  # its MLP, the largest dense part, in NVFP4
    ("nvidia/MiniMax-M3-NVFP4", "fp8", "nvfp4"),  # MXFP8 and NVFP4; block_sparse_moe experts
    ("Qwen/Qwen3-32B-FP8-Static-PerTensor", "fp8", "bf16"),  # quantization_config: producer only
])
def test_the_bundled_nvfp4_exports_exclusion_lists(hf_id: str, dense: str, experts: str) -> None:
    m = catalogue.model(hf_id)
    assert (m.dense_quant, m.expert_quant) == (dense, experts)


def test_a_hybrid_model_needs_chunked_prefill_for_prefix_caching(tmp_path: Path) -> None:
    dep = DeploymentSpec.build(name="q", model=str(_write(tmp_path, _qwen35_text_config())),
                               gpu="H200", gpu_count=1, tensor_parallel_size=1,
                               max_model_len=32768)
    unchunked = vllm_defaults(dep).merged(enable_chunked_prefill=False,
                                          max_num_batched_tokens=32768)
    assert "hybrid_prefix_caching_needs_chunked_prefill" in {
        v.rule for v in common_rule_violations(unchunked, dep)}
    assert not common_rule_violations(vllm_defaults(dep), dep)
    uncached = unchunked.merged(enable_prefix_caching=False)
    assert "hybrid_prefix_caching_needs_chunked_prefill" not in {
        v.rule for v in common_rule_violations(uncached, dep)}


def test_a_modelopt_mixed_precision_export_is_read_module_by_module(tmp_path: Path) -> None:
    # nvidia/Qwen3.6-35B-A3B-NVFP4's shape: attention and gated delta nets in FP8, the routed
    # experts in W4A16 NVFP4, everything unlisted (shared experts, embeddings) unquantised
    # (modelopt.py::ModelOptMixedPrecisionConfig).
    text = _qwen35_text_config(num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512,
                               shared_expert_intermediate_size=512, intermediate_size=None,
                               hidden_size=2048)["text_config"]
    text["model_type"] = "qwen3_5_moe_text"
    prefix = "model.language_model.layers"
    quantized = {}
    for i, kind in enumerate(text["layer_types"]):
        mixer = "linear_attn.out_proj" if kind == "linear_attention" else "self_attn.o_proj"
        quantized[f"{prefix}.{i}.{mixer}"] = {"quant_algo": "FP8"}
        quantized[f"{prefix}.{i}.mlp.experts"] = {"quant_algo": "W4A16_NVFP4", "group_size": 16}
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {
        "quant_algo": "MIXED_PRECISION", "quantized_layers": quantized}}))
    m = read_model_config(_write(tmp_path, {"text_config": text}))
    assert (m.dense_quant, m.expert_quant) == ("fp8", "nvfp4")
    assert m.expert_bytes_per_param == 0.5625
    assert 1.0 < m.dense_bytes_per_param < 2.0  # FP8 attention, bf16 shared expert and embeddings
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {
        "quant_algo": "MIXED_PRECISION", "quantized_layers": {"x": {"quant_algo": "INT8"}}}}))
    with pytest.raises(ConfigError, match="quantized_layers 'x': quant_algo 'INT8'"):
        read_model_config(tmp_path / "config.json")


def test_moe_layer_freq_gives_the_leading_dense_layers_and_their_width(tmp_path: Path) -> None:
    cfg = {"architectures": ["MiniMaxM3SparseForCausalLM"], "num_hidden_layers": 6,
           "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4,
           "head_dim": 64, "intermediate_size": 512, "dense_intermediate_size": 4096,
           "num_local_experts": 8, "num_experts_per_tok": 2, "moe_layer_freq": [0, 0, 1, 1, 1, 1],
           "vocab_size": 1000, "max_position_embeddings": 4096}
    m = read_model_config(_write(tmp_path, cfg))
    assert (m.first_dense_layers, m.intermediate_size, m.moe_intermediate_size) == (2, 4096, 512)
    cfg["moe_layer_freq"] = [0, 1, 0, 1, 1, 1]
    with pytest.raises(ConfigError, match="moe_layer_freq mixes dense and MoE layers"):
        read_model_config(_write(tmp_path, cfg))


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                    reason="the aiconfigurator extra is not installed")
@pytest.mark.parametrize("name", ["DeepSeek-V4-Flash", "DeepSeek-V4-Pro"])
def test_the_catalogues_deepseek_v4_entries_are_their_published_configs(name: str) -> None:
    """The hand-checked V4 entries against the published config.json (aiconfigurator-core's
    copy): V4-Pro's first two layers are HCA (ratio 128) and its indexer keeps 1,024 entries,
    where the entry once copied Flash's pattern and top-512."""
    from autotune.domain.model_sources import bundled

    m = catalogue.MODELS[name]
    found = bundled(m.hf_id)
    assert found is not None
    cfg = json.loads(found[1].read_text())
    layers = cfg["num_hidden_layers"]
    assert m.compress_ratios == tuple(cfg["compress_ratios"][:layers])  # the last is the MTP's
    assert (m.num_layers, m.hidden_size, m.num_heads, m.head_dim, m.qk_rope_head_dim,
            m.sliding_window, m.index_head_dim, m.index_topk, m.num_experts,
            m.experts_per_token, m.moe_intermediate_size, m.num_shared_experts, m.vocab_size,
            m.max_context) == (
        layers, cfg["hidden_size"], cfg["num_attention_heads"], cfg["head_dim"],
        cfg["qk_rope_head_dim"], cfg["sliding_window"], cfg["index_head_dim"],
        cfg["index_topk"], cfg["n_routed_experts"], cfg["num_experts_per_tok"],
        cfg["moe_intermediate_size"], cfg["n_shared_experts"], cfg["vocab_size"],
        cfg["max_position_embeddings"])


def _kimi_k3_text_config(**changes: object) -> dict[str, object]:
    """A Kimi-K3 text config in the published shape (moonshotai/Kimi-K3's text_config, layers
    cut to 4: KDA, KDA, KDA, MLA; the first dense), its MXFP4 experts as compressed-tensors."""
    return {"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
            "num_hidden_layers": 4, "hidden_size": 7168, "num_attention_heads": 96,
            "num_key_value_heads": 96, "kv_lora_rank": 512, "q_lora_rank": 1536,
            "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
            "mla_use_nope": True, "mla_use_output_gate": True, "intermediate_size": 33792,
            "first_k_dense_replace": 1, "moe_layer_freq": 1, "moe_intermediate_size": 3072,
            "num_experts": 896, "num_experts_per_token": 16, "num_shared_experts": 2,
            "routed_expert_hidden_size": 3584, "vocab_size": 163840,
            "max_position_embeddings": 1048576, "tie_word_embeddings": False,
            "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4],
                                   "num_heads": 96, "head_dim": 128,
                                   "short_conv_kernel_size": 4, "use_full_rank_gate": True},
            "quantization_config": {"quant_method": "compressed-tensors",
                                    "format": "mxfp4-pack-quantized",
                                    "ignore": ["re:.*self_attn.*", "re:.*lm_head.*"]},
            **changes}


def test_kimi_k3_kda_and_latent_moe_layers_are_read_as_vllm_builds_them(tmp_path: Path) -> None:
    m = read_model_config(_write(tmp_path, _kimi_k3_text_config()))
    kda = m.mamba_layers
    assert isinstance(kda, catalogue.KimiDeltaAttention) and kda.layers == 3
    assert (m.attention, m.full_attention_layers, m.moe_layers) == ("mla", 1, 3)
    h, inner = 7168, 96 * 128
    # vllm/models/kimi_k3/nvidia/kda.py, KimiK3DeltaAttention: in_proj_qkvgfab, f_b_proj,
    # conv1d over q, k and v, o_proj.
    kda_layer = h * (4 * inner + 128 + 96) + 128 * inner + 3 * inner * 4 + inner * h
    # nvidia/mla.py: q_a, q_b, kv_a, kv_b, the output gate and o_proj.
    mla_layer = (h * 1536 + 1536 * 96 * 192 + h * 576 + 512 * 96 * 256 + h * 96 * 128
                 + 96 * 128 * h)
    expert = 3 * 3584 * 3072  # gated, at the latent width (KimiMoE)
    moe_layer = 896 * expert + 3 * h * 3072 * 2 + 2 * h * 3584 + 896 * h
    total = 3 * kda_layer + mla_layer + 3 * h * 33792 + 3 * moe_layer + 2 * 163840 * h
    assert m.total_params_b == pytest.approx(total / 1e9, abs=1e-3)
    assert m.params_per_expert == expert
    # LatentMoERunner all-reduces the latent and the shared experts' outputs apart.
    assert m.tp_allreduces == 2 * 4 + 3
    # Mxfp4Config leaves every linear layer unquantised: only the experts are MXFP4.
    assert (m.dense_quant, m.expert_quant) == ("bf16", "mxfp4")
    # MambaStateShapeCalculator.kda_state_shape: a (3 x 12,288) x 3 window in bf16 and a
    # 96 x 128 x 128 recurrent state in float32, per layer.
    assert kda.state_bytes(1) == 3 * inner * 3 * 2 + 96 * 128 * 128 * 4 == 6_512_640
    layout = kv_layout(m, "auto", 8)
    assert layout.bytes_per_token == 576 * 2  # one MLA layer's latent and rope entry
    assert layout.fixed_bytes_per_seq == 3 * 6_512_640 / 8


def test_vllm_raises_kimi_k3s_block_size_to_hold_a_kda_state_in_an_mla_page(
        tmp_path: Path) -> None:
    from autotune.domain.engine_config import EngineConfig
    from autotune.domain.vllm_defaults import effective_values

    path = _write(tmp_path, _kimi_k3_text_config())
    # Platform._align_hybrid_block_size aligns an MLA model to at least 128 tokens:
    # 128 x ceil(6,512,640 / tp / (128 x 1,152)).
    for tp, expected in ((1, 5760), (8, 768), (16, 384)):
        dep = DeploymentSpec(name="k", model=str(path), gpu="B200-180GB", gpu_count=16,
                             tensor_parallel_size=tp, max_model_len=16384)
        assert effective_values(EngineConfig.from_mapping({"tensor_parallel_size": tp}),
                                dep)["block_size"] == expected
    (tmp_path / "k36").mkdir()  # 36 KDA heads do not split over 16 ranks
    odd = _write(tmp_path / "k36", _kimi_k3_text_config(
        linear_attn_config={**_kimi_k3_text_config()["linear_attn_config"], "num_heads": 36}))
    dep = DeploymentSpec(name="k36", model=str(odd), gpu="B200-180GB", gpu_count=16,
                         tensor_parallel_size=16, max_model_len=16384)
    assert "tp_fits_linear_attention_heads" in {
        v.rule for v in common_rule_violations(vllm_defaults(dep), dep)}


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                    reason="the aiconfigurator extra is not installed")
def test_the_bundled_kimi_k3_config_is_read() -> None:
    m = catalogue.model("moonshotai/Kimi-K3")
    assert m.total_params_b == pytest.approx(2779.5, abs=0.1)  # vLLM's weights, no MTP
    assert m.active_params_b == pytest.approx(104.2, abs=0.1)
    assert m.mamba_layers is not None and m.mamba_layers.layers == 69
    assert m.full_attention_layers == 24


def _dsv4_config(name: str, **changes: object) -> dict[str, object]:
    """A DeepSeek-V4 config.json in the published shape of the catalogue entry `name` (the
    fields dsv4_config.ARCHITECTURE reads, and the FP8 quantization_config DeepSeek ships)."""
    from autotune.domain.dsv4_config import ARCHITECTURE

    m = catalogue.MODELS[name]
    cfg: dict[str, object] = {key: getattr(m, field) for field, key in ARCHITECTURE.items()}
    cfg.update({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
                "compress_ratios": [*m.compress_ratios, 0], "num_nextn_predict_layers": 1,
                "num_key_value_heads": 1, "expert_dtype": "fp4",
                "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                        "scale_fmt": "ue8m0", "weight_block_size": [128, 128],
                                        "activation_scheme": "dynamic"}})
    cfg.update(changes)
    return cfg


@pytest.mark.parametrize("name", ["DeepSeek-V4-Flash", "DeepSeek-V4-Pro"])
def test_a_deepseek_v4_config_reads_as_its_catalogue_entry(tmp_path: Path, name: str) -> None:
    m = read_model_config(_write(tmp_path, _dsv4_config(name)), hf_id="x/y")
    entry = catalogue.MODELS[name]
    assert m == dataclasses.replace(entry, name=m.name, source=m.source, hf_id="x/y")
    assert f"catalogue's {name}" in m.source


def test_a_deepseek_v4_checkpoints_experts_are_read_as_vllm_routes_them(tmp_path: Path) -> None:
    # vllm/models/deepseek_v4/quant_config.py, DeepseekV4FP8Config.get_quant_method.
    nvfp4 = _dsv4_config("DeepSeek-V4-Flash")
    nvfp4["quantization_config"] = {**nvfp4["quantization_config"],  # type: ignore[dict-item]
                                    "moe_quant_algo": "NVFP4", "quant_algo": "MIXED_PRECISION",
                                    "ignore": ["*.attn.*", "*.ffn.shared_experts.*", "head"]}
    m = read_model_config(_write(tmp_path, nvfp4))
    assert (m.dense_quant, m.expert_quant, m.expert_bytes_per_param) == ("fp8_block", "nvfp4",
                                                                          0.5625)
    base = read_model_config(_write(tmp_path, _dsv4_config("DeepSeek-V4-Flash",
                                                           expert_dtype="fp8")))
    assert (base.expert_quant, base.expert_bytes_per_param) == ("fp8_block", 1.0)
    # No expert_dtype: vLLM defaults it to fp4 (MXFP4).
    plain = _dsv4_config("DeepSeek-V4-Flash")
    del plain["expert_dtype"]
    assert read_model_config(_write(tmp_path, plain)).expert_quant == "fp4"
    assert base.weight_bytes > m.weight_bytes > read_model_config(tmp_path / "config.json").weight_bytes


@pytest.mark.parametrize("changes, message", [
    ({"hidden_size": 5120}, "match no catalogue entry .closest DeepSeek-V4-Flash; differs in "
                            "hidden_size"),
    ({"model_type": "deepseek_ref"}, "model_type 'deepseek_ref' is not one vLLM reads"),
    ({"expert_dtype": "int4"}, "expert_dtype 'int4'; vLLM accepts fp4 or fp8"),
    ({"quantization_config": None}, "quant_method None"),
    ({"index_topk": None}, "field 'index_topk' is missing"),
    ({"compress_ratios": [0, 0, 4]}, "'compress_ratios' needs one entry per layer .43."),
])
def test_a_deepseek_v4_config_vllm_would_not_serve_as_such_is_refused(
        tmp_path: Path, changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_model_config(_write(tmp_path, _dsv4_config("DeepSeek-V4-Flash", **changes)))


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                    reason="the aiconfigurator extra is not installed")
def test_the_bundled_deepseek_v4_exports_read_or_say_why_not() -> None:
    from autotune.domain.model_sources import resolve

    for hf_id, entry in (("nvidia/DeepSeek-V4-Flash-NVFP4", "DeepSeek-V4-Flash"),
                         ("nvidia/DeepSeek-V4-Pro-NVFP4", "DeepSeek-V4-Pro")):
        m = resolve(hf_id)
        assert (m.expert_quant, m.dense_quant, m.num_layers) == (
            "nvfp4", "fp8_block", catalogue.MODELS[entry].num_layers)
    with pytest.raises(ConfigError, match="deepseek_ref"):
        resolve("sgl-project/DeepSeek-V4-Flash-FP8")

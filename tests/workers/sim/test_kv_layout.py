"""KV bytes per token from the published architectures, computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autotune.domain.catalogue import MODELS, model
from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.vllm_defaults import effective_values, resolved
from autotune.errors import ConfigError, EngineStartError
from autotune.search.baselines import vllm_defaults
from autotune.workers.sim.engine import replay_closed_loop, start_perf
from autotune.workers.sim.kv_layout import kv_layout
from autotune.workers.sim.profile import BUNDLED, load_profile
from autotune.workers.sim.shape import engine_shape
from tests.domain.test_model_config import _nemotron_h_config, _qwen35_text_config

BUNDLED_GPU = load_profile(BUNDLED / "gpu.yaml")


@pytest.mark.parametrize("tp, per_token", [
    (1, 2 * 8 * 128 * 2 * 32),  # K and V x 8 KV heads x 128 dims x 2 bytes x 32 layers
    (8, 2 * 1 * 128 * 2 * 32),  # one KV head per rank
    (16, 2 * 1 * 128 * 2 * 32),  # more ranks than KV heads: replicated, not split further
])
def test_standard_attention_splits_kv_heads_over_ranks(tp: int, per_token: int) -> None:
    layout = kv_layout(model("Llama-3.1-8B"), "auto", tp)
    assert layout.bytes_per_token == per_token and layout.fixed_bytes_per_seq == 0


def test_mla_keeps_one_latent_per_layer_on_every_rank() -> None:
    v3 = model("DeepSeek-V3")
    assert kv_layout(v3, "auto", 8).bytes_per_token == (512 + 64) * 2 * 61  # 70,272
    assert kv_layout(v3, "auto", 1).bytes_per_token == kv_layout(v3, "auto", 8).bytes_per_token
    assert kv_layout(v3, "fp8", 8).bytes_per_token == (512 + 64) * 61


def test_deepseek_v4_compresses_along_the_sequence() -> None:
    flash = model("DeepSeek-V4-Flash")
    assert flash.compress_ratios.count(4) == 21 and flash.compress_ratios.count(128) == 20
    layout = kv_layout(flash, "auto", 8)
    # CSA layers: (512-wide entry + 128-wide indexer key) / 4; HCA layers: entry / 128; bf16.
    assert layout.bytes_per_token == 21 * (1024 + 256) / 4 + 20 * 1024 / 128  # 6,880 B
    # Every layer keeps a raw 128-token window per sequence.
    assert layout.fixed_bytes_per_seq == 128 * 1024 * 43
    assert kv_layout(flash, "fp8", 8).bytes_per_token == layout.bytes_per_token / 2
    # About a tenth of DeepSeek-V3's per-token cache, as the model card says.
    ratio = layout.bytes_per_token / kv_layout(model("DeepSeek-V3"), "auto", 8).bytes_per_token
    assert 0.05 < ratio < 0.15


def test_every_catalogue_model_names_its_source_and_has_a_layout() -> None:
    for m in MODELS.values():
        assert len(m.source) > 30, m.name
        assert kv_layout(m, "auto", 1).bytes_per_token > 0
        if m.num_experts:  # the architecture's experts fit inside the published total
            assert m.routed_expert_params < m.total_params_b * 1e9, m.name
            assert m.experts_per_token < m.num_experts


def test_an_unknown_cache_dtype_is_refused() -> None:
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        kv_layout(model("Llama-3.1-8B"), "fp3", 1)


def _qwen35_27b(tmp_path: Path, **changes: object) -> str:
    """Qwen/Qwen3.5-27B's text architecture (64 layers: 48 gated-delta-net, 16 attention)."""
    text = _qwen35_text_config(num_hidden_layers=64, **changes)["text_config"]
    text["layer_types"] = (["linear_attention"] * 3 + ["full_attention"]) * 16
    path = tmp_path / ("-".join(f"{k}{v}" for k, v in changes.items()) or "qwen35") / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(text))
    return str(path)


def test_linear_attention_layers_hold_a_state_and_raise_the_block_size(tmp_path: Path) -> None:
    qwen = model(_qwen35_27b(tmp_path))
    layout = kv_layout(qwen, "auto", 1)
    # MambaStateShapeCalculator.gated_delta_net_state_shape: a (2 x 16 x 128 + 48 x 128) x 3
    # convolution window in bf16 and a 48 x 128 x 128 recurrent state in float32, per layer.
    state = (2 * 16 * 128 + 48 * 128) * 3 * 2 + 48 * 128 * 128 * 4  # 3,207,168 B
    attention_token = 2 * 4 * 256 * 2  # K and V of one attention layer, one token, bf16
    assert layout.bytes_per_token == 16 * attention_token
    assert layout.fixed_bytes_per_seq == 48 * state
    assert layout.read_fixed_bytes_per_seq == 2 * 48 * state  # read and written back


@pytest.mark.parametrize("asked, tp, expected", [
    ({}, 1, 832),  # 64 x ceil(3,207,168 / (64 x 4,096))
    ({"block_size": 128}, 1, 896),  # 128 x 7
    ({"kv_cache_dtype": "fp8"}, 1, 1600),  # half the KV page: 64 x 25
    ({}, 8, 448),  # one KV head per rank (replicated), an eighth of the state: 64 x 7
])
def test_vllm_raises_a_hybrid_models_block_size_until_a_page_holds_a_state(
        tmp_path: Path, asked: dict[str, object], tp: int, expected: int) -> None:
    # Platform._align_hybrid_block_size: the smallest multiple of the block size whose
    # attention page holds one layer's state; check-config shows it as what vLLM runs.
    dep = DeploymentSpec.build(name="q", model=_qwen35_27b(tmp_path), gpu="H200", gpu_count=tp,
                               tensor_parallel_size=tp, max_model_len=16384)
    config = EngineConfig.from_mapping({"tensor_parallel_size": tp, **asked})
    assert effective_values(config, dep)["block_size"] == expected
    effective, overridden = resolved(config, dep)
    assert effective["block_size"] == expected
    assert overridden.get("block_size") == (expected if "block_size" in asked else None)
    llama = DeploymentSpec.build(name="l", model="Llama-3.1-8B", gpu="H200", gpu_count=1,
                                 tensor_parallel_size=1, max_model_len=16384)
    assert effective_values(EngineConfig.from_mapping({}), llama)["block_size"] == 64


def test_the_simulated_engine_runs_a_hybrid_model_at_vllms_block_size(tmp_path: Path) -> None:
    dep = DeploymentSpec.build(name="q", model=_qwen35_27b(tmp_path), gpu="H200", gpu_count=1,
                               tensor_parallel_size=1, max_model_len=16384)
    perf = start_perf(engine_shape(vllm_defaults(dep), dep), dep, BUNDLED_GPU)
    assert perf.shape.block_size == perf.block_size == 832
    # A sequence's three state pages (48 layers' states in groups of the 16 attention layers).
    assert perf.fixed_blocks_per_seq == 3
    result = replay_closed_loop(perf, np.full(8, 1000), np.full(8, 50), 4, seed=0)
    assert not result.failed.any() and result.engine_stats["kv_block_tokens"] == 832
    # 36 value heads do not split over 8 ranks (the attention heads do).
    odd = DeploymentSpec.build(name="q8", model=_qwen35_27b(tmp_path, linear_num_value_heads=36),
                               gpu="H200", gpu_count=8, tensor_parallel_size=8,
                               max_model_len=16384)
    with pytest.raises(EngineStartError, match="tp_fits_linear_attention_heads"):
        start_perf(engine_shape(vllm_defaults(odd), odd), odd, BUNDLED_GPU)


def _nemotron_nano(tmp_path: Path, **changes: object) -> str:
    """nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B's architecture (52 layers: 23 Mamba2, 23 MoE,
    6 attention)."""
    pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
    cfg = _nemotron_h_config(hybrid_override_pattern=pattern, num_hidden_layers=52, **changes)
    path = tmp_path / ("-".join(f"{k}{v}" for k, v in changes.items()) or "nano") / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(cfg))
    return str(path)


def test_mamba2_layers_hold_a_state_and_only_attention_layers_grow(tmp_path: Path) -> None:
    nano = model(_nemotron_nano(tmp_path))
    layout = kv_layout(nano, "auto", 1)
    state = (64 * 64 + 2 * 8 * 128) * 3 * 2 + 64 * 64 * 128 * 4  # mamba2_state_shape, 2,134,016 B
    assert layout.bytes_per_token == 6 * 2 * 2 * 128 * 2  # K and V of 2 heads x 128, 6 layers
    assert layout.fixed_bytes_per_seq == 23 * state
    assert layout.read_fixed_bytes_per_seq == 2 * 23 * state  # read and written back


@pytest.mark.parametrize("tp, expected", [
    (1, 2112),  # 64 x ceil(2,134,016 / (64 x 1,024))
    (2, 2112),  # one KV head per rank, half the state
    (4, 1088),  # KV heads replicated: the page stays, the state quarters: 64 x 17
])
def test_vllm_raises_a_mamba2_models_block_size_until_a_page_holds_a_state(
        tmp_path: Path, tp: int, expected: int) -> None:
    dep = DeploymentSpec.build(name="n", model=_nemotron_nano(tmp_path), gpu="H100",
                               gpu_count=tp, tensor_parallel_size=tp, max_model_len=16384)
    assert effective_values(EngineConfig.from_mapping({"tensor_parallel_size": tp}),
                            dep)["block_size"] == expected


def test_the_simulated_engine_runs_a_nemotron_h_model_as_vllm_would(tmp_path: Path) -> None:
    dep = DeploymentSpec.build(name="n", model=_nemotron_nano(tmp_path), gpu="H100", gpu_count=2,
                               tensor_parallel_size=2, max_model_len=16384)
    perf = start_perf(engine_shape(vllm_defaults(dep), dep), dep, BUNDLED_GPU)
    assert perf.block_size == 2112
    result = replay_closed_loop(perf, np.full(8, 1000), np.full(8, 50), 4, seed=0)
    assert not result.failed.any() and result.engine_stats["kv_block_tokens"] == 2112
    # One all-reduce per layer of a pattern (each is one mixer), two per transformer layer.
    slow = BUNDLED_GPU.with_coefficients(
        allreduce_latency_s=BUNDLED_GPU.coefficients.allreduce_latency_s + 1e-3)
    slower = start_perf(engine_shape(vllm_defaults(dep), dep), dep, slow)
    assert slower._base_s(1, True) - perf._base_s(1, True) == pytest.approx(52 * 1e-3)
    # 8 B/C groups do not split over 16 ranks (the 64 heads and 32 attention heads do).
    wide = DeploymentSpec.build(name="n16", model=_nemotron_nano(tmp_path), gpu="H100",
                                gpu_count=16, tensor_parallel_size=16, max_model_len=16384)
    with pytest.raises(EngineStartError, match="tp_fits_mamba_heads"):
        start_perf(engine_shape(vllm_defaults(wide), wide), wide, BUNDLED_GPU)

"""KV bytes per token from the published architectures, computed by hand."""

from __future__ import annotations

import pytest

from autotune.domain.catalogue import MODELS, model
from autotune.errors import ConfigError
from autotune.workers.sim.kv_layout import kv_layout


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

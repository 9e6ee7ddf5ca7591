"""The step-table builder against aiconfigurator-core's own forward-pass model (skipped where
the optional extra is not installed), and its refusals."""

from __future__ import annotations

import pytest

from autotune.domain import catalogue
from autotune.workers.sim.kernels_build import KernelsUnavailable, build_table, engine_config
from autotune.workers.sim.step_table import StepTable

H200 = catalogue.gpu("H200-141GB")
V4 = catalogue.model("DeepSeek-V4-Flash")
FP8 = "fp8_block/fp8_block"


@pytest.mark.parametrize("tp, dp, ep, moe_tp, moe_ep", [(8, 1, False, 8, 1), (8, 1, True, 1, 8),
                                                        (4, 2, True, 1, 8), (1, 8, True, 1, 8)])
def test_engine_config_spans_all_ranks_with_the_moe(tp: int, dp: int, ep: bool, moe_tp: int,
                                                    moe_ep: int) -> None:
    """The package refuses a config whose MoE width is not tp * dp."""
    c = engine_config(H200, V4, tp, dp, ep, FP8, "0.24.0")
    assert (c["tp_size"], c["attention_dp_size"], c["moe_tp_size"], c["moe_ep_size"]) == (
        tp, dp, moe_tp, moe_ep)
    assert (c["system_name"], c["weight_dtype"], c["moe_dtype"]) == ("h200_sxm", "fp8_block",
                                                                     "fp8_block")
    assert "moe_dtype" not in engine_config(H200, V4, tp, dp, ep, "fp8_block/fp4", "0.24.0")


@pytest.mark.parametrize("gpu, precision, fragment", [
    ("cpu", FP8, "no aiconfigurator system for GPU 'cpu'"),
    ("H200-141GB", "int3", "precision 'int3'"),
])
def test_refusals_without_the_package(gpu: str, precision: str, fragment: str) -> None:
    with pytest.raises(KernelsUnavailable, match=fragment):
        build_table(catalogue.gpu(gpu), V4, 8, precision=precision)


def test_builder_matches_the_package_api() -> None:
    pytest.importorskip("aiconfigurator_core", reason="needs the optional extra: "
                                                      "pip install 'autotune[aiconfigurator]'")
    from aiconfigurator_core.sdk.rust_engine_step import RustForwardPassPerfModel

    raw = build_table(H200, V4, 8, 1, True, FP8)
    table = StepTable.from_dict(raw)
    fpm = RustForwardPassPerfModel.from_native(engine_config(H200, V4, 8, 1, True, FP8, "0.24.0"))

    def api(req: dict[str, int]) -> float:
        return float(fpm.estimate_forward_pass_time_ms({"scheduled_requests": req}))

    assert table.gpu_ms(32, 32 * 4096) == pytest.approx(
        api({"num_decode_requests": 32, "sum_decode_kv_tokens": 32 * 4096}), rel=1e-6)
    assert table.gpu_ms(0, 0, 2048) == pytest.approx(
        api({"num_prefill_requests": 1, "sum_prefill_tokens": 2048}), rel=1e-6)
    assert table.gpu_ms(64, 64 * 1024, 512) == pytest.approx(api(
        {"num_decode_requests": 64, "sum_decode_kv_tokens": 64 * 1024,
         "num_prefill_requests": 1, "sum_prefill_tokens": 512}), rel=1e-6)
    assert raw["source"]["version"] == "0.12.0" and "moe" in raw["source"]["backend_table_families"]


def test_builder_refuses_the_fp4_checkpoint_on_h200() -> None:
    pytest.importorskip("aiconfigurator_core", reason="needs the optional extra: "
                                                      "pip install 'autotune[aiconfigurator]'")
    with pytest.raises(KernelsUnavailable, match="has no step times for .*fp8_block/fp4"):
        build_table(H200, V4, 8, 1, True)


def test_the_routed_experts_share_is_the_step_less_the_step_without_them() -> None:
    """routed_moe_part's "other" step is the package's step with V4's MoE rows taken out, so
    the share it records is what the MoE kernel adds: large for a prefill, and the same at
    every context length; the full table is left as built."""
    pytest.importorskip("aiconfigurator_core", reason="needs the optional extra: "
                                                      "pip install 'autotune[aiconfigurator]'")
    from autotune.workers.sim.kernels_compose import routed_moe_part

    raw = build_table(H200, V4, 1, 8, True, FP8)
    split = routed_moe_part(raw, H200, V4, 1, 8, True)
    assert split["ms"] == raw["ms"] and split["prefill_ctx_ms"] == raw["prefill_ctx_ms"]
    table = StepTable.from_dict(split)
    other = StepTable.from_dict({**raw, "ms": split["parts"]["other_ms"]["ms"]})
    for seqs, prefill in ((0, 8192), (64, 0), (8, 512)):
        share = table.routed_moe_ms(seqs, prefill)
        assert share == pytest.approx(table.gpu_ms(seqs, seqs * 1024, prefill)
                                      - other.gpu_ms(seqs, seqs * 1024, prefill), abs=1e-4)
    assert 0.3 < table.routed_moe_ms(0, 8192) / table.gpu_ms(0, 0, 8192) < 0.9
    shares = split["parts"]["routed_moe_ms"]["ms"]
    assert all(max(row) - min(row) < 1e-3 for plane in shares for row in plane)


def test_an_fp8_kv_table_prices_decode_attention_at_fp8() -> None:
    """Qwen3-32B on H100 at TP2: the package's decode attention reads half the bytes with an
    fp8 cache, so the fp8-KV table's long-context decode steps are shorter; the config the
    package was asked names the cache, and so does the table (and its file name)."""
    pytest.importorskip("aiconfigurator_core", reason="needs the optional extra: "
                                                      "pip install 'autotune[aiconfigurator]'")
    from autotune.workers.sim.step_table import table_filename

    h100, qwen = catalogue.gpu("H100-80GB"), catalogue.model("Qwen/Qwen3-32B")
    auto = StepTable.from_dict(build_table(h100, qwen, 2, precision="bf16"))
    raw = build_table(h100, qwen, 2, precision="bf16", kv_cache_dtype="fp8")
    fp8 = StepTable.from_dict(raw)
    assert raw["source"]["config"]["kv_cache_dtype"] == "fp8" and fp8.kv_cache_dtype == "fp8"
    assert fp8.gpu_ms(256, 256 * 4096) < 0.8 * auto.gpu_ms(256, 256 * 4096)
    assert fp8.gpu_ms(0, 0, 2048) == pytest.approx(auto.gpu_ms(0, 0, 2048), rel=0.05)
    assert "fp8 KV cache" in fp8.label and "KV cache" not in auto.label
    assert table_filename(fp8.gpu, fp8.model, fp8.layout, fp8.precision, "fp8").endswith(
        "_kv-fp8.json")


def test_only_fp8_is_a_table_kv_cache_dtype() -> None:
    with pytest.raises(KernelsUnavailable, match="KV cache dtype 'int8'"):
        engine_config(H200, V4, 8, 1, True, FP8, "0.24.0", "int8")

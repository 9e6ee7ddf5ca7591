"""The GPU fidelity benchmark's row matching on an excerpt of the judge rows (real rows of
benchmarks/data/, plus copies with an unknown model, an unknown system and pipeline
parallelism): each row matched to the catalogue model, GPU, layout, precision and concurrency it
was measured at, or skipped under the reason why."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from benchmarks.gpu_fidelity_rows import (
    NOT_MODELLED,
    UNKNOWN_MODEL,
    UNKNOWN_SYSTEM,
    JudgeRow,
    MatchedRow,
    load_rows,
    match_row,
    match_rows,
    parse_row,
)

# id: (catalogue model, GPU, layout, precision, concurrency, expert parallel)
SUPPORTED = {
    # silicon_concurrency missing: batch_size (attention-DP 1) is the concurrency; FP8 serving
    # of the BF16 checkpoint
    "qwen3_32b_qwen3_32b_h100_sxm_vllm_agg_4000x1000_c_tp2_0_epnone_3":
        ("Qwen3-32B", "H100-80GB", "TP2", "fp8", 48, False),
    # attention-DP 4 x TP 4 with EP 16: 64 in flight per rank, 256 clients in all; the
    # checkpoint's own block FP8, which aiconfigurator calls fp8
    "minimaxm2_5_b200_vllm_fp8_agg_1024x1024_c256_cfg691":
        ("MiniMax-M2.5", "B200-180GB", "DP4xTP4+EP", "fp8_block/fp8_block", 256, True),
    # gpt-oss's own MXFP4 experts, labelled nvfp4 by the rows
    "2026_03_25_gpt_oss_120b_h100_sxm_vllm_fp4_agg_1024x1024_c64_tp4_0_ep1_0_185":
        ("gpt-oss-120b", "H100-80GB", "TP4", "bf16/mxfp4", 64, False),
    # NVFP4 serving on B300 with the experts whole on each of 4 ranks
    "2026_03_25_kimi_k2_5_b300_sxm_vllm_fp4_agg_8192x1024_c8_tp4_0_ep4_0_41":
        ("Kimi-K2.5", "B300-288GB", "TP4+EP", "nvfp4/nvfp4", 8, True),
    # Kimi-K2.5's own INT4 experts: the checkpoint as shipped (BF16 attention)
    "2026_03_25_kimi_k2_5_h200_sxm_vllm_int4_agg_8192x1024_c4_tp8_0_ep1_0_597":
        ("Kimi-K2.5", "H200-141GB", "TP8", "bf16/int4_wo", 4, False),
    "2026_04_06_llama_3_1_70b_h200_sxm_vllm_fp8_agg_1024x8192_c8_tp1_ep1_268":
        ("Llama-3.1-70B", "H200-141GB", "TP1", "fp8", 8, False),
}


@pytest.fixture(scope="module")
def excerpt() -> dict[str, JudgeRow]:
    rows = {r.id: r for r in load_rows() if r.id in SUPPORTED}
    assert set(rows) == set(SUPPORTED), "an excerpt row is missing from benchmarks/data/"
    return rows


def _copy(row: JudgeRow, **changes: str) -> JudgeRow:
    return parse_row({**row.raw, **changes})


@pytest.mark.parametrize("row_id", sorted(SUPPORTED))
def test_supported_rows_match_what_was_measured(excerpt: dict[str, JudgeRow], row_id: str) -> None:
    model, gpu, layout, precision, concurrency, ep = SUPPORTED[row_id]
    m = match_row(excerpt[row_id])
    assert isinstance(m, MatchedRow), m
    assert (m.catalogue_model, m.gpu.name, m.layout, m.precision, m.row.concurrency, m.ep) == (
        model, gpu, layout, precision, concurrency, ep)


def test_a_row_at_another_precision_serves_the_model_at_it(excerpt: dict[str, JudgeRow]) -> None:
    """FP8 serving of a BF16 checkpoint weighs a byte a parameter; a checkpoint served as
    shipped keeps the catalogue's model."""
    fp8 = match_row(excerpt["2026_04_06_llama_3_1_70b_h200_sxm_vllm_fp8_agg_1024x8192_c8_tp1_ep1_268"])
    assert isinstance(fp8, MatchedRow)
    assert (fp8.model.dense_quant, fp8.model.dense_bytes_per_param) == ("fp8", 1.0)
    own = match_row(excerpt["2026_03_25_kimi_k2_5_h200_sxm_vllm_int4_agg_8192x1024_c4_tp8_0_ep1_0_597"])
    assert isinstance(own, MatchedRow)
    from autotune.domain import catalogue
    assert own.model == catalogue.model("moonshotai/Kimi-K2.5")


def test_unmatched_rows_are_counted_by_reason(excerpt: dict[str, JudgeRow]) -> None:
    qwen = excerpt["qwen3_32b_qwen3_32b_h100_sxm_vllm_agg_4000x1000_c_tp2_0_epnone_3"]
    rows = [*excerpt.values(),
            _copy(qwen, model_path="acme/not-a-model"),
            _copy(qwen, model_path="acme/not-a-model", id="second"),
            _copy(qwen, system="tpu_v5e"),
            _copy(qwen, pp_size="2")]
    matched, skipped = match_rows(rows)
    assert {m.row.id for m in matched} == set(SUPPORTED)
    assert skipped == Counter({f"{UNKNOWN_MODEL}: acme/not-a-model": 2,
                               f"{UNKNOWN_SYSTEM}: tpu_v5e": 1,
                               f"{NOT_MODELLED}: pipeline parallelism (pp_size 2)": 1})


def test_every_judge_row_parses_with_its_concurrency() -> None:
    """1,328 rows; where both are given the concurrency is batch_size x attention-DP."""
    rows = load_rows()
    assert len(rows) == 1328
    assert all(r.concurrency == int(r.raw["batch_size"]) * r.dp for r in rows)


def test_aiconfigurator_is_asked_as_its_silicon_validation_asks(excerpt: dict[str, JudgeRow]) -> None:
    """cli_estimate's arguments: batch_size per attention-DP rank and the parallel sizes as the
    row gives them, the bundled name of a renamed checkpoint; with the extra, an estimate for a
    row the package has data for and a one-line reason for one it lacks."""
    from benchmarks import gpu_fidelity_aic as aic

    minimax = excerpt["minimaxm2_5_b200_vllm_fp8_agg_1024x1024_c256_cfg691"]
    args = aic.estimate_args(minimax)
    assert {k: args[k] for k in ("batch_size", "tp_size", "attention_dp_size", "moe_tp_size",
                                 "moe_ep_size", "gemm_quant_mode", "system_name", "mode")} == {
        "batch_size": 64, "tp_size": 4, "attention_dp_size": 4, "moe_tp_size": 1,
        "moe_ep_size": 16, "gemm_quant_mode": "fp8", "system_name": "b200_sxm", "mode": "agg"}
    llama = excerpt["2026_04_06_llama_3_1_70b_h200_sxm_vllm_fp8_agg_1024x8192_c8_tp1_ep1_268"]
    assert aic.estimate_args(llama)["model_path"] == "meta-llama/Meta-Llama-3.1-70B"
    if aic.available() is not None:
        pytest.skip("needs the optional extra: pip install 'autotune[aiconfigurator]'")
    qwen = excerpt["qwen3_32b_qwen3_32b_h100_sxm_vllm_agg_4000x1000_c_tp2_0_epnone_3"]
    ttft, tpot = aic.estimate(qwen)  # type: ignore[misc]
    assert 0 < tpot < ttft
    gpt_oss = excerpt["2026_03_25_gpt_oss_120b_h100_sxm_vllm_fp4_agg_1024x1024_c64_tp4_0_ep1_0_185"]
    reason = aic.estimate(gpt_oss)
    assert isinstance(reason, str) and "\n" not in reason and "PerfDataNotAvailableError" in reason


def test_aiconfigurator_without_its_corpus_fitted_terms(excerpt: dict[str, JudgeRow]) -> None:
    """With the two TTFT terms the package fitted to the silicon corpus set neutral, the same
    row's TTFT drops by at least its 0.8 ms per layer (Qwen3-32B: 64 layers) and TPOT is
    unchanged; the package's own methods are back afterwards (a second shipped call agrees)."""
    from benchmarks import gpu_fidelity_aic as aic

    if aic.available() is not None:
        pytest.skip("needs the optional extra: pip install 'autotune[aiconfigurator]'")
    qwen = excerpt["qwen3_32b_qwen3_32b_h100_sxm_vllm_agg_4000x1000_c_tp2_0_epnone_3"]
    shipped = aic.estimate(qwen)
    unfitted = aic.estimate(qwen, corpus_terms=False)
    assert isinstance(shipped, tuple) and isinstance(unfitted, tuple)
    assert shipped[0] - unfitted[0] >= 64 * 0.8
    assert unfitted[1] == pytest.approx(shipped[1])
    assert aic.estimate(qwen) == shipped


def test_a_row_runs_at_its_served_precision_through_vllms_rules() -> None:
    """NVFP4 MiniMax-M2.5 at TP8: the checkpoint's block-FP8 experts could not be split 8 ways
    (1536 / 8 is not a whole number of 128-wide blocks), its NVFP4 ones run; the measured table
    for that layout and precision prices it, and the closed loop yields both latencies."""
    from benchmarks import gpu_fidelity

    row = next(r for r in load_rows() if r.id == "minimaxm2_5_b200_vllm_fp4_agg_1024x1024_c4_cfg705")
    m = match_row(row)
    assert isinstance(m, MatchedRow) and m.precision == "nvfp4/nvfp4"
    estimate, step_model = gpu_fidelity.simulate(m, True, gpu_fidelity.Method((1, 1)))
    assert step_model == "measured" and isinstance(estimate, tuple), estimate
    ttft_ms, tpot_ms = estimate
    assert 0 < tpot_ms < ttft_ms
    fp8 = match_row(_copy(row, gemm_quant_mode="fp8", moe_quant_mode="fp8"))
    assert isinstance(fp8, MatchedRow)
    refused, _ = gpu_fidelity.simulate(fp8, True, gpu_fidelity.Method((1, 1)))
    assert isinstance(refused, str) and "fp8_block_expert_shards" in refused


def test_a_row_runs_in_both_client_start_states_and_is_placed_against_their_band() -> None:
    """judge_row runs the row's other client start state too; band_stats places the measured
    TTFT and TPOT below, within or above the band the two span."""
    from benchmarks import gpu_fidelity

    row = next(r for r in load_rows() if r.id == "minimaxm2_5_b200_vllm_fp4_agg_1024x1024_c4_cfg705")
    m = match_row(row)
    assert isinstance(m, MatchedRow)
    result = gpu_fidelity.judge_row(m, False, gpu_fidelity.Method((1, 2)))
    assert isinstance(result.sim, tuple) and isinstance(result.other_starts, tuple)
    # Four clients phase-locked wait for each other's prompts: the band is the spread TTFT up
    # to the phase-locked one.
    assert result.sim[0] < result.other_starts[0]
    lo, hi = result.sim[0], result.other_starts[0]
    placed = [gpu_fidelity.RowResult(
        match_row(_copy(row, silicon_ttft_ms=str(ttft), silicon_tpot_ms=str(result.sim[1]))),
        sim=result.sim, other_starts=result.other_starts) for ttft in (lo / 2, (lo + hi) / 2,
                                                                        hi * 2)]
    stats = gpu_fidelity.band_stats([*placed, gpu_fidelity.RowResult(m, sim="refused")])
    assert stats["rows"] == 3
    assert stats["ttft_below_band"] == stats["ttft_in_band"] == stats["ttft_above_band"] == 33.3
    assert stats["tpot_in_band"] == 100.0  # the spread state's own TPOT bounds the band
    assert not gpu_fidelity.judge_row(m, False, gpu_fidelity.Method((1, 2)), band=False).other_starts


def test_a_row_of_an_older_vllm_runs_that_releases_scheduling_default() -> None:
    """vLLM up to 0.13 scheduled synchronously by default, 0.14 on asynchronously: a 0.12.0 row
    runs synchronously (the CPU's step time adds to the GPU's, so its TPOT is longer), a row
    naming no release or a nightly runs today's default, and --engine-args today runs today's
    for all."""
    from benchmarks import gpu_fidelity

    assert gpu_fidelity.release_defaults("0.12.0") == {"async_scheduling": False}
    assert gpu_fidelity.release_defaults("0.13.0") == {"async_scheduling": False}
    for today in ("0.14.0", "0.19.0", "", "nightly-5b8c30d62b754b57"):
        assert gpu_fidelity.release_defaults(today) == {}
    row = next(r for r in load_rows() if r.backend_version == "0.12.0"
               and r.model_path == "Qwen/Qwen3-32B" and r.tp == 4 and r.concurrency == 8)
    m = match_row(row)
    assert isinstance(m, MatchedRow)
    assert gpu_fidelity.row_engine(m)[1].async_scheduling is False
    assert gpu_fidelity.row_engine(m, "today")[1].async_scheduling is True
    assert gpu_fidelity.row_engine(m, "harness")[1].async_scheduling is False
    sync, _ = gpu_fidelity.simulate(m, True, gpu_fidelity.Method((1, 2)))
    today, _ = gpu_fidelity.simulate(m, True, gpu_fidelity.Method((1, 2), engine_args="today"))
    assert isinstance(sync, tuple) and isinstance(today, tuple)
    assert sync[1] > today[1]


def test_the_profiled_phase_begins_with_its_burst_round() -> None:
    """aiperf's measured phase starts with its N requests at once on an idle engine: that round
    weighs 1/20 of the row's mean, the clients' steady state the other 19/20. At 64 clients of
    1,024-token prompts the burst waits for eight steps of prefill, so it lengthens the TTFT."""
    from benchmarks import gpu_fidelity
    from benchmarks.gpu_fidelity import Method

    row = next(r for r in load_rows() if r.model_path == "meta-llama/Llama-3.1-70B"
               and r.system == "h100_sxm" and r.isl == 1024 and r.concurrency == 64
               and r.tp == 4)
    m = match_row(row)
    assert isinstance(m, MatchedRow)
    with_burst, _ = gpu_fidelity.simulate(m, True, Method((1, 2)))
    steady, _ = gpu_fidelity.simulate(m, True, Method((1, 2), first_round="steady"))
    # The burst round alone: N clients at once, nothing before, one round measured.
    burst, _ = gpu_fidelity.simulate(m, True, Method((0, 1), clients="together",
                                                     first_round="steady"))
    assert isinstance(with_burst, tuple) and isinstance(steady, tuple)
    assert isinstance(burst, tuple) and burst[0] > 3 * steady[0]
    for i in (0, 1):
        assert with_burst[i] == pytest.approx((burst[i] + 19 * steady[i]) / 20, rel=1e-9)


def test_a_weighted_median_counts_each_part_by_its_weight() -> None:
    from benchmarks.gpu_fidelity import _reduce

    low, high = np.array([1.0, 2.0, 3.0]), np.array([100.0])
    assert _reduce([(low, 0.9), (high, 0.1)], "median") == 2.0
    assert _reduce([(low, 0.1), (high, 0.9)], "median") == 100.0
    assert _reduce([(low, 0.5), (high, 0.5)], "mean") == pytest.approx(51.0)
    assert np.isnan(_reduce([(np.array([]), 1.0)], "mean"))  # no request with a TPOT


def test_rows_out_writes_one_line_per_row_with_what_each_estimator_said(tmp_path: Path) -> None:
    import json

    from benchmarks import gpu_fidelity

    row = next(r for r in load_rows() if r.id == "minimaxm2_5_b200_vllm_fp4_agg_1024x1024_c4_cfg705")
    m = match_row(row)
    assert isinstance(m, MatchedRow)
    results = [gpu_fidelity.RowResult(m, sim=(80.0, 7.5), step_model="measured",
                                      aic="no estimate")]
    path = tmp_path / "rows.jsonl"
    gpu_fidelity.write_rows(path, results)
    [line] = path.read_text().splitlines()
    written = json.loads(line)
    assert written["id"] == row.id and written["concurrency"] == 4
    assert written["measured"] == [row.ttft_ms, row.tpot_ms]
    assert written["sim"] == [80.0, 7.5] and written["aic_static"] is None
    assert (written["layout"], written["precision"]) == (m.layout, m.precision)
    assert (written["checkpoint"], written["kv_cache_dtype"]) == ("nvidia/MiniMax-M2.5-NVFP4",
                                                                  "fp8_e4m3")


def test_a_four_bit_row_serves_nvidias_nvfp4_export_with_its_fp8_kv_cache(
        excerpt: dict[str, JudgeRow]) -> None:
    """An fp4 row of a model with no FP4 checkpoint of its own ran NVIDIA's NVFP4 export (vLLM
    of that time could not quantise to NVFP4 at load): the export's declared FP8 KV cache is
    what vLLM served, and a shorter KV entry holds more sequences. gpt-oss's own MXFP4 rows and
    Kimi-K2.5's own INT4 rows serve the model's checkpoint; Llama-3.1-70B's FP4 export is not
    bundled here, so its rows keep the base checkpoint's facts."""
    from benchmarks import gpu_fidelity

    kimi = match_row(excerpt["2026_03_25_kimi_k2_5_b300_sxm_vllm_fp4_agg_8192x1024_c8_tp4_0_ep4_0_41"])
    assert isinstance(kimi, MatchedRow)
    assert (kimi.checkpoint, kimi.model.checkpoint_kv_cache_dtype) == ("nvidia/Kimi-K2.5-NVFP4",
                                                                       "fp8_e4m3")
    assert kimi.precision == "nvfp4/nvfp4"  # the weights keep the row's columns
    _, shape = gpu_fidelity.row_engine(kimi)
    assert shape.kv_cache_dtype == "fp8_e4m3"
    base = match_row(_copy(kimi.row, precision="nvfp4"))  # not a 4-bit checkpoint label
    assert isinstance(base, MatchedRow) and base.checkpoint == ""
    _, base_shape = gpu_fidelity.row_engine(base)
    assert base_shape.kv_cache_dtype != "fp8_e4m3"
    for row_id in ("2026_03_25_gpt_oss_120b_h100_sxm_vllm_fp4_agg_1024x1024_c64_tp4_0_ep1_0_185",
                   "2026_03_25_kimi_k2_5_h200_sxm_vllm_int4_agg_8192x1024_c4_tp8_0_ep1_0_597"):
        own = match_row(excerpt[row_id])
        assert isinstance(own, MatchedRow) and own.checkpoint == ""
    llama_fp8 = excerpt["2026_04_06_llama_3_1_70b_h200_sxm_vllm_fp8_agg_1024x8192_c8_tp1_ep1_268"]
    llama = match_row(_copy(llama_fp8, precision="fp4", gemm_quant_mode="nvfp4",
                            moe_quant_mode="nvfp4"))
    assert isinstance(llama, MatchedRow) and llama.checkpoint == ""

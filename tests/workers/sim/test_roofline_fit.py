"""Fitting the roofline's GPU coefficients to measured kernel tables (autotune/workers/sim/roofline_fit.py)
and the bundled per-GPU profiles it writes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from autotune.domain import catalogue
from autotune.errors import ConfigError
from autotune.workers.sim import kernels_build
from autotune.workers.sim.profile import (
    BUNDLED,
    BUNDLED_GPU_FITS,
    find_profile,
    load_profile,
    save_profile,
)
from autotune.workers.sim.roofline_fit import (
    FitTable,
    ape,
    fit,
    fit_tables,
    fitted_profile,
    log_errors,
    roofline_engine,
    served_at,
)
from autotune.workers.sim.step_table import TABLE_FORMAT, layout_name, model_precision, parse_layout
from tests.conftest import run_cli

GPU = "H100-80GB"
# A step time the bundled coefficients miss by far: a floor per layer, slow experts.
TRUE = {"hbm_efficiency": 0.85, "compute_efficiency": 0.6, "attention_efficiency": 0.8,
        "moe_efficiency": 0.45, "layer_floor_s": 3e-5, "allreduce_latency_s": 1.2e-5,
        "block_s": 1e-9}
LAYOUTS = (("Llama-3.1-8B", "TP1"), ("Qwen3-32B", "TP2"), ("gpt-oss-120b", "TP2"),
           ("Qwen3-235B-A22B-FP8", "TP4+EP"))


def roofline_table(model_name: str, layout: str, coefficients: dict[str, float]) -> dict:
    """A table in the committed format whose every grid point is the roofline's GPU ms with
    `coefficients`: what a fit to it should find again."""
    gpu, model = catalogue.gpu(GPU), catalogue.model(model_name)
    tp, dp, ep = parse_layout(layout)
    precision = model_precision(model)
    profile = load_profile(BUNDLED / "gpu.yaml").with_coefficients(eager_layer_s=0.0,
                                                                    **coefficients)
    probe = FitTable(table=None, model=model, tp=tp, dp=dp, ep=ep, points=())  # type: ignore[arg-type]
    perf = roofline_engine(probe, gpu, profile)
    grid = {"prefill_tokens": list(kernels_build.PREFILL_TOKENS),
            "decode_seqs": [s for s in kernels_build.DECODE_SEQS if s <= 256],
            "kv_per_seq": list(kernels_build.KV_PER_SEQ[:5]), "prefill_context": [0, 2048]}
    ms = [[[perf.step_parts_s(b, b * k, p, 1 if p else 0, p * p / 2)[0] * 1e3 if p or b else 0.0
            for k in grid["kv_per_seq"]] for b in grid["decode_seqs"]]
          for p in grid["prefill_tokens"]]
    ctx = [[perf.step_parts_s(0, 0, p, 1, p * (c + p / 2))[0] * 1e3 if p else 0.0
            for c in grid["prefill_context"]] for p in grid["prefill_tokens"]]
    return {"format": TABLE_FORMAT, "gpu": GPU, "model": model.name,
            "layout": layout_name(tp, dp, ep), "precision": precision,
            "source": {"package": "test", "version": "0"}, "grid": grid, "ms": ms,
            "prefill_ctx_ms": ctx}


def write_tables(folder: Path, layouts: tuple[tuple[str, str], ...] = LAYOUTS) -> None:
    for name, layout in layouts:
        table = roofline_table(name, layout, TRUE)
        kernels_build.write_table(table, folder)


def test_the_fit_finds_the_step_times_of_tables_the_roofline_made(tmp_path: Path) -> None:
    write_tables(tmp_path)
    tables = fit_tables(GPU, tmp_path)
    assert [t.table.model for t in tables] == sorted(name for name, _ in LAYOUTS)
    gpu, start = catalogue.gpu(GPU), load_profile(BUNDLED / "gpu.yaml")
    before = np.abs(np.concatenate(log_errors(tables, gpu, start)))
    fitted = fit(tables, gpu, start)
    after = np.abs(np.concatenate(log_errors(tables, gpu, fitted)))
    assert np.median(before) > 0.1  # the bundled coefficients miss these tables ...
    assert after.max() < 0.01  # ... the fitted ones price every point within 1%
    # The efficiencies that shape most points come back.
    for name in ("compute_efficiency", "moe_efficiency", "layer_floor_s"):
        assert getattr(fitted.coefficients, name) == pytest.approx(TRUE[name], rel=0.05)


def test_a_gpu_with_tables_of_fewer_than_three_models_is_refused(tmp_path: Path) -> None:
    write_tables(tmp_path, LAYOUTS[:2])
    with pytest.raises(ConfigError, match="tables of 2 model.*needs at least 3"):
        fitted_profile(GPU, tmp_path)


def test_estimated_and_two_node_tables_stay_out_of_the_fit() -> None:
    keys = [t.key for t in fit_tables("H200-141GB")] + [t.key for t in fit_tables("B200-180GB")]
    assert not [k for k in keys if "fp8_block/fp4" in k]  # composed: estimated FP4 experts
    assert not [k for k in keys if "DP4xTP4" in k]  # 16 GPUs: two nodes
    assert "H200-141GB/Llama-3.1-70B/TP1/fp8" in keys  # too big for the GPU: still priced


def test_served_at_gives_the_tables_precision() -> None:
    llama = catalogue.model("Llama-3.1-70B")
    fp8 = served_at(llama, "fp8")
    assert (fp8.dense_quant, fp8.dense_bytes_per_param) == ("fp8", 1.0)
    kimi = catalogue.model("Kimi-K2.5")
    assert served_at(kimi, model_precision(kimi)) is kimi
    with pytest.raises(ConfigError, match="unknown weight format"):
        served_at(llama, "int3")


@pytest.mark.parametrize("path", sorted(BUNDLED_GPU_FITS.glob("*.yaml")), ids=lambda p: p.stem)
def test_the_bundled_fits_are_what_the_committed_tables_give(path: Path) -> None:
    """A table added or rebuilt without refitting fails here: the fit's tables and errors are
    today's, and a refit finds nothing better (the step times, not the coefficients, are
    compared: weakly determined coefficients may move between scipy versions)."""
    committed = load_profile(path)
    assert committed.fit is not None
    gpu = catalogue.gpu(committed.gpu)
    tables = fit_tables(gpu.name)
    assert committed.fit["tables"] == [t.key for t in tables]
    assert ape(log_errors(tables, gpu, committed)) == committed.fit["error_fitted"]
    again = fitted_profile(committed.gpu, cross_validate=False)
    assert again.fit is not None
    assert again.fit["error_fitted"]["ape_median"] >= committed.fit["error_fitted"]["ape_median"] - 0.5
    # The fit is judged on models left out of it, and beats the generic coefficients there.
    rows = committed.fit["leave_one_model_out"].values()
    left_out = [r["fitted_without_it"]["ape_median"] for r in rows]
    generic = [r["generic"]["ape_median"] for r in rows]
    assert len(left_out) >= 3 and np.median(left_out) < np.median(generic)


def test_a_gpu_with_a_fit_gets_it_and_others_the_generic_profile(tmp_path: Path) -> None:
    h200 = find_profile("H200-141GB", "Qwen3-32B", "gpu", tmp_path)
    assert h200.fit and h200.model == "Qwen3-32B" and h200.coefficients.layer_floor_s > 0
    assert "fitted to measured kernel tables of H200-141GB" in h200.fit_words()
    a100 = find_profile("A100-80GB", "Qwen3-32B", "gpu", tmp_path)  # no tables
    assert a100.fit is None and a100.fit_words() == "not fitted"
    assert a100.coefficients == load_profile(BUNDLED / "gpu.yaml").coefficients
    # A profile calibrated on real trials still comes first.
    calibrated = replace(h200, fit={"to": "real trials"})
    save_profile(calibrated, tmp_path)
    assert find_profile("H200-141GB", "Qwen3-32B", "gpu", tmp_path).fit == {"to": "real trials"}


def test_the_command_writes_a_profile_per_gpu_or_nothing(tmp_path: Path) -> None:
    refused = run_cli("sim", "kernels", "fit-roofline", "--gpu", "H100", "--gpu", "A100",
                      "--out", str(tmp_path))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].endswith(
        "A100-80GB: measured tables of 0 model(s) (none); a roofline fit needs at least 3 so "
        "that models left out can judge it (build more with `autotune sim kernels build`)")
    assert list(tmp_path.iterdir()) == []  # the H100 fit, done first, was not written
    done = run_cli("sim", "kernels", "fit-roofline", "--gpu", "H100", "--out", str(tmp_path),
                   "--json")
    assert done.returncode == 0, done.stderr
    written = load_profile(tmp_path / "H100-80GB.yaml")
    assert written.fit is not None and len(written.fit["tables"]) >= 20
    assert set(json.loads(done.stdout)) == {"H100-80GB"}

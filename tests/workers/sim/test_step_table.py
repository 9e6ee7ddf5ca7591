"""Measured step-time tables: layout names, interpolation, the committed tables and the choice
between a measured table and the roofline."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from autotune.workers.sim.step_table import (
    TABLES_DIR,
    StepTable,
    layout_name,
    load_step_table,
    parse_layout,
    select_step_model,
)

DEMO_LAYOUTS = ("TP8", "TP8+EP", "DP2xTP4+EP", "DP4xTP2+EP", "DP8+EP")
FP8 = "fp8_block/fp8_block"


def _table(**over: object) -> StepTable:
    """A 2 x 3 x 2 grid whose values are an affine function of the axes: multilinear
    interpolation must reproduce it exactly, inside the grid and on its last segments."""
    pt, ds, kv = [0, 1000], [0, 1, 9], [100, 1100]

    def f(p: float, b: float, k: float) -> float:
        return 1 + 0.01 * p + 0.5 * b + 0.002 * k

    raw = {"format": 1, "gpu": "G", "model": "M", "layout": "TP1", "precision": "bf16",
           "source": {"package": "p", "version": "1"},
           "grid": {"prefill_tokens": pt, "decode_seqs": ds, "kv_per_seq": kv,
                    "prefill_context": [0, 4000]},
           "ms": [[[f(p, b, k) for k in kv] for b in ds] for p in pt],
           "prefill_ctx_ms": [[f(p, 0, 100), f(p, 0, 100) + 0.001 * p] for p in pt]}
    raw.update(over)
    return StepTable.from_dict(raw)


@pytest.mark.parametrize("name, parsed", [("TP8", (8, 1, False)), ("TP8+EP", (8, 1, True)),
                                          ("DP2xTP4+EP", (4, 2, True)), ("DP8+EP", (1, 8, True))])
def test_layout_names_round_trip(name: str, parsed: tuple[int, int, bool]) -> None:
    assert parse_layout(name) == parsed
    assert layout_name(*parsed) == name


@pytest.mark.parametrize("bad", ["", "TP", "DP2TP4", "xTP8", "TP8+PP", "DP0+EP"])
def test_bad_layouts_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="parallel layout"):
        parse_layout(bad)


@pytest.mark.parametrize("b, kv_per_seq, p", [(1, 100, 0), (5, 600, 0), (9, 1100, 500),
                                               (3, 350, 250), (20, 3000, 2500)])
def test_interpolation_is_exact_for_an_affine_table(b: int, kv_per_seq: int, p: int) -> None:
    """Between grid points and beyond the top (the last segment extends)."""
    got = _table().gpu_ms(b, b * kv_per_seq, p)
    assert got == pytest.approx(1 + 0.01 * p + 0.5 * b + 0.002 * kv_per_seq)


def test_edge_cases() -> None:
    t = _table()
    assert t.gpu_ms(0, 0, 0) == 0.0
    assert t.gpu_ms(1, 10) == t.gpu_ms(1, 100)  # below the grid: its first value holds
    # A prefill chunk after earlier context adds the prefill-context table's increment.
    assert t.gpu_ms(0, 0, 1000, 2000) - t.gpu_ms(0, 0, 1000) == pytest.approx(0.001 * 1000 / 2)
    with pytest.raises(ValueError, match="does not match its grid"):
        _table(ms=[[[1.0]]])
    with pytest.raises(ValueError, match="format"):
        _table(format=2)


def test_decode_is_affine_in_context_between_grid_points() -> None:
    """What the closed-form summing of decode runs needs: with the batch fixed, a step is
    affine in its context between the table's kv grid points."""
    t = load_step_table(TABLES_DIR / "H200-141GB_DeepSeek-V4-Flash_TP8+EP_fp8_block_fp8_block.json")
    seqs, lo, hi = 24, 4096 * 24, 16384 * 24
    xs = [lo + (hi - lo) * i / 4 for i in range(5)]
    ys = [t.gpu_ms(seqs, x) for x in xs]
    steps = [b - a for a, b in itertools.pairwise(ys)]
    assert steps[0] > 0 and all(s == pytest.approx(steps[0]) for s in steps)


def test_committed_tables_load_with_their_source_and_grow_with_work() -> None:
    files = sorted(TABLES_DIR.glob("*.json"))
    assert {load_step_table(f).layout for f in files} >= set(DEMO_LAYOUTS)
    for f in files:
        t = load_step_table(f)
        raw = json.loads(f.read_text())
        assert raw["source"]["licence"] == "Apache-2.0" and raw["source"]["version"]
        assert raw["source"]["backend_table_families"], f
        decode = [t.gpu_ms(b, b * 4096) for b in (1, 32, 256)]
        prefill = [t.gpu_ms(0, 0, p) for p in (2048, 8192)]
        assert decode == sorted(decode) and decode[0] < decode[-1], f
        assert prefill == sorted(prefill) and prefill[0] < prefill[-1], f


def test_select_step_model(tmp_path: Path) -> None:
    chosen = select_step_model("H200-141GB", "DeepSeek-V4-Flash", "TP8+EP", FP8)
    assert chosen.name == "measured" and chosen.table is not None
    assert "aiconfigurator-core 0.12.0" in chosen.label and "vllm 0.24.0" in chosen.label
    # A precision with no table (the FP4 checkpoint's is composed, see
    # test_sim_kernels_compose.py): roofline, named so.
    bf16 = select_step_model("H200-141GB", "DeepSeek-V4-Flash", "TP8+EP", "bf16/bf16")
    assert bf16.name == "roofline" and bf16.table is None
    assert "no measured table for H200-141GB/DeepSeek-V4-Flash/TP8+EP/bf16/bf16" in bf16.label
    assert select_step_model("H200-141GB", "DeepSeek-V4-Flash", "TP8+EP", FP8,
                             tables_dir=tmp_path).name == "roofline"


def test_an_engine_with_an_fp8_cache_reads_the_fp8_kv_table(tmp_path: Path) -> None:
    """The table sampled at the engine's KV cache dtype where there is one; else the model's
    default one, and the label says its attention is not priced at the engine's cache.
    DeepSeek-V4's fp8_ds_mla is its only layout: its own tables price it."""
    import shutil

    from autotune.workers.sim.step_table import kv_family, table_filename

    source = next(TABLES_DIR.glob("H100-80GB_Qwen3-32B_TP2_bf16.json"))
    shutil.copy(source, tmp_path / source.name)
    raw = json.loads(source.read_text())
    raw["kv_cache_dtype"] = "fp8"
    raw["ms"] = [[[v / 2 for v in row] for row in plane] for plane in raw["ms"]]
    (tmp_path / table_filename("H100-80GB", "Qwen3-32B", "TP2", "bf16", "fp8")).write_text(
        json.dumps(raw))

    def pick(kv: str) -> StepTable:
        chosen = select_step_model("H100-80GB", "Qwen3-32B", "TP2", "bf16", kv, tables_dir=tmp_path)
        assert chosen.table is not None
        return chosen.table

    assert [kv_family(kv) for kv in ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2",
                                     "fp8_ds_mla")] == ["", "", "fp8", "fp8", "fp8", ""]
    assert pick("auto").kv_cache_dtype == "" and pick("fp8_e4m3").kv_cache_dtype == "fp8"
    assert pick("fp8").gpu_ms(32, 32 * 4096) == pytest.approx(pick("auto").gpu_ms(32, 32 * 4096) / 2)
    (tmp_path / table_filename("H100-80GB", "Qwen3-32B", "TP2", "bf16", "fp8")).unlink()
    fallback = select_step_model("H100-80GB", "Qwen3-32B", "TP2", "bf16", "fp8",
                                 tables_dir=tmp_path)
    assert fallback.name == "measured" and "not fp8 (no fp8-KV table)" in fallback.label

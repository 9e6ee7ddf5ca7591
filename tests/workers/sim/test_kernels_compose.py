"""The composed fp8_block/fp4 tables of DeepSeek-V4-Flash (autotune/workers/sim/kernels_compose.py) and
the MoE estimate they rest on (autotune/workers/sim/moe_estimate.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from autotune.domain import catalogue
from autotune.workers.sim.kernels_build import KernelsUnavailable
from autotune.workers.sim.kernels_compose import compose_table
from autotune.workers.sim.moe_estimate import MoeShape, error_summary, estimate_ms, leave_one_split_out
from autotune.workers.sim.step_table import TABLES_DIR, select_step_model

EXCERPT = Path(__file__).parent / "data" / "marlin_w4a16_mxfp4_h200_excerpt.csv"
COMPOSED = sorted(TABLES_DIR.glob("*_fp8_block_fp4.json"))
# The estimate's recorded error comes from the GPU's own Marlin rows: H200's, as the excerpt.
COMPOSED_H200 = [p for p in COMPOSED if p.name.startswith("H200-141GB_")]
V4 = catalogue.model("DeepSeek-V4-Flash")


def _curves(lines: list[str]) -> dict[MoeShape, tuple[np.ndarray, np.ndarray]]:
    rows: dict[MoeShape, list[tuple[float, float]]] = {}
    for r in csv.DictReader(line for line in lines if not line.startswith("#")):
        shape = MoeShape(*(int(r[k]) for k in ("hidden_size", "inter_size", "num_experts",
                                                 "topk", "moe_tp_size", "moe_ep_size")))
        rows.setdefault(shape, []).append((float(r["num_tokens"]), float(r["latency"])))
    return {s: (np.array([n for n, _ in v]), np.array([t for _, t in v]))
            for s, v in rows.items()}


def _table(path: Path) -> dict:
    return json.loads(path.read_text())


def test_a_measured_split_is_its_own_anchor() -> None:
    curves = _curves(EXCERPT.read_text().splitlines())
    for shape, (n, ms) in curves.items():
        assert np.allclose(estimate_ms(shape, n, curves), ms, rtol=1e-9)


def test_held_out_splits_are_estimated_within_the_recorded_error() -> None:
    """Each split of the vendored excerpt, estimated from the others only, lands within the
    error the committed tables record (their p90 over the package's full rows)."""
    curves = _curves(EXCERPT.read_text().splitlines())
    summary = error_summary(leave_one_split_out(curves))
    recorded = _table(COMPOSED_H200[0])["source"]["composition"][
        "leave_one_split_out_abs_rel_error"]
    assert summary["rows"] == 40
    assert summary["median"] <= recorded["balanced"]["p90"]


def test_the_recorded_error_is_reproduced_from_the_package() -> None:
    pd = pytest.importorskip("pandas", reason="reads the package's parquet")
    pytest.importorskip("aiconfigurator_core", reason="needs the optional extra: "
                        "pip install 'autotune[aiconfigurator]'")
    from autotune.workers.sim.kernels_build import _data_root
    df = pd.read_parquet(_data_root() / "h200_sxm/moe/vllm/0.24.0/moe_perf.parquet")
    rows = df[(df.moe_dtype == "w4a16_mxfp4") & df.kernel_source.str.contains("marlin")
              & (df.distribution == "balanced")]
    lines = rows[["num_tokens", "hidden_size", "inter_size", "num_experts", "topk",
                  "moe_tp_size", "moe_ep_size", "latency"]].to_csv(index=False).splitlines()
    recorded = _table(COMPOSED_H200[0])["source"]["composition"][
        "leave_one_split_out_abs_rel_error"]
    assert error_summary(leave_one_split_out(_curves(lines))) == recorded["balanced"]


@pytest.mark.parametrize("path", COMPOSED, ids=lambda p: p.stem)
def test_composed_table_differs_from_fp8_only_in_the_routed_moe(path: Path) -> None:
    """The part of each step that is not the routed MoE is the fp8_block table's exactly; only
    the MoE share was replaced."""
    fp4 = _table(path)
    fp8 = _table(path.with_name(path.name.replace("_fp8_block_fp4", "_fp8_block_fp8_block")))
    parts = fp4["parts"]
    for key in ("ms", "prefill_ctx_ms"):
        other = np.asarray(parts["other_ms"][key])
        moe, moe_fp8 = (np.asarray(parts[p][key]) for p in ("routed_moe_ms",
                                                            "routed_moe_fp8_block_ms"))
        assert np.allclose(other + moe_fp8, fp8[key], atol=3e-5)
        assert np.allclose(other + moe, fp4[key], atol=3e-5)
        assert moe.min() >= -3e-5 and moe_fp8.min() >= -3e-5
    assert fp4["precision"] == "fp8_block/fp4" and fp8["precision"] == "fp8_block/fp8_block"
    assert not np.allclose(fp4["ms"], fp8["ms"])


def test_the_catalogue_model_runs_on_the_composed_table_and_says_so() -> None:
    step = select_step_model("H200-141GB", "DeepSeek-V4-Flash", "TP8", "fp8_block/fp4")
    assert step.name == "measured" and step.table is not None
    assert step.label.startswith("partly estimated table H200-141GB/DeepSeek-V4-Flash/TP8/")
    assert "routed MoE" in step.label and "p90" in step.label
    fp8 = select_step_model("H200-141GB", "DeepSeek-V4-Flash", "TP8", "fp8_block/fp8_block")
    assert fp8.label.startswith("measured table") and "estimated" not in fp8.label


def test_compose_refuses_what_it_cannot_estimate() -> None:
    h200 = catalogue.gpu("H200-141GB")
    with pytest.raises(KernelsUnavailable, match="experts are 'fp8_block'"):
        compose_table(h200, catalogue.model("DeepSeek-V3"), 8)
    with pytest.raises(KernelsUnavailable, match="--estimate-moe-from 'int4'"):
        compose_table(h200, V4, 8, estimate_from="int4")

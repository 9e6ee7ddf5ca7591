"""Compose a step-time table for a checkpoint whose routed experts aiconfigurator has no MoE
rows for, from the measured tables of everything else and an estimated MoE kernel.

The case: DeepSeek-V4-Flash as published (dense FP8 block-128, routed experts MXFP4) on H200.
aiconfigurator-core 0.12.0 raises PerfDataNotAvailableError for it (`w4a8_mxfp4_mxfp8`), but
has every other part: attention, GEMMs, mHC, communication, and the MoE kernel of the FP8
re-quantised experts at V4's shape.

Which MoE kernel vLLM runs for these experts on Hopper: DeepseekV4FP8Config.get_quant_method
(vllm/model_executor/models/deepseek_v4.py) gives FusedMoE layers Mxfp4MoEMethod when
expert_dtype is "fp4" (MegaMoE is SM100-only: DeepseekV4MegaMoEExperts._check_runtime_supported).
Its backend comes from select_mxfp4_moe_backend in
vllm/model_executor/layers/fused_moe/oracle/mxfp4.py, whose non-gpt-oss list
(_get_priority_backends) is FLASHINFER_TRTLLM_MXFP4_MXFP8, DEEPGEMM_MXFP4 (both SM100+), then
MARLIN / BATCHED_MARLIN, TRITON_UNFUSED being commented out: on SM90 the experts run on Marlin,
W4A16 (BF16 activations). aiconfigurator measured that kernel on H200 only for Kimi-K3's experts
(`vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu`, moe_dtype
`w4a16_mxfp4`); autotune/workers/sim/moe_estimate.py scales those rows to V4's shape.

How the table is composed, so the non-MoE part is exactly the package's: a private copy of the
package's data folder (links, except the GPU's MoE table) in which V4's fp8_block MoE rows get
(a) the MXFP4 estimate, (b) a billionth of their time, and the builder samples the package through each (the
`AICONFIGURATOR_SYSTEMS_PATH` it reads). The package then composes the estimate exactly as it
composes measured rows (including its decode overlap of routed and shared experts,
sdk/models/deepseek_v4.py `generation_moe_overlap`). (b) gives the part of each step that is
not the routed MoE; the table keeps it beside both MoE shares, so the composition can be
checked without the package.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from autotune.domain.catalogue import GPU, Model
from autotune.workers.sim.kernels_build import SYSTEMS, KernelsUnavailable, _data_root, build_table
from autotune.workers.sim.moe_estimate import (
    Curve,
    MoeShape,
    error_summary,
    estimate_ms,
    fit,
    leave_one_split_out,
    nearest,
)
from autotune.workers.sim.step_table import model_precision

ESTIMATED_EXPERTS = "fp4"  # the catalogue's name for MXFP4 experts
STAND_IN = "fp8_block"  # the MoE rows the package has at the target shape, replaced here
# The measured kernel an estimate may come from (--estimate-moe-from), as the package keys it.
SOURCES = {"w4a16_mxfp4": "marlin"}  # moe_dtype -> kernel_source substring
VLLM_KERNEL = ("Marlin W4A16 MXFP4 MoE (MarlinExperts): vllm/model_executor/layers/fused_moe/"
               "oracle/mxfp4.py::_get_priority_backends lists MARLIN first that SM90 supports; "
               "vllm/model_executor/models/deepseek_v4.py::DeepseekV4FP8Config.get_quant_method "
               "routes fp4 experts to Mxfp4MoEMethod")
MOE_TABLE = Path("moe") / "vllm"
ROUND = 5
NEGLIGIBLE = 1e-9  # the MoE rows' scale for "the step without its routed MoE"


@contextlib.contextmanager
def _systems_root(path: Path) -> Iterator[None]:
    """Point the package at another data root while the block runs (read at from_native)."""
    key = "AICONFIGURATOR_SYSTEMS_PATH"
    before = os.environ.get(key)
    os.environ[key] = str(path)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


def _copy_root(dest: Path, system: str, backend_version: str,
               rewrite: Callable[[Any], Any]) -> Path:
    """A data root of links to the package's, except `system`'s MoE table, rewritten."""
    src = _data_root().parent
    for item in src.iterdir():
        if item.name != "data":
            (dest / item.name).symlink_to(item)
    (dest / "data").mkdir()
    for sys_dir in (src / "data").iterdir():
        if sys_dir.name != system:
            (dest / "data" / sys_dir.name).symlink_to(sys_dir)
            continue
        (dest / "data" / system).mkdir()
        for fam in sys_dir.iterdir():
            if fam.name != "moe":
                (dest / "data" / system / fam.name).symlink_to(fam)
        shutil.copytree(sys_dir / "moe", dest / "data" / system / "moe", symlinks=True)
    table = dest / "data" / system / MOE_TABLE / backend_version / "moe_perf.parquet"
    import pandas as pd
    rewrite(pd.read_parquet(table)).to_parquet(table)
    return dest


def _curves(rows: Any) -> dict[MoeShape, Curve]:
    out: dict[MoeShape, Curve] = {}
    keys = ["hidden_size", "inter_size", "num_experts", "topk", "moe_tp_size", "moe_ep_size"]
    for key, g in rows.groupby(keys):
        g = g.sort_values("num_tokens")
        out[MoeShape(*(int(v) for v in key))] = (g.num_tokens.to_numpy(float),
                                                 g.latency.to_numpy(float))
    return out


def compose_table(gpu: GPU, model: Model, tp: int, dp: int = 1, ep: bool = False,
                  estimate_from: str = "w4a16_mxfp4",
                  backend_version: str = "0.24.0") -> dict[str, Any]:
    """The table for the checkpoint's own precision (dense/fp4), its routed MoE estimated."""
    precision = model_precision(model)
    dense, _, experts = precision.partition("/")
    if experts != ESTIMATED_EXPERTS:
        raise KernelsUnavailable(f"{model.name}: experts are {experts or 'dense'!r}; the MoE "
                                 f"estimate is for {ESTIMATED_EXPERTS!r} experts only")
    if estimate_from not in SOURCES:
        raise KernelsUnavailable(f"--estimate-moe-from {estimate_from!r}: expected one of "
                                 f"{', '.join(SOURCES)}")
    try:
        import pandas as pd
    except ImportError:
        raise KernelsUnavailable("composing a table needs pandas (with pyarrow) beside "
                                 "aiconfigurator-core") from None
    system = SYSTEMS[gpu.name] if gpu.name in SYSTEMS else ""
    measured = build_table(gpu, model, tp, dp, ep, f"{dense}/{STAND_IN}", backend_version)
    table_path = _data_root() / system / MOE_TABLE / backend_version / "moe_perf.parquet"
    moe = pd.read_parquet(table_path)
    target = ((moe.moe_dtype == STAND_IN) & (moe.hidden_size == model.hidden_size)
              & (moe.inter_size == model.moe_intermediate_size)
              & (moe.num_experts == model.num_experts) & (moe.topk == model.experts_per_token))
    source = (moe.moe_dtype == estimate_from) & moe.kernel_source.str.contains(
        SOURCES[estimate_from])
    if not source.any() or not target.any():
        raise KernelsUnavailable(f"{system} vllm {backend_version}: no {estimate_from} rows, or "
                                 f"no {STAND_IN} rows at {model.name}'s expert shape")
    by_dist = {d: _curves(moe[source & (moe.distribution == d)])
               for d in sorted(moe[target].distribution.unique())}

    def with_estimate(df: Any) -> Any:
        for dist, curves in by_dist.items():
            m = target & (df.distribution == dist)
            for key, g in df[m].groupby(["moe_tp_size", "moe_ep_size"]):
                shape = MoeShape(model.hidden_size, model.moe_intermediate_size,
                                 model.num_experts, model.experts_per_token, *map(int, key))
                df.loc[g.index, "latency"] = estimate_ms(shape, g.num_tokens.to_numpy(float),
                                                         curves)
        return df

    def without_moe(df: Any) -> Any:  # not zero: the package extrapolates above its largest
        df.loc[target, "latency"] *= NEGLIGIBLE  # token count by utilisation, 1/latency
        return df

    tables = {name: _build_rewritten(rewrite, gpu, model, tp, dp, ep, f"{dense}/{STAND_IN}",
                                     backend_version)
              for name, rewrite in (("composed", with_estimate), ("other", without_moe))}
    return _record(tables["composed"], tables["other"], measured, precision, estimate_from,
                   by_dist, model, tp, dp, ep)


def _build_rewritten(rewrite: Callable[[Any], Any], gpu: GPU, model: Model, tp: int, dp: int,
                     ep: bool, precision: str, backend_version: str,
                     kv_cache_dtype: str = "") -> dict[str, Any]:
    """build_table on a private copy of the package's data whose MoE rows `rewrite` changed."""
    with tempfile.TemporaryDirectory(prefix="aic-root-") as tmp:
        root = _copy_root(Path(tmp), SYSTEMS[gpu.name], backend_version, rewrite)
        with _systems_root(root):
            return build_table(gpu, model, tp, dp, ep, precision, backend_version, kv_cache_dtype)


def routed_moe_part(table: dict[str, Any], gpu: GPU, model: Model, tp: int, dp: int, ep: bool,
                    backend_version: str = "0.24.0") -> dict[str, Any]:
    """`table` (build_table's, for this layout) with the routed experts' share of each step
    beside it (`parts`): the step less the same step with the MoE rows at the model's expert
    shape taken out, as compose_table takes them out. A lockstep DP rank's experts serve every
    rank's tokens, so the simulator reads that share at the ranks' mean batch
    (perf_measured.MeasuredPerfModel)."""
    try:
        import pandas as pd  # noqa: F401  (read by _copy_root)
    except ImportError:
        raise KernelsUnavailable("splitting out the routed experts needs pandas (with pyarrow) "
                                 "beside aiconfigurator-core") from None
    system = SYSTEMS[gpu.name]

    def without_moe(df: Any) -> Any:  # not zero: see compose_table
        shape = ((df.hidden_size == model.hidden_size)
                 & (df.inter_size == model.moe_intermediate_size)
                 & (df.num_experts == model.num_experts) & (df.topk == model.experts_per_token))
        if not shape.any():
            raise KernelsUnavailable(f"{system} vllm {backend_version}: no MoE rows at "
                                     f"{model.name}'s expert shape to take out")
        df.loc[shape, "latency"] *= NEGLIGIBLE
        return df

    other = _build_rewritten(without_moe, gpu, model, tp, dp, ep, table["precision"],
                             backend_version, table.get("kv_cache_dtype", ""))
    return {**table, "parts": {
        "other_ms": {k: other[k] for k in ("ms", "prefill_ctx_ms")},
        "routed_moe_ms": {k: _minus(table[k], other[k]) for k in ("ms", "prefill_ctx_ms")}}}


def _minus(a: list[Any], b: list[Any]) -> list[Any]:
    return np.round(np.asarray(a) - np.asarray(b), ROUND).tolist()


def _record(composed: dict[str, Any], other: dict[str, Any], measured: dict[str, Any],
            precision: str, estimate_from: str, by_dist: dict[str, dict[MoeShape, Curve]],
            model: Model, tp: int, dp: int, ep: bool) -> dict[str, Any]:
    width = tp * dp
    split = (1, width) if ep else (width, 1)
    target = MoeShape(model.hidden_size, model.moe_intermediate_size, model.num_experts,
                      model.experts_per_token, *split)
    loo = {d: error_summary(leave_one_split_out(c)) for d, c in by_dist.items()}
    balanced = by_dist.get("balanced") or next(iter(by_dist.values()))
    anchor = nearest(target, balanced)
    coef = fit(balanced)
    moe = {k: _minus(composed[k], other[k]) for k in ("ms", "prefill_ctx_ms")}
    p90 = max(s["p90"] for s in loo.values())
    share = np.asarray(moe["ms"]) / np.maximum(np.asarray(composed["ms"]), 1e-9)
    src_shapes = sorted({(s.hidden, s.inter, s.experts, s.topk) for s in balanced})
    table = dict(composed)
    table["precision"] = precision
    table["source"] = dict(composed["source"])
    table["source"]["composition"] = {
        "measured": "everything but the routed-expert MoE kernel (attention, GEMMs, mHC, "
                    "router, shared expert, communication): the package's tables, as in the "
                    f"{STAND_IN}/{STAND_IN} table of this layout",
        "estimated": f"the routed-expert MoE kernel for MXFP4 experts ({VLLM_KERNEL})",
        "estimated_from": {"moe_dtype": estimate_from,
                           "kernel_source_contains": SOURCES[estimate_from],
                           "shapes_hidden_inter_experts_topk": [list(s) for s in src_shapes],
                           "splits_moe_tp_ep": sorted([s.moe_tp, s.moe_ep] for s in balanced)},
        "method": "anchor and ratio (autotune/workers/sim/moe_estimate.py): the nearest measured split "
                  "in log local shape at the same token count, times the ratio of a fitted "
                  "cost model ms = c0 + c1*weight_GB + c2*TFLOP + c3*activation_GB; the "
                  f"estimate replaces the {STAND_IN} MoE rows at the model's shape and the "
                  "package composes the step",
        "anchor_split_moe_tp_ep": [anchor.moe_tp, anchor.moe_ep],
        "cost_model_ms_per_unit_balanced": [round(float(c), 5) for c in coef],
        "leave_one_split_out_abs_rel_error": loo,
        "step_error_p90_bound": round(float(p90 * share.max()), 3),
    }
    table["source"]["estimated"] = (
        f"routed MoE scaled from {estimate_from} Marlin rows of another shape "
        f"(leave-one-split-out |error| p90 {p90:.0%}, at most "
        f"{p90 * share.max():.0%} of a step)")
    table["parts"] = {
        "other_ms": {"ms": other["ms"], "prefill_ctx_ms": other["prefill_ctx_ms"]},
        "routed_moe_ms": moe,
        f"routed_moe_{STAND_IN}_ms": {k: _minus(measured[k], other[k])
                                      for k in ("ms", "prefill_ctx_ms")},
    }
    return table

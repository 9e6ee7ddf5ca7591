"""Fitting the roofline's GPU coefficients to the measured kernel tables of one GPU.

The roofline (perf.py) prices any model on any GPU the catalogue has, and it is all the
simulator has where the repository holds no measured table (autotune/workers/sim/kernels/) for an
engine's GPU, model, layout and precision. Its generic coefficients (profiles/gpu.yaml) are
first estimates: against the tables its decode step at one sequence is 0.06-1.05 of theirs and
its prefill 0.23-1.73 (benchmarks/roofline_vs_tables.py). So per GPU its GPU coefficients are
fitted here to the tables of that GPU, and judged on models left out of the fit. The tables
are the only data: never the judge rows of benchmarks/gpu_fidelity.py.

Fitted (`FITTED`): the bandwidth and compute efficiencies, attention's and the routed experts'
shares of them, a floor per layer (kernel latencies), the all-reduce latency and the KV
block-table walk. Kept from the generic profile: CPU costs and memory coefficients (the tables
hold GPU time only) and the eager launch cost (the tables are kernel times; the simulator adds
launches above them, as it does to a table).

Tables used: those measured in full (no estimated part, `StepTable.source["estimated"]`) at
the model's default KV cache (not the fp8-KV ones, step_table.KV_FP8), of at most 8 GPUs (the
roofline prices every collective on one NVLink domain; the two-node tables carry the package's
inter-node all-to-all). Points: decode-only steps at capture sizes of 1 to 256 sequences over
256 to 16,384 context tokens each, and prefill-only steps of 16 to 16,384 tokens. The residual
is log(roofline / table), each table weighing the same, minimised by bounded least squares
(scipy).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from autotune.domain import catalogue
from autotune.domain.catalogue import GPU, Model
from autotune.domain.vllm_defaults import default_block_size
from autotune.errors import ConfigError
from autotune.workers.sim.perf import EngineShape, PerfModel
from autotune.workers.sim.profile import BUNDLED, Profile, load_profile
from autotune.workers.sim.step_table import TABLES_DIR, StepTable, load_step_table, parse_layout

# (name, lower, upper, scale): the fit runs on value / scale, so every parameter is near 1.
FITTED = (("hbm_efficiency", 0.05, 1.0, 1.0),
          ("compute_efficiency", 0.05, 1.0, 1.0),
          ("attention_efficiency", 0.05, 2.0, 1.0),
          ("moe_efficiency", 0.02, 1.0, 1.0),
          ("layer_floor_s", 0.0, 5e-4, 1e-5),
          ("allreduce_latency_s", 0.0, 2e-4, 1e-5),
          ("block_s", 0.0, 2e-8, 1e-9))
MAX_GPUS = 8  # one NVLink domain
# A GPU's fit needs tables of this many models, so that each model's error with the fit left
# without it says how the roofline does on a model with no table (A100 and L40S have none and
# keep the generic coefficients).
MIN_MODELS = 3
DECODE_SEQS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
KV_PER_SEQ = (256, 1024, 4096, 16384)
PREFILL_TOKENS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384)
# Step times do not depend on memory: the fit's engines get as much as they ask for, so that
# a layout too big for the GPU (TP1 of a 70B model on H100) still prices its steps.
UNBOUNDED_MEMORY_GIB = 1e6


@dataclass(frozen=True)
class Point:
    """One step the table measured: decode_seqs sequences over kv_tokens context tokens in all,
    or (decode_seqs 0) a prefill of prefill_tokens tokens alone, and its GPU ms."""

    decode_seqs: int
    kv_tokens: int
    prefill_tokens: int
    table_ms: float


@dataclass(frozen=True)
class FitTable:
    """A table the fit can use: the model it measured (at the table's precision), the layout,
    and its points."""

    table: StepTable
    model: Model
    tp: int
    dp: int
    ep: bool
    points: tuple[Point, ...]

    @property
    def key(self) -> str:
        t = self.table
        return f"{t.gpu}/{t.model}/{t.layout}/{t.precision}"


def served_at(model: Model, precision: str) -> Model:
    """The model with its weights in `precision` ("dense[/experts]", as the tables name it)."""
    dense, _, experts = precision.partition("/")
    experts = experts or dense
    if (model.dense_quant, model.expert_quant if model.num_experts else dense) == (dense, experts):
        return model
    try:
        return replace(model, dense_quant=dense, expert_quant=experts,
                       dense_bytes_per_param=catalogue.QUANT_FORMATS[dense],
                       expert_bytes_per_param=catalogue.QUANT_FORMATS[experts])
    except KeyError as exc:
        raise ConfigError(f"precision {precision!r}: unknown weight format {exc}") from None


def fittable_gpus(tables_dir: Path = TABLES_DIR) -> list[str]:
    """The GPUs whose usable tables cover at least MIN_MODELS models."""
    gpus = sorted({load_step_table(p).gpu for p in tables_dir.glob("*.json")})
    return [g for g in gpus if len({t.table.model for t in fit_tables(g, tables_dir)}) >= MIN_MODELS]


def fit_tables(gpu: str, tables_dir: Path = TABLES_DIR) -> list[FitTable]:
    """The committed tables of `gpu` the fit uses (module notes), sorted by file name."""
    out = []
    for path in sorted(tables_dir.glob(f"{gpu}_*.json")):
        table = load_step_table(path)
        # The roofline is fitted at the model's default KV cache: an fp8-KV table's attention
        # would pull its attention efficiency by the bytes the cache saves.
        if table.gpu != gpu or table.source.get("estimated") or table.kv_cache_dtype:
            continue
        tp, dp, ep = parse_layout(table.layout)
        if tp * dp > MAX_GPUS:
            continue
        model = served_at(catalogue.model(table.model), table.precision)
        points = [Point(s, s * k, 0, table.gpu_ms(s, s * k))
                  for s in DECODE_SEQS for k in KV_PER_SEQ]
        points += [Point(0, 0, t, table.gpu_ms(0, 0, t)) for t in PREFILL_TOKENS]
        out.append(FitTable(table, model, tp, dp, ep, tuple(p for p in points if p.table_ms > 0)))
    return out


def roofline_engine(t: FitTable, gpu: GPU, profile: Profile) -> PerfModel:
    """The table's model and layout on the roofline with `profile`; decode batches up to 256
    run CUDA graphs, as the tables' decode steps did."""
    shape = EngineShape(max_num_seqs=256, max_num_batched_tokens=16384,
                        block_size=default_block_size(t.model, gpu), enable_chunked_prefill=True,
                        enable_prefix_caching=False, gpu_memory_utilization=0.9,
                        max_model_len=32768, tensor_parallel_size=t.tp, data_parallel_size=t.dp,
                        enable_expert_parallel=t.ep)
    return PerfModel(replace(gpu, memory_gib=UNBOUNDED_MEMORY_GIB), t.model, shape, profile)


def roofline_ms(t: FitTable, gpu: GPU, profile: Profile) -> np.ndarray:
    """The roofline's GPU ms at each of the table's points (no launch cost: the tables hold
    kernel times)."""
    perf = roofline_engine(t, gpu, profile.with_coefficients(eager_layer_s=0.0))
    return np.array([perf.step_parts_s(p.decode_seqs, p.kv_tokens, p.prefill_tokens,
                                       1 if p.prefill_tokens else 0,
                                       p.prefill_tokens * p.prefill_tokens / 2)[0] * 1e3
                     for p in t.points])


def log_errors(tables: Sequence[FitTable], gpu: GPU, profile: Profile) -> list[np.ndarray]:
    """log(roofline / table) at every point, table by table."""
    return [np.log(roofline_ms(t, gpu, profile) / np.array([p.table_ms for p in t.points]))
            for t in tables]


def _with(profile: Profile, x: np.ndarray) -> Profile:
    return profile.with_coefficients(**{name: float(v) * scale
                                        for (name, _, _, scale), v in zip(FITTED, x, strict=True)})


def fit(tables: Sequence[FitTable], gpu: GPU, start: Profile) -> Profile:
    """`start` with the FITTED coefficients that minimise the tables' log errors."""
    if not tables:
        raise ConfigError(f"no measured table of {gpu.name} to fit the roofline to")
    weights = [1 / math.sqrt(len(t.points)) for t in tables]  # each table weighs the same
    lower = np.array([lo / scale for _, lo, _, scale in FITTED])
    upper = np.array([hi / scale for _, _, hi, scale in FITTED])
    x0 = np.clip([getattr(start.coefficients, name) / scale for name, _, _, scale in FITTED],
                 lower, upper)

    def residuals(x: np.ndarray) -> np.ndarray:
        errors = log_errors(tables, gpu, _with(start, x))
        return np.concatenate([w * e for w, e in zip(weights, errors, strict=True)])

    result = least_squares(residuals, x0, bounds=(lower, upper), x_scale=1.0, diff_step=1e-3)
    return _with(start, result.x)


def ape(errors: Iterable[np.ndarray]) -> dict[str, float]:
    """Median and P90 absolute percentage error, and the signed median (%), of log errors."""
    e = np.concatenate(list(errors))
    pct = (np.exp(e) - 1) * 100
    return {"points": len(e), "ape_median": round(float(np.median(np.abs(pct))), 1),
            "ape_p90": round(float(np.percentile(np.abs(pct), 90)), 1),
            "signed_median": round(float(np.median(pct)), 1)}


def leave_one_model_out(tables: Sequence[FitTable], gpu: GPU, start: Profile
                        ) -> dict[str, dict[str, Any]]:
    """Per model: the roofline's error on its tables with `start` (the generic coefficients)
    and with the coefficients fitted to the other models' tables of this GPU (none where it
    is the only model)."""
    out: dict[str, dict[str, Any]] = {}
    for name in sorted({t.table.model for t in tables}):
        own = [t for t in tables if t.table.model == name]
        others = [t for t in tables if t.table.model != name]
        row: dict[str, Any] = {"tables": len(own),
                               "generic": ape(log_errors(own, gpu, start))}
        if others:
            row["fitted_without_it"] = ape(log_errors(own, gpu, fit(others, gpu, start)))
        out[name] = row
    return out


def fitted_profile(gpu_name: str, tables_dir: Path = TABLES_DIR,
                   cross_validate: bool = True) -> Profile:
    """The generic GPU profile (profiles/gpu.yaml) with its GPU coefficients fitted to every
    usable table of the GPU; its `fit` records the tables, the errors with the generic and the
    fitted coefficients, and (cross_validate) each model's error when the fit leaves it out."""
    gpu = catalogue.gpu(gpu_name)
    start = load_profile(BUNDLED / "gpu.yaml")
    tables = fit_tables(gpu.name, tables_dir)
    models = sorted({t.table.model for t in tables})
    if len(models) < MIN_MODELS:
        raise ConfigError(f"{gpu.name}: measured tables of {len(models)} model(s) "
                          f"({', '.join(models) or 'none'}); a roofline fit needs at least "
                          f"{MIN_MODELS} so that models left out can judge it (build more with "
                          "`autotune sim kernels build`)")
    fitted = fit(tables, gpu, start)
    # Four decimals of each parameter's scale: readable, and a bound's 0.99999 reads as 1.
    fitted = fitted.with_coefficients(**{
        name: float(f"{round(getattr(fitted.coefficients, name) / scale, 4) * scale:.4g}")
        for name, _, _, scale in FITTED})
    record: dict[str, Any] = {
        "to": "measured kernel tables (autotune/workers/sim/kernels/), GPU time of one step",
        "tables": [t.key for t in tables],
        "sources": sorted({f"{t.table.source.get('package')} {t.table.source.get('version')}, "
                           f"{t.table.source.get('backend')} "
                           f"{t.table.source.get('backend_version')} kernel tables"
                           for t in tables}),
        "coefficients": [name for name, *_ in FITTED],
        "error_generic": ape(log_errors(tables, gpu, start)),
        "error_fitted": ape(log_errors(tables, gpu, fitted)),
    }
    if cross_validate:
        record["leave_one_model_out"] = leave_one_model_out(tables, gpu, start)
    source = (f"roofline fitted to {len(tables)} measured kernel tables of {gpu.name} "
              f"({', '.join(models)}); CPU and memory "
              f"coefficients: {start.source}")
    return replace(fitted, gpu=gpu.name, model="*", source=source, fit=record)

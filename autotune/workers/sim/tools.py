"""The simulator's offline tools: the work of `sim fit-cpu`, `sim kernels build` and `sim kernels
fit-roofline`, less their options and printing.

SimulatorBackend names this module as its `tools`; it implements
autotune.measure.sim_tools.SimulatorTools, whose docstrings say what each tool does. Bad input
raises the command's one-line error, naming its options as settings ({out}: --out) where a
SettingError can.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from autotune.atomic import atomic_write_text
from autotune.domain import catalogue
from autotune.domain.catalogue import GPU, Model
from autotune.errors import ConfigError, SettingError
from autotune.measure.sim_tools import CpuFitResult, RooflineFit, StepTableWritten
from autotune.workers.sim.fit_cpu import check_record, fit_cpu, sweep_engine, tpot_check
from autotune.workers.sim.kernels_build import KernelsUnavailable, build_table, write_table
from autotune.workers.sim.kernels_compose import compose_table, routed_moe_part
from autotune.workers.sim.profile import (
    BUNDLED_GPU_FITS,
    find_profile,
    load_profile,
    profile_filename,
    save_profile,
)
from autotune.workers.sim.roofline_fit import fittable_gpus, fitted_profile
from autotune.workers.sim.step_table import (
    KV_FP8,
    TABLES_DIR,
    StepTable,
    model_precision,
    parse_layout,
)

# Where a built table's step time is reported: decode of these many sequences at this context
# each, prefill of these many prompt tokens.
SHOWN_DECODE_SEQS = (1, 32, 256)
SHOWN_CONTEXT = 4096
SHOWN_PREFILL_TOKENS = (2048, 8192)


# -- sim fit-cpu --------------------------------------------------------------------------------
def fit_cpu_cost(sweep: Path, *, step_model: str, step_precision: str | None,
                 profile: Path | None, out: Path | None,
                 profile_dir: Callable[[], Path]) -> CpuFitResult:
    record = _read_sweep(sweep)
    check_record(record, str(sweep))
    if profile is not None and not profile.is_file():
        raise SettingError("{profile} {path}: no such file", path=profile)
    if out is not None and out.is_dir():
        raise SettingError("{out} {path}: a directory; give a file name, e.g. {example}",
                           path=out, example=f"{out}/{profile_filename('GPU', 'MODEL', 2)}")
    dep, _ = sweep_engine(record)
    base = (load_profile(profile) if profile else
            find_profile(dep.gpu_info.name, dep.model_info.name, dep.gpu_info.device,
                         profile_dir()))
    fit = fit_cpu(record, base, step_model=step_model, step_precision=step_precision,
                  where=str(sweep))
    fit = dataclasses.replace(fit, tpot_check=tpot_check(
        record, {"before": base, "after": fit.profile}, step_model, step_precision))
    source = (f"{base.source.strip()} CPU step cost ({', '.join(fit.fitted)}) fitted by "
              f"`autotune sim fit-cpu` to {sweep.name}: real decode steps less the GPU time of "
              f"{fit.step_model}; RMS residual {fit.rms_ms:.3f} ms")
    fitted = dataclasses.replace(fit.profile, version=base.version + 1, source=source,
                                 fit={"kind": "fit-cpu", "sweep": sweep.name, **fit.summary()})
    if out is not None:
        atomic_write_text(out, fitted.to_yaml())
        written = out
    else:
        written = save_profile(fitted, profile_dir())
    c = fitted.coefficients
    return CpuFitResult(
        profile_path=written, gpu=dep.gpu_info.name, model=dep.model_info.name,
        step_model=fit.step_model, overlapped=fit.overlapped, points=fit.points,
        coefficients={"cpu_step_s": c.cpu_step_s, "cpu_seq_s": c.cpu_seq_s,
                      "cpu_small_batch_seq_s": c.cpu_small_batch_seq_s},
        rms_ms=fit.rms_ms, tpot_check=fit.tpot_check, unmodelled_args=fit.unmodelled_args,
        summary=fit.summary())


def _read_sweep(sweep: Path) -> Any:
    try:
        return json.loads(sweep.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{sweep}: cannot read a sweep's JSON ({exc})") from None


# -- sim kernels build --------------------------------------------------------------------------
def build_step_tables(gpu: str, model: str, parallel: Sequence[str], *, precision: str | None,
                      backend_version: str, out: Path | None, estimate_moe_from: str | None,
                      kv_cache_dtype: str) -> list[StepTableWritten]:
    gpu_info, model_info = catalogue.gpu(gpu), catalogue.model(model)
    try:
        layouts = [parse_layout(p) for p in parallel]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    _check_build_options(model_info, precision, estimate_moe_from, kv_cache_dtype)
    kv = "" if kv_cache_dtype == "auto" else kv_cache_dtype
    try:  # every layout first, then write: a failure leaves nothing half-written
        tables = [_sampled_table(gpu_info, model_info, tp, dp, ep, precision, backend_version,
                                 kv, estimate_moe_from) for tp, dp, ep in layouts]
    except KernelsUnavailable as exc:
        raise ConfigError(f"{exc}; the simulator keeps the roofline step model here") from None
    return [_write_step_table(table, out or TABLES_DIR) for table in tables]


def _check_build_options(model: Model, precision: str | None, estimate_moe_from: str | None,
                         kv_cache_dtype: str) -> None:
    own = model_precision(model)
    if estimate_moe_from and precision and precision != own:
        raise SettingError("{estimate_moe_from} composes the checkpoint's own precision "
                           "({own}); drop {precision} {given}", own=own, given=precision)
    if kv_cache_dtype not in ("auto", KV_FP8):
        raise SettingError("{kv_cache_dtype} {given}: tables are sampled at auto (the model's "
                           "default) or {fp8}", given=kv_cache_dtype, fp8=KV_FP8)
    if estimate_moe_from and kv_cache_dtype != "auto":
        raise SettingError("{estimate_moe_from} composes tables at the model's default KV "
                           "cache; drop {kv_cache_dtype}")


def _sampled_table(gpu: GPU, model: Model, tp: int, dp: int, ep: bool, precision: str | None,
                   backend_version: str, kv: str, estimate_moe_from: str | None
                   ) -> dict[str, Any]:
    if estimate_moe_from:  # records the routed experts' share itself
        return compose_table(gpu, model, tp, dp, ep, estimate_moe_from, backend_version)
    table = build_table(gpu, model, tp, dp, ep, precision, backend_version, kv)
    if dp > 1 and ep and model.num_experts:  # lockstep ranks share their experts
        table = routed_moe_part(table, gpu, model, tp, dp, ep, backend_version)
    return table


def _write_step_table(table: dict[str, Any], folder: Path) -> StepTableWritten:
    path = write_table(table, folder)
    step = StepTable.from_dict(table)
    return StepTableWritten(
        path=path, decode_context=SHOWN_CONTEXT,
        decode_ms={n: step.gpu_ms(n, n * SHOWN_CONTEXT) for n in SHOWN_DECODE_SEQS},
        prefill_ms={n: step.gpu_ms(0, 0, n) for n in SHOWN_PREFILL_TOKENS})


# -- sim kernels fit-roofline -------------------------------------------------------------------
def fit_roofline(gpus: Sequence[str], out: Path | None) -> list[RooflineFit]:
    names = [catalogue.gpu(g).name for g in gpus] if gpus else fittable_gpus()
    profiles = [fitted_profile(name) for name in names]  # every fit first: all or nothing
    folder = out or BUNDLED_GPU_FITS
    fits = []
    for p in profiles:
        assert p.fit is not None
        path = folder / f"{p.gpu}.yaml"
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, p.to_yaml())
        fits.append(RooflineFit(gpu=p.gpu, profile_path=path,
                                coefficients=dataclasses.asdict(p.coefficients), fit=p.fit))
    return fits

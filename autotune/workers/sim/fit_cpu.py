"""Fit the simulator's CPU cost per engine step to a real engine's concurrency sweep.

A step's time is its GPU part (the step model: a measured table or the roofline) and its CPU
part, the profile's `cpu_step_s + cpu_seq_s * b + cpu_small_batch_seq_s * min(b,
small_batch_seqs)` for b scheduled sequences (autotune/workers/sim/perf.py::PerfModel._cpu_s:
scheduling, input preparation, sampling, output processing), summed, or overlapped where vLLM
schedules asynchronously (PerfModel.overlap_cpu, vLLM's GPU default). A real sweep's decode
step times by batch size (`autotune bench sweep --backend vllm`, autotune.domain.step_timings) less
the step model's GPU time at the same batch and context are the CPU part, and a non-negative
least-squares fit of those coefficients to them is the profile this writes:

- summed (the CPU build; async scheduling off): CPU = measured - GPU at every batch;
- overlapped: a step lasts max(GPU, CPU), so only a step measured clearly longer than its GPU
  time shows its CPU time (= the measured time); the others only bound it from above and are
  reported as such, not fitted.

The small-batch term is fitted only where the sweep timed at least two batch sizes on each side
of `small_batch_seqs`; otherwise the base profile's value is kept. The fitted profile is then
checked against the sweep's median TPOT: each concurrency re-simulated with the base and the
fitted profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.optimize

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.step_timings import StepTime, steps_from_json
from autotune.errors import ConfigError, SettingError
from autotune.measure.metrics import summarize
from autotune.measure.sim_tools import StepPoint
from autotune.measure.sweep import RECORD_KIND, SweepLoad
from autotune.workers.sim.engine import replay_closed_loop, start_perf
from autotune.workers.sim.perf import PerfModel
from autotune.workers.sim.profile import Profile
from autotune.workers.sim.shape import engine_shape
from autotune.workers.sim.step_table import ROOFLINE, layout_name, model_precision, select_step_model

# Overlapped steps: one measured this much above its GPU time is taken as CPU-bound.
CPU_BOUND_MARGIN = 0.05
# Engine arguments the simulator needs no model of: how the weights are loaded.
NEUTRAL_ARGS = ("--load-format",)


@dataclass(frozen=True)
class CpuFit:
    profile: Profile
    step_model: str  # which GPU step model gave the GPU times (label)
    overlapped: bool
    points: tuple[StepPoint, ...]
    fitted: tuple[str, ...]  # the coefficients the fit moved
    rms_ms: float  # of measured - (GPU + fitted CPU) over the fitted points
    tpot_check: list[dict[str, Any]] = field(default_factory=list)
    unmodelled_args: tuple[str, ...] = ()

    def summary(self) -> dict[str, Any]:
        c = self.profile.coefficients
        return {"step_model": self.step_model, "overlapped": self.overlapped,
                "fitted": list(self.fitted), "rms_ms": self.rms_ms,
                "coefficients": {k: getattr(c, k) for k in (
                    "cpu_step_s", "cpu_seq_s", "cpu_small_batch_seq_s", "small_batch_seqs")},
                "points": [p.__dict__ for p in self.points], "tpot_check": self.tpot_check,
                "unmodelled_engine_args": list(self.unmodelled_args)}


def sweep_engine(record: dict[str, Any]) -> tuple[DeploymentSpec, EngineConfig]:
    """The deployment and engine arguments the sweep ran."""
    dep = DeploymentSpec.build(name="fit-cpu", model=record["model"], gpu=record["gpu"],
                               gpu_count=record["gpu_count"],
                               tensor_parallel_size=record["tensor_parallel_size"],
                               max_model_len=record["max_model_len"])
    return dep, EngineConfig.from_mapping(record["engine_args"])


def check_record(record: Any, where: str) -> list[StepTime]:
    """The record's decode steps; ConfigError where it is no real engine's sweep with any."""
    if not isinstance(record, dict) or record.get("kind") != RECORD_KIND:
        raise SettingError("{where}: not an `autotune bench sweep` record (no kind {kind!r}); "
                           "give the {out} file of a sweep", where=where, kind=RECORD_KIND)
    if record.get("backend") == "sim":
        raise SettingError("{where}: a simulated sweep; fit to a real engine's ({backend} "
                           "vllm), whose token streams time its steps", where=where)
    steps = [s for run in record.get("runs", []) for s in steps_from_json(run)
             if not s.prompt_tokens]
    if len({s.batch for s in steps}) < 2:
        raise ConfigError(f"{where}: decode steps timed at {len({s.batch for s in steps})} batch "
                          "size(s); an affine CPU cost needs two or more: sweep more "
                          "concurrencies, or more prompts per client")
    return steps


def start_model(record: dict[str, Any], profile: Profile, step_model: str,
                step_precision: str | None) -> tuple[PerfModel, str]:
    """The simulated engine of the record's deployment and arguments, with GPU step times from
    `step_model`, and the label saying which ran."""
    dep, config = sweep_engine(record)
    shape = engine_shape(config, dep)
    if shape.data_parallel_size > 1:
        raise ConfigError("fit-cpu fits one engine's steps; this sweep ran data parallel ranks")
    table, label = None, f"{ROOFLINE}"
    if step_model == "measured":
        chosen = select_step_model(
            dep.gpu_info.name, dep.model_info.name,
            layout_name(shape.tensor_parallel_size, 1, shape.enable_expert_parallel),
            step_precision or model_precision(dep.model_info), shape.kv_cache_dtype)
        table, label = chosen.table, chosen.label
    elif step_model != ROOFLINE:
        raise SettingError("{step_model} {got!r}: expected roofline or measured", got=step_model)
    return start_perf(shape, dep, profile, table=table), label


def fit_cpu(record: dict[str, Any], base: Profile, *, step_model: str = "measured",
            step_precision: str | None = None, where: str = "sweep") -> CpuFit:
    steps = check_record(record, where)
    perf, label = start_model(record, base, step_model, step_precision)
    c = base.coefficients
    raw = []
    for s in steps:
        gpu_s, _ = perf.step_parts_s(s.batch, s.kv_tokens)
        measured = s.step_ms / 1000.0
        used = not perf.overlap_cpu or measured > gpu_s * (1 + CPU_BOUND_MARGIN)
        raw.append((s, gpu_s, measured, used))
    fit = [(s, gpu, m) for s, gpu, m, used in raw if used]
    if len({s.batch for s, _, _ in fit}) < 2:
        raise ConfigError(f"{where}: the engine was GPU-bound at all but "
                          f"{len({s.batch for s, _, _ in fit})} of the batch sizes it timed "
                          "(asynchronous scheduling hides the CPU's time there); its CPU cost "
                          "is below the GPU's step time and cannot be fitted from this sweep")
    batches = np.array([s.batch for s, _, _ in fit], dtype=float)
    target = np.array([m - (0.0 if perf.overlap_cpu else gpu) for _, gpu, m in fit])
    small = c.small_batch_seqs
    distinct = set(batches.tolist())
    with_small = (len({b for b in distinct if b <= small}) >= 2
                  and len({b for b in distinct if b > small}) >= 2)
    columns = [np.ones_like(batches), batches]
    names = ["cpu_step_s", "cpu_seq_s"]
    if with_small:
        columns.append(np.minimum(batches, small))
        names.append("cpu_small_batch_seq_s")
    else:  # kept as the base profile has it
        target = target - c.cpu_small_batch_seq_s * np.minimum(batches, small)
    coef, _ = scipy.optimize.nnls(np.column_stack(columns), target)
    fitted = base.with_coefficients(**{n: float(v) for n, v in zip(names, coef, strict=True)})
    after = start_model(record, fitted, ROOFLINE, None)[0]  # its CPU part is the profile's
    points = tuple(StepPoint(s.batch, s.kv_tokens, m * 1000.0, gpu * 1000.0, used,
                             after.step_parts_s(s.batch, s.kv_tokens)[1] * 1000.0)
                   for s, gpu, m, used in raw)
    resid = [p.measured_ms - (max(p.gpu_ms, p.cpu_ms) if perf.overlap_cpu
                              else p.gpu_ms + p.cpu_ms) for p in points if p.used]
    extra = record.get("extra_engine_args") or []
    unmodelled = tuple(a for a in extra if a.startswith("--")
                       and a.split("=")[0] not in NEUTRAL_ARGS)
    return CpuFit(fitted, label, perf.overlap_cpu, points, tuple(names),
                  float(np.sqrt(np.mean(np.square(resid)))), unmodelled_args=unmodelled)


def tpot_check(record: dict[str, Any], profiles: dict[str, Profile], step_model: str,
               step_precision: str | None) -> list[dict[str, Any]]:
    """Each concurrency's measured median TPOT beside the simulator's with each profile (fixed
    lengths only: a trace's sweep names its trace, which is not at hand here)."""
    load = record.get("load") or {}
    if not load.get("input_len"):
        return []
    perfs = {name: start_model(record, p, step_model, step_precision)[0]
             for name, p in profiles.items()}
    rows = []
    for run in record["runs"]:
        c = int(run["max_concurrency"])
        requests = SweepLoad((c,), num_prompts=int(run["num_prompts"]),
                             input_len=int(load["input_len"]), output_len=int(load["output_len"])
                             ).loop(c).requests(None, int(record["max_model_len"]))
        row: dict[str, Any] = {"max_concurrency": c, "measured_ms": run.get("median_tpot_ms")}
        for name, perf in perfs.items():
            result = replay_closed_loop(perf, requests.prompt_tokens, requests.output_tokens, c,
                                        int(record.get("seed", 0)))
            row[f"{name}_ms"] = summarize(result).tpot_p50_ms
        rows.append(row)
    return rows

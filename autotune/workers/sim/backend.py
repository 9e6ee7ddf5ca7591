"""The `sim` engine backend: the simulator behind the same interface as a real vLLM engine."""

from __future__ import annotations

import time
from pathlib import Path
from typing import ClassVar

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import CalibrationResult, Measurement, ReplayResult
from autotune.errors import ConfigError
from autotune.measure.backends import EngineBackend
from autotune.measure.sim_tools import SimulatorTools
from autotune.settings import get_settings
from autotune.traffic.trace import Trace
from autotune.workers.sim import tools as offline_tools
from autotune.workers.sim.calibrate import calibrate
from autotune.workers.sim.closed_loop import CLIENT_STARTS
from autotune.workers.sim.engine import replay, replay_trace_closed_loop, start_perf
from autotune.workers.sim.perf import EngineShape, PerfModel
from autotune.workers.sim.perf_measured import MeasuredPerfModel
from autotune.workers.sim.profile import Profile, find_profile, load_profile, save_profile
from autotune.workers.sim.shape import engine_shape
from autotune.workers.sim.step_table import (
    MEASURED,
    ROOFLINE,
    layout_name,
    model_precision,
    select_step_model,
)

STEP_MODELS = (MEASURED, ROOFLINE)


class SimulatorBackend(EngineBackend):
    """Deterministic for a given seed. Holds no live resources: picklable for Ray.

    Options: `profile` (a profile file; default: the newest calibrated one for the deployment's
    GPU and model, else the bundled default), `cpu_kvcache_space_gib` (the CPU build's KV space,
    as the `vllm` backend sets VLLM_CPU_KVCACHE_SPACE), `skip_decode_runs` (False: step through
    every engine step; the reference the fast path is checked against), `replay_delay_s` (each
    replay takes at least this many wall-clock seconds: paces a simulated campaign like a real
    one, for demos and for tests that kill a job mid-trial; AUTOTUNE_SIM__REPLAY_DELAY_S),
    `step_model` ("measured", the default: GPU step times from the committed measured table for
    the deployment's GPU, model, parallel layout and `step_precision`, the checkpoint's own
    precision unless given, falling back to the roofline where there is none; or "roofline":
    the roofline always; `notes()["step_model"]` names which ran), `client_starts` (closed
    loops: "together", every client's first send at once as `vllm bench serve` sends them, or
    "spread" over one request's service time, the desynchronised state:
    `closed_loop.spread_starts`).
    """

    name = "sim"
    simulated = True
    # The offline tools (sim fit-cpu, sim kernels build / fit-roofline), here so that a front
    # end finds them through the backend's entry point and never imports the workers.
    tools: ClassVar[SimulatorTools] = offline_tools

    def __init__(self, skip_decode_runs: bool = True, profile: str | None = None,
                 cpu_kvcache_space_gib: float = 1.0, replay_delay_s: float = 0.0,
                 step_model: str = MEASURED, step_precision: str | None = None,
                 client_starts: str = "together") -> None:
        if step_model not in STEP_MODELS:
            raise ConfigError(f"sim backend option step_model={step_model!r}: expected one of "
                              f"{', '.join(STEP_MODELS)}")
        if client_starts not in CLIENT_STARTS:
            raise ConfigError(f"sim backend option client_starts={client_starts!r}: expected "
                              f"one of {', '.join(CLIENT_STARTS)}")
        self.client_starts = client_starts
        self._perf: PerfModel | None = None
        self._step_label = ""
        self.step_model, self.step_precision = step_model, step_precision
        self.skip_decode_runs = skip_decode_runs
        self.profile_path = profile
        self.cpu_kvcache_space_gib = float(cpu_kvcache_space_gib)
        self.replay_delay_s = float(replay_delay_s)

    def profile_for(self, deployment: DeploymentSpec) -> Profile:
        if self.profile_path:
            return load_profile(Path(self.profile_path))
        gpu = deployment.gpu_info
        return find_profile(gpu.name, deployment.model_info.name, gpu.device,
                            Path(get_settings().sim.profile_dir))

    def start(self, config: EngineConfig, deployment: DeploymentSpec, *,
              label: str = "engine") -> None:
        shape = engine_shape(config, deployment)
        self.start_shape(shape, deployment, self.profile_for(deployment))

    def start_shape(self, shape: EngineShape, deployment: DeploymentSpec, profile: Profile) -> None:
        table = None
        if self.step_model == MEASURED:
            model = deployment.model_info
            # A dense model's DP ranks are independent engines (vllm/v1/engine/core.py,
            # run_engine_core: "Non-MoE DP ranks are completely independent, so treat like
            # DP=1"; only MoE models get the lockstep DPEngineCoreProc): each runs its TP
            # layout's steps, so that layout's table prices them.
            independent = shape.data_parallel_size > 1 and not model.num_experts
            chosen = select_step_model(
                deployment.gpu_info.name, model.name,
                layout_name(shape.tensor_parallel_size,
                            1 if independent else shape.data_parallel_size,
                            shape.enable_expert_parallel),
                self.step_precision or model_precision(model), shape.kv_cache_dtype)
            table, self._step_label = chosen.table, chosen.label
            if independent and table is not None:
                self._step_label += (f", for each of {shape.data_parallel_size} independent DP "
                                     "ranks")
        self._perf = start_perf(shape, deployment, profile, self.cpu_kvcache_space_gib, table)

    def notes(self) -> dict[str, str]:
        perf = self.perf
        p = perf.profile
        fitted = p.fit_words()
        # The label names the table, or why the roofline ran instead.
        step = self._step_label or ROOFLINE
        out = {"step_model": f"{step}; profile {p.gpu}/{p.model} v{p.version} ({fitted})"}
        if perf.shape.enable_expert_parallel and perf.shape.data_parallel_size > 1:
            if not isinstance(perf, MeasuredPerfModel):  # the measured table has its own
                out["all_to_all"] = ("bandwidth/latency model of the GPU link "
                                     "(allgather/reduce-scatter; no measured all-to-all)")
            out["dp_lockstep"] = ("DP ranks step together, each padded to the largest batch; idle "
                                  "ranks run one-token dummy steps; least-loaded routing")
        return out

    @property
    def perf(self) -> PerfModel:
        assert self._perf is not None, "start() first"
        return self._perf

    def replay(self, trace: object, rate_scale: float, seed: int) -> ReplayResult:
        assert isinstance(trace, Trace) and self._perf is not None, "start() first"
        deadline = time.monotonic() + self.replay_delay_s
        result = replay(self._perf, trace, rate_scale, seed, self.skip_decode_runs)
        time.sleep(max(0.0, deadline - time.monotonic()))  # replay_delay_s: see the class doc
        return result

    def replay_closed_loop(self, trace: object, max_concurrency: int, seed: int) -> ReplayResult:
        assert isinstance(trace, Trace) and self._perf is not None, "start() first"
        deadline = time.monotonic() + self.replay_delay_s
        result = replay_trace_closed_loop(self._perf, trace, max_concurrency, seed,
                                          self.skip_decode_runs, self.client_starts)
        time.sleep(max(0.0, deadline - time.monotonic()))  # replay_delay_s: see the class doc
        return result

    def stop(self) -> None:
        self._perf = None

    @classmethod
    def calibrate(cls, measurements: list[Measurement], deployment: DeploymentSpec, *,
                  save_to: str | None = None, max_evals: int = 300) -> CalibrationResult:
        """Fit the profile of the deployment's GPU and model to real measured replays and, with
        save_to (a profile directory), save it there under the next version."""
        gpu = deployment.gpu_info
        base = find_profile(gpu.name, deployment.model_info.name, gpu.device,
                            Path(get_settings().sim.profile_dir))
        fitted, before, after, evals = calibrate(measurements, base, max_evals=max_evals)
        path = save_profile(fitted, Path(save_to)) if save_to else None
        return CalibrationResult(profile_yaml=fitted.to_yaml(),
                                 profile_path=str(path) if path else None, error_before=before,
                                 error_after=after, measurements=len(measurements),
                                 evaluations=evals)

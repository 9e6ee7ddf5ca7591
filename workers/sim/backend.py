"""The `sim` engine backend: the simulator behind the same interface as a real vLLM engine."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from autotune.backends import EngineBackend
from autotune.baselines import effective_values
from autotune.deployment import DeploymentSpec
from autotune.engine_config import EngineConfig
from autotune.errors import EngineStartError
from autotune.records import CalibrationResult, Measurement, ReplayResult
from autotune.settings import get_settings
from autotune.traffic.trace import Trace
from workers.sim.perf import EngineShape, PerfModel, StartFailure
from workers.sim.profile import Profile, find_profile, load_profile, save_profile
from workers.sim.scheduler import simulate

# Engine arguments vLLM resolves itself when they are not given (besides the baselines' ones).
_IMPLICIT = {"long_prefill_token_threshold": 0, "kv_cache_dtype": "auto", "enforce_eager": False}


def _check_args(values: dict[str, Any], device: str) -> None:
    """The start-up checks vLLM itself makes, with the failure class a real start would get."""
    if values["max_num_batched_tokens"] < values["max_num_seqs"]:
        raise StartFailure("max_num_batched_tokens must be >= max_num_seqs", "invalid_args")
    if not values["enable_chunked_prefill"] and (
            values["max_num_batched_tokens"] < values["max_model_len"]):
        raise StartFailure("without chunked prefill max_num_batched_tokens must be >= "
                           "max_model_len", "invalid_args")
    multiple = 32 if device == "cpu" else 16
    if values["block_size"] % multiple:
        raise StartFailure(f"block_size must be a multiple of {multiple} on {device}",
                           "invalid_args")
    if device == "cpu" and str(values["kv_cache_dtype"]).startswith("fp8"):
        raise StartFailure("the CPU backend has no fp8 KV cache", "invalid_args")


def engine_shape(config: EngineConfig, deployment: DeploymentSpec) -> EngineShape:
    values = {**_IMPLICIT, **effective_values(config, deployment)}
    try:
        _check_args(values, deployment.gpu_info.device)
    except StartFailure as exc:
        raise EngineStartError(f"simulated engine failed to start: {exc}",
                               exc.failure_class) from None
    return EngineShape(**{f: values[f] for f in EngineShape.__dataclass_fields__})


class SimulatorBackend(EngineBackend):
    """Deterministic for a given seed. Holds no live resources: picklable for Ray.

    Options: `profile` (a profile file; default: the newest calibrated one for the deployment's
    GPU and model, else the bundled default), `cpu_kvcache_space_gib` (the CPU build's KV space,
    as the `vllm` backend sets VLLM_CPU_KVCACHE_SPACE), `skip_decode_runs` (False: step through
    every engine step; the reference the fast path is checked against), `replay_delay_s` (each
    replay takes at least this many wall-clock seconds: paces a simulated campaign like a real
    one, for demos and for tests that kill a job mid-trial; AUTOTUNE_SIM__REPLAY_DELAY_S).
    """

    name = "sim"

    def __init__(self, skip_decode_runs: bool = True, profile: str | None = None,
                 cpu_kvcache_space_gib: float = 1.0, replay_delay_s: float = 0.0) -> None:
        self._perf: PerfModel | None = None
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
        try:
            self._perf = PerfModel(deployment.gpu_info, deployment.model_info, shape, profile,
                                   cpu_kvcache_space_gib=self.cpu_kvcache_space_gib)
        except StartFailure as exc:
            raise EngineStartError(f"simulated engine failed to start: {exc}",
                                   exc.failure_class) from None

    @property
    def perf(self) -> PerfModel:
        assert self._perf is not None, "start() first"
        return self._perf

    def replay(self, trace: object, rate_scale: float, seed: int) -> ReplayResult:
        assert isinstance(trace, Trace) and self._perf is not None, "start() first"
        arrivals = trace.arrival_s / rate_scale
        # Bounded like a real replay: whatever has not finished by then counts as failed.
        horizon = float(arrivals[-1]) + max(600.0, 4 * float(arrivals[-1]))
        rng = np.random.default_rng(seed)
        deadline = time.monotonic() + self.replay_delay_s
        result = simulate(self._perf, arrivals, trace.prompt_tokens, trace.output_tokens,
                          trace.hash_ids, trace.hash_block_tokens, rng, horizon,
                          skip_decode_runs=self.skip_decode_runs)
        time.sleep(max(0.0, deadline - time.monotonic()))
        return result

    def stop(self) -> None:
        self._perf = None

    @classmethod
    def calibrate(cls, measurements: list[Measurement], deployment: DeploymentSpec, *,
                  save_to: str | None = None, max_evals: int = 300) -> CalibrationResult:
        """Fit the profile of the deployment's GPU and model to real measured replays and, with
        save_to (a profile directory), save it there under the next version."""
        from workers.sim.calibrate import calibrate

        gpu = deployment.gpu_info
        base = find_profile(gpu.name, deployment.model_info.name, gpu.device,
                            Path(get_settings().sim.profile_dir))
        fitted, before, after, evals = calibrate(measurements, base, max_evals=max_evals)
        path = save_profile(fitted, Path(save_to)) if save_to else None
        return CalibrationResult(profile_yaml=fitted.to_yaml(),
                                 profile_path=str(path) if path else None, error_before=before,
                                 error_after=after, measurements=len(measurements),
                                 evaluations=evals)

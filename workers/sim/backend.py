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
from autotune.rules import engine_refusals
from autotune.settings import get_settings
from autotune.traffic.trace import Trace
from autotune.vocabulary import FailureClass
from workers.sim.perf import EngineShape, PerfModel, StartFailure
from workers.sim.profile import Profile, find_profile, load_profile, save_profile
from workers.sim.scheduler import simulate, simulate_data_parallel


def _check_args(values: dict[str, Any], device: str) -> None:
    """The start-up checks vLLM itself makes, with the failure class a real start would get."""
    if values["max_num_batched_tokens"] < values["max_num_seqs"]:
        raise StartFailure("max_num_batched_tokens must be >= max_num_seqs", FailureClass.INVALID_ARGS)
    if not values["enable_chunked_prefill"] and (
            values["max_num_batched_tokens"] < values["max_model_len"]):
        raise StartFailure("without chunked prefill max_num_batched_tokens must be >= "
                           "max_model_len", FailureClass.INVALID_ARGS)
    multiple = 32 if device == "cpu" else 16
    if values["block_size"] % multiple:
        raise StartFailure(f"block_size must be a multiple of {multiple} on {device}",
                           FailureClass.INVALID_ARGS)
    if device == "cpu" and str(values["kv_cache_dtype"]).startswith("fp8"):
        raise StartFailure("the CPU backend has no fp8 KV cache", FailureClass.INVALID_ARGS)


def _check_parallel(values: dict[str, Any], deployment: DeploymentSpec) -> None:
    gpus = (values["tensor_parallel_size"] * values["pipeline_parallel_size"]
            * values["data_parallel_size"])
    if gpus > deployment.gpu_count:
        raise StartFailure(f"tensor x pipeline x data parallel size needs {gpus} GPUs; the "
                           f"deployment has {deployment.gpu_count}", FailureClass.INVALID_ARGS)
    if (values["data_parallel_size"] > 1 and deployment.model_info.num_experts
            and not values["enable_expert_parallel"]):
        # Without EP vLLM splits every expert over all DP x TP ranks: not modelled (DEP is).
        raise StartFailure("the simulator models data parallelism of an MoE model with expert "
                           "parallelism (DEP) only; add enable_expert_parallel", FailureClass.INVALID_ARGS)


def _check_modelled(values: dict[str, Any]) -> None:
    """Engine features the simulator has no model of: refused, never silently ignored."""
    if values["pipeline_parallel_size"] > 1:
        # Stages, micro-batches and their bubble are not modelled; treating PP as TP would
        # overstate it.
        raise StartFailure("the simulator does not model pipeline parallelism "
                           "(pipeline_parallel_size > 1); not simulated", FailureClass.INVALID_ARGS)
    if values.get("speculative_config"):
        raise StartFailure("the simulator does not model speculative decoding "
                           "(speculative_config); not simulated", FailureClass.INVALID_ARGS)


def _check_rules(config: EngineConfig, deployment: DeploymentSpec) -> None:
    """What vLLM refuses for this model and GPU (the common rules of severity error), refused
    here too: the simulator never measures a config a real engine would not start."""
    refused = engine_refusals(config, deployment)
    if refused:
        v = refused[0]
        raise StartFailure(f"{v.message} (rule {v.rule}; {v.source})", FailureClass.INVALID_ARGS)


def engine_shape(config: EngineConfig, deployment: DeploymentSpec) -> EngineShape:
    values = effective_values(config, deployment)
    try:
        _check_args(values, deployment.gpu_info.device)
        _check_modelled(values)
        _check_parallel(values, deployment)
        _check_rules(config, deployment)
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
    simulated = True

    def __init__(self, skip_decode_runs: bool = True, profile: str | None = None,
                 cpu_kvcache_space_gib: float = 1.0, replay_delay_s: float = 0.0) -> None:
        self._perf: PerfModel | None = None
        self._replicas = 1
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
        self._replicas = int(effective_values(config, deployment)["data_parallel_size"])

    def start_shape(self, shape: EngineShape, deployment: DeploymentSpec, profile: Profile) -> None:
        try:
            self._perf = PerfModel(deployment.gpu_info, deployment.model_info, shape, profile,
                                   cpu_kvcache_space_gib=self.cpu_kvcache_space_gib)
        except StartFailure as exc:
            raise EngineStartError(f"simulated engine failed to start: {exc}",
                                   exc.failure_class) from None

    def notes(self) -> dict[str, str]:
        perf = self.perf
        p = perf.profile
        fitted = "fitted" if p.fit else "not fitted"
        out = {"step_model": f"roofline; profile {p.gpu}/{p.model} v{p.version} ({fitted})"}
        if perf.shape.enable_expert_parallel and perf.shape.data_parallel_size > 1:
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
        arrivals = trace.arrival_s / rate_scale
        # Bounded like a real replay: whatever has not finished by then counts as failed.
        horizon = float(arrivals[-1]) + max(600.0, 4 * float(arrivals[-1]))
        deadline = time.monotonic() + self.replay_delay_s
        args = (arrivals, trace.prompt_tokens, trace.output_tokens, trace.hash_ids,
                trace.hash_block_tokens, np.random.default_rng(seed), horizon)
        if self._replicas == 1:
            result = simulate(self._perf, *args, skip_decode_runs=self.skip_decode_runs)
        else:
            # An MoE model's DP ranks share the experts and step together (DEP); a dense
            # model's are independent engines behind one front end.
            lockstep = self._perf.moe_token_factor > 1
            result = simulate_data_parallel(self._perf, self._replicas, lockstep, *args,
                                            skip_decode_runs=self.skip_decode_runs)
        time.sleep(max(0.0, deadline - time.monotonic()))  # replay_delay_s: see the class doc
        return result

    def stop(self) -> None:
        self._perf = None
        self._replicas = 1

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

"""The `sim` engine backend: the simulator behind the same interface as a real vLLM engine."""

from __future__ import annotations

import numpy as np

from autotune.backends import EngineBackend
from autotune.baselines import effective_values
from autotune.deployment import DeploymentSpec
from autotune.engine_config import EngineConfig
from autotune.errors import EngineStartError
from autotune.records import ReplayResult
from autotune.traffic.trace import Trace
from workers.sim.perf import EngineShape, PerfModel, StartFailure
from workers.sim.scheduler import simulate


def _check_args(values: dict[str, object], device: str) -> None:
    """The start-up checks vLLM itself makes, with the failure class a real start would get."""
    if values["max_num_batched_tokens"] < values["max_num_seqs"]:  # type: ignore[operator]
        raise StartFailure("max_num_batched_tokens must be >= max_num_seqs", "invalid_args")
    if not values["enable_chunked_prefill"] and (
            values["max_num_batched_tokens"] < values["max_model_len"]):  # type: ignore[operator]
        raise StartFailure("without chunked prefill max_num_batched_tokens must be >= "
                           "max_model_len", "invalid_args")
    multiple = 32 if device == "cpu" else 16
    if values["block_size"] % multiple:  # type: ignore[operator]
        raise StartFailure(f"block_size must be a multiple of {multiple} on {device}",
                           "invalid_args")


class SimulatorBackend(EngineBackend):
    """Deterministic for a given seed. Holds no live resources: picklable for Ray."""

    name = "sim"

    def __init__(self, skip_decode_runs: bool = True) -> None:
        self._perf: PerfModel | None = None
        self.skip_decode_runs = skip_decode_runs

    def start(self, config: EngineConfig, deployment: DeploymentSpec, *,
              label: str = "engine") -> None:
        values = effective_values(config, deployment)
        gpu = deployment.gpu_info
        try:
            _check_args(values, gpu.device)
            shape = EngineShape(**{f: values[f] for f in EngineShape.__dataclass_fields__})
            self._perf = PerfModel(gpu, deployment.model_info, shape)
        except StartFailure as exc:
            raise EngineStartError(f"simulated engine failed to start: {exc}",
                                   exc.failure_class) from None

    def replay(self, trace: object, rate_scale: float, seed: int) -> ReplayResult:
        assert isinstance(trace, Trace) and self._perf is not None, "start() first"
        arrivals = trace.arrival_s / rate_scale
        # Bounded like a real replay: whatever has not finished by then counts as failed.
        horizon = float(arrivals[-1]) + max(600.0, 4 * float(arrivals[-1]))
        rng = np.random.default_rng(seed)
        return simulate(self._perf, arrivals, trace.prompt_tokens, trace.output_tokens,
                        trace.hash_ids, trace.hash_block_tokens, rng, horizon,
                        skip_decode_runs=self.skip_decode_runs)

    def stop(self) -> None:
        self._perf = None

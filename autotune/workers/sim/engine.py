"""Starting a simulated engine and replaying a trace (open loop) or closed-loop clients against
it: what the `sim` backend and the calibration share."""

from __future__ import annotations

import numpy as np

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.records import ReplayResult
from autotune.errors import EngineStartError
from autotune.traffic.trace import Trace
from autotune.workers.sim.closed_loop import CLIENT_STARTS, simulate_closed_loop, spread_starts
from autotune.workers.sim.perf import EngineShape, PerfModel, StartFailure
from autotune.workers.sim.perf_measured import MeasuredPerfModel
from autotune.workers.sim.profile import Profile
from autotune.workers.sim.scheduler import simulate, simulate_data_parallel
from autotune.workers.sim.step_table import StepTable


def start_perf(shape: EngineShape, deployment: DeploymentSpec, profile: Profile,
               cpu_kvcache_space_gib: float = 1.0, table: StepTable | None = None) -> PerfModel:
    """The engine's memory and step-time model (GPU step times from `table` where given, else
    the roofline); EngineStartError where vLLM would not start."""
    try:
        if table is not None:
            return MeasuredPerfModel(deployment.gpu_info, deployment.model_info, shape, profile,
                                     table, cpu_kvcache_space_gib=cpu_kvcache_space_gib)
        return PerfModel(deployment.gpu_info, deployment.model_info, shape, profile,
                         cpu_kvcache_space_gib=cpu_kvcache_space_gib)
    except StartFailure as exc:
        raise EngineStartError(f"simulated engine failed to start: {exc}",
                               exc.failure_class) from None


def replay(perf: PerfModel, trace: Trace, rate_scale: float, seed: int,
           skip_decode_runs: bool = True) -> ReplayResult:
    """The trace at rate_scale times its recorded rate, on the engine (all its DP ranks)."""
    arrivals = trace.arrival_s / rate_scale
    # Bounded like a real replay: whatever has not finished by then counts as failed.
    horizon = float(arrivals[-1]) + max(600.0, 4 * float(arrivals[-1]))
    args = (arrivals, trace.prompt_tokens, trace.output_tokens, trace.hash_ids,
            trace.hash_block_tokens, np.random.default_rng(seed), horizon)
    ranks = perf.shape.data_parallel_size
    if ranks == 1:
        return simulate(perf, *args, skip_decode_runs=skip_decode_runs)
    # An MoE model's DP ranks share the experts and step together (DEP); a dense model's are
    # independent engines behind one front end.
    return simulate_data_parallel(perf, ranks, perf.moe_token_factor > 1, *args,
                                  skip_decode_runs=skip_decode_runs)


def replay_closed_loop(perf: PerfModel, prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                       concurrency: int, seed: int, skip_decode_runs: bool = True,
                       start_s: np.ndarray | None = None) -> ReplayResult:
    """Requests of the given lengths, issued in array order by `concurrency` clients that each
    send their next request when their last one finished (`vllm bench serve --max-concurrency`;
    see autotune.workers.sim.closed_loop). No prefix hashes. scheduled_s: each request's send time;
    start_s: each client's first send time (default: all at once)."""
    no_hashes: tuple[tuple[int, ...], ...] = tuple(() for _ in range(len(prompt_tokens)))
    return simulate_closed_loop(perf, np.asarray(prompt_tokens), np.asarray(output_tokens),
                                no_hashes, 1, concurrency, np.random.default_rng(seed),
                                skip_decode_runs=skip_decode_runs, start_s=start_s)


def replay_trace_closed_loop(perf: PerfModel, trace: Trace, concurrency: int, seed: int,
                             skip_decode_runs: bool = True,
                             client_starts: str = "together") -> ReplayResult:
    """As replay_closed_loop, with the trace's requests in its order: their lengths and prefix
    hashes (shared prefixes hit the cache as in an open-loop replay); arrival times unused.
    client_starts: "together" (every client's first send at 0, as `vllm bench serve` sends)
    or "spread" (`closed_loop.spread_starts`)."""
    if client_starts not in CLIENT_STARTS:
        raise ValueError(f"client_starts={client_starts!r}: expected one of "
                         f"{', '.join(CLIENT_STARTS)}")
    start_s = (spread_starts(perf, trace.prompt_tokens, trace.output_tokens, concurrency)
               if client_starts == "spread" else None)
    return simulate_closed_loop(perf, trace.prompt_tokens, trace.output_tokens, trace.hash_ids,
                                trace.hash_block_tokens, concurrency,
                                np.random.default_rng(seed), skip_decode_runs=skip_decode_runs,
                                start_s=start_s)

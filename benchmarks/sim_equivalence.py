"""Does a change to the simulator's scheduler keep its results, and how much faster is it?

Loads `autotune/workers/sim/scheduler.py` as it was at a git revision beside the working tree's and runs
both `simulate` functions on the same engines and traces (the perf model is the working tree's
for both): the sim-speed benchmark's hour, the demo trace under several configs, long prompts
on a tight KV cache (preemption), no chunked prefill, a long-prefill cap, the real Azure code
trace, and the Mooncake trace's prefix hashes (with and without cache eviction), each skipping
decode runs and stepping. Per-request scheduled/TTFT/E2E/queue times, token counts, failures,
wall time and engine stats must be bit-equal, and so must the ITL distribution (its values
with their summed weights: the layout of the weighted array may differ) and the summary.

With --time N it instead times both on the benchmark's hour (rates x1 and x4), interleaved so
both see the same machine load, and prints the median CPU seconds of N rounds and their ratio.

Usage: .venv/bin/python benchmarks/sim_equivalence.py [--ref REV] [--time N]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from autotune.domain.deployment import DEMO, DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import ReplayResult
from autotune.measure.metrics import summarize
from autotune.search.baselines import guide_heuristic, vllm_defaults
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE, Trace
from autotune.workers.sim import scheduler as current
from autotune.workers.sim.backend import SimulatorBackend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_speed import conversation_like_trace

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"
L40S = DeploymentSpec(name="l", model="Llama-3.1-8B", gpu="L40S", gpu_count=1,
                      tensor_parallel_size=1, max_model_len=16384)
H200X8 = DeploymentSpec(name="m", model="DeepSeek-V4-Flash", gpu="H200-141GB", gpu_count=8,
                        tensor_parallel_size=8, max_model_len=262144)
Case = tuple[str, EngineConfig, DeploymentSpec, Trace, float]
RESULT_ARRAYS = ("scheduled_s", "ttft_s", "e2e_s", "output_tokens", "failed", "queue_s")


# Where the scheduler lives, newest first: older revisions keep it under a top-level workers/.
SCHEDULER_PATHS = ("autotune/workers/sim/scheduler.py", "workers/sim/scheduler.py")


def scheduler_at(ref: str, into: Path) -> ModuleType:
    for rel in SCHEDULER_PATHS:
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{rel}"], capture_output=True)
        if shown.returncode == 0:
            source = shown.stdout
            break
    else:
        raise SystemExit(f"error: no scheduler at {ref!r} ({' or '.join(SCHEDULER_PATHS)}): "
                         f"{shown.stderr.decode().strip()}")
    path = into / "scheduler_at_ref.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("scheduler_at_ref", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases() -> list[Case]:
    demo = load_trace(DEMO_TRACE)
    hour = conversation_like_trace()
    longp = Trace.from_rows("long", [{"arrival_s": i * 0.5, "output_tokens": 200,
                                      "prompt_tokens": 6000 if i % 3 == 0 else 200}
                                     for i in range(300)])
    heur, l40s = guide_heuristic(DEMO), guide_heuristic(L40S).merged(
        max_num_seqs=256, max_num_batched_tokens=8192)
    out: list[Case] = [("hour defaults", vllm_defaults(DEMO), DEMO, hour, s) for s in (1, 4)]
    for s in (1, 64):
        out += [("demo heuristic", heur, DEMO, demo, s),
                ("demo 256/4096", heur.merged(max_num_seqs=256, max_num_batched_tokens=4096),
                 DEMO, demo, s),
                ("demo no cache", heur.merged(enable_prefix_caching=False), DEMO, demo, s)]
    out += [("demo 8 seqs", heur.merged(max_num_seqs=8), DEMO, demo, 64),
            ("long tight kv", l40s.merged(gpu_memory_utilization=0.5), L40S, longp, 4),
            ("long roomy kv", l40s.merged(gpu_memory_utilization=0.9), L40S, longp, 4),
            ("long budget 512", guide_heuristic(L40S).merged(max_num_seqs=64,
                                                             max_num_batched_tokens=512),
             L40S, longp, 1),
            ("long no chunking", l40s.merged(enable_chunked_prefill=False,
                                             max_num_batched_tokens=16384,
                                             gpu_memory_utilization=0.5), L40S, longp, 4),
            ("long prefill cap", l40s.merged(long_prefill_token_threshold=700,
                                             gpu_memory_utilization=0.5), L40S, longp, 4)]
    if (TRACES / "azure_llm_2023_code.csv").exists():
        out.append(("azure code", l40s.merged(gpu_memory_utilization=0.6), L40S,
                    load_trace(TRACES / "azure_llm_2023_code.csv"), 2))
    if (TRACES / "mooncake_synthetic.jsonl").exists():
        moon = load_trace(TRACES / "mooncake_synthetic.jsonl")
        out += [("mooncake fp8", vllm_defaults(H200X8).merged(kv_cache_dtype="fp8"), H200X8,
                 moon, s) for s in (0.5, 8)]
        # Long prompts on one L40S: prefix-cache eviction, and refusals past max_model_len.
        l40s_64k = L40S.model_copy(update={"max_model_len": 65536})
        out += [("mooncake l40s", guide_heuristic(l40s_64k).merged(gpu_memory_utilization=0.6),
                 l40s_64k, moon, s) for s in (1, 4)]
    return out


def replay(simulate: Callable[..., ReplayResult], backend: SimulatorBackend, trace: Trace,
           scale: float, skip: bool) -> ReplayResult:
    arrivals = trace.arrival_s / scale
    horizon = float(arrivals[-1]) + max(600.0, 4 * float(arrivals[-1]))  # as the backend's
    return simulate(backend.perf, arrivals, trace.prompt_tokens, trace.output_tokens,
                    trace.hash_ids, trace.hash_block_tokens, np.random.default_rng(0), horizon,
                    skip_decode_runs=skip)


def itl_distribution(r: ReplayResult) -> tuple[np.ndarray, np.ndarray]:
    values, inverse = np.unique(np.asarray(r.itl_s), return_inverse=True)
    return values, np.bincount(inverse.ravel(), weights=r.itl_weight, minlength=len(values))


def difference(a: ReplayResult, b: ReplayResult) -> str | None:
    """The first result field that differs, or None."""
    for name in RESULT_ARRAYS:
        if not np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True):
            return name
    if a.wall_s != b.wall_s:
        return "wall_s"
    if a.engine_stats != b.engine_stats:
        return "engine_stats"
    (va, wa), (vb, wb) = itl_distribution(a), itl_distribution(b)
    if not (np.array_equal(va, vb) and np.array_equal(wa, wb)):
        return "itl distribution"
    return "summary" if summarize(a) != summarize(b) else None


def check(old: ModuleType) -> int:
    differing = 0
    for name, config, dep, trace, scale in cases():
        backend = SimulatorBackend()
        backend.start(config, dep)
        for skip in (True, False):
            if not skip and len(trace) > 5000 and scale < 4:
                continue  # stepping a long trace at a low rate takes minutes
            diff = difference(replay(old.simulate, backend, trace, scale, skip),
                              replay(current.simulate, backend, trace, scale, skip))
            differing += diff is not None
            print(f"{name:18} x{scale:<4g} {'skip' if skip else 'step'}  "
                  f"{'equal' if diff is None else 'DIFFERS: ' + diff}", flush=True)
    print("all equal" if not differing else f"{differing} replays differ")
    return 1 if differing else 0


def timing(old: ModuleType, rounds: int) -> int:
    backend = SimulatorBackend()
    backend.start(vllm_defaults(DEMO), DEMO)
    hour = conversation_like_trace()
    print(f"load average before: {os.getloadavg()}")
    cpu: dict[str, list[float]] = {"ref": [], "worktree": []}
    for _ in range(rounds):
        for label, module in (("ref", old), ("worktree", current)):
            t0 = time.process_time()
            for scale in (1, 4):
                replay(module.simulate, backend, hour, scale, True)
            cpu[label].append(time.process_time() - t0)
    median: dict[str, Any] = {k: float(np.median(v)) for k, v in cpu.items()}
    for label, values in cpu.items():
        print(f"{label:9} CPU s (x1 + x4): median {median[label]:.3f} of "
              f"{[round(v, 3) for v in values]}")
    print(f"ratio ref / worktree: {median['ref'] / median['worktree']:.2f}")
    print(f"load average after: {os.getloadavg()}")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="HEAD", help="git revision to compare with (HEAD)")
    parser.add_argument("--time", type=int, metavar="N", help="time N interleaved rounds instead")
    args = parser.parse_args()
    if args.time is not None and args.time < 1:
        raise SystemExit("error: --time needs at least 1 round")
    with tempfile.TemporaryDirectory(prefix="sim-equivalence-") as tmp:
        old = scheduler_at(args.ref, Path(tmp))
        sys.exit(timing(old, args.time) if args.time else check(old))


if __name__ == "__main__":
    main()

"""How fast the simulator replays traffic: simulated seconds per wall-clock second, and the
gain of advancing decode runs in one go over stepping one engine step at a time, measured side
by side in one run on the same trace and config.

Usage: .venv/bin/python benchmarks/sim_speed.py [--trace FILE] [--repeat N]
Prints a table, then one JSON line with simulated_s, wall_s, speedup_vs_realtime and
speedup_vs_stepwise (totals over the rate multipliers below).
"""

from __future__ import annotations

import argparse
import json
import time

from rich.console import Console
from rich.table import Table

from autotune.baselines import vllm_defaults
from autotune.deployment import DEMO
from autotune.metrics import summarize
from autotune.traffic.trace import DEMO_TRACE, load_trace
from workers.sim.backend import SimulatorBackend

SCALES = (1.0, 8.0, 64.0)


def _time(skip: bool, trace, scale: float, repeat: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    backend = SimulatorBackend(skip_decode_runs=skip)
    backend.start(vllm_defaults(DEMO), DEMO)
    best, simulated = float("inf"), 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = backend.replay(trace, scale, 0)
        best = min(best, time.perf_counter() - t0)
        simulated = summarize(result).duration_s
    return simulated, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(DEMO_TRACE))
    parser.add_argument("--repeat", type=int, default=3, help="best of N timings")
    args = parser.parse_args()
    trace = load_trace(args.trace)
    table = Table(title=f"Simulator speed: {trace.name}, {len(trace)} requests, "
                        "DeepSeek-V4-Flash on 8xH200, vLLM defaults")
    for col in ("rate x", "simulated s", "wall s", "sim s / wall s", "stepwise wall s",
                "speedup vs stepwise"):
        table.add_column(col, justify="right")
    total_sim = total_wall = total_step = 0.0
    for scale in SCALES:
        simulated, wall = _time(True, trace, scale, args.repeat)
        _, stepwise = _time(False, trace, scale, args.repeat)
        total_sim, total_wall, total_step = total_sim + simulated, total_wall + wall, total_step + stepwise
        table.add_row(f"{scale:g}", f"{simulated:.1f}", f"{wall:.3f}", f"{simulated / wall:,.0f}",
                      f"{stepwise:.3f}", f"{stepwise / wall:.1f}")
    Console().print(table)
    print(json.dumps({"simulated_s": round(total_sim, 3), "wall_s": round(total_wall, 4),
                      "speedup_vs_realtime": round(total_sim / total_wall, 1),
                      "speedup_vs_stepwise": round(total_step / total_wall, 2)}))


if __name__ == "__main__":
    main()

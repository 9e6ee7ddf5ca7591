"""How fast each sampler reaches the best config: best capacity after 10, 20, 30 and 40 trials
for our default sampler (constrained TPE), random search and a vLLM auto-tune style grid, as a
percentage of the optimum an exhaustive grid finds over the same space, median over seeds, all
in one run.

The case issue 6 sets: the simulator, 8xH200 serving DeepSeek-V4-Flash (autotune.deployment.DEMO),
a chat-like trace (autotune.traffic.synthetic) and a document-like trace (long prompts, short
outputs, generated here deterministically), the SLO ttft_p99<=2s,tpot_p99<=50ms. The space is
benchmarks/search_efficiency.yaml (the chat space discretised so that the exhaustive grid fits in
minutes). Every trial is `autotune.capacity.run_trial` on the simulator, the objective the
controller uses, with the same interaction rules; a config's measurement is computed once and
shared by the exhaustive grid and every sampler run (the simulator is deterministic for a seed),
so the sampler runs cost only Optuna's time. A sampler run is the controller's loop in an
in-memory study: vLLM's defaults and the guide's heuristic enqueued first, rule breakers told
infeasible for free (not counted as trials), repeats reuse their measurement (not counted),
constraints set on every trial.

Usage: .venv/bin/python benchmarks/search_efficiency.py [--quick] [--seeds N]
Prints a table, then one JSON line with pct_of_optimum, gain_vs_default_pct and
gain_vs_heuristic_pct.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from rich.console import Console
from rich.table import Table

from autotune.baselines import BASELINES
from autotune.capacity import run_trial
from autotune.deployment import DEMO, DeploymentSpec
from autotune.engine_config import EngineConfig
from autotune.objective import is_feasible, outcome_constraints, rejected_constraints
from autotune.records import CapacitySearch, TrialSpec
from autotune.samplers import make_sampler
from autotune.slo import SLO, parse_slo
from autotune.space import deployment_space, space_params, violations
from autotune.traffic.synthetic import chat_trace_rows
from autotune.traffic.trace import Trace
from search_spaces import SearchSpace
from workers.sim.backend import SimulatorBackend

SPACE = str(Path(__file__).with_name("search_efficiency.yaml"))
SLO_TEXT = "ttft_p99<=2s,tpot_p99<=50ms"
BUDGETS = (10, 20, 30, 40)
SAMPLERS = ("tpe", "random", "grid")
SEARCH = CapacitySearch(bisect_steps=4)  # ~4% capacity resolution between ladder rungs


def chat_trace(requests: int) -> Trace:
    return Trace.from_rows("chat-like", chat_trace_rows(requests=requests, rate_rps=20.0, seed=0))


def document_trace(requests: int, seed: int = 0) -> Trace:
    """Long prompts (median 3000 tokens), short outputs (median 64), Poisson arrivals."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1 / 4.0, requests))
    prompt = np.clip(rng.lognormal(np.log(3000), 0.6, requests), 256, 12_000).astype(int)
    output = np.clip(rng.lognormal(np.log(64), 0.5, requests), 8, 512).astype(int)
    return Trace.from_rows("document-like", [
        {"arrival_s": float(a - arrival[0]), "prompt_tokens": int(p), "output_tokens": int(o)}
        for a, p, o in zip(arrival, prompt, output, strict=True)])


class Objective:
    """Capacity of a config on one trace (0 if infeasible), measured once per config."""

    def __init__(self, trace: Trace, slo: SLO, dep: DeploymentSpec) -> None:
        self.trace, self.slo, self.dep = trace, slo, dep
        self.cache: dict[tuple[tuple[str, Any], ...], tuple[float, dict[str, float]]] = {}
        self.wall_s = 0.0

    def __call__(self, config: EngineConfig) -> tuple[float, dict[str, float]]:
        key = tuple(sorted(config.explicit().items()))
        if key not in self.cache:
            t0 = time.monotonic()
            spec = TrialSpec(study_name="search-efficiency", trial_number=0, config=config,
                             deployment=self.dep, trace=self.trace, slo=self.slo, backend="sim",
                             search=SEARCH)
            outcome = run_trial(spec, SimulatorBackend())
            constraints = outcome_constraints(outcome, self.slo)
            value = outcome.capacity_output_tok_s if is_feasible(constraints) else 0.0
            self.cache[key] = (value, constraints)
            self.wall_s += time.monotonic() - t0
        return self.cache[key]


def base_config(role: str, dep: DeploymentSpec) -> EngineConfig:
    return BASELINES[role](dep) if role in BASELINES else EngineConfig(
        max_model_len=dep.max_model_len, tensor_parallel_size=dep.tensor_parallel_size)


def exhaustive(space: SearchSpace, objective: Objective) -> float:
    best = 0.0
    for point in space.grid_points():
        config = base_config("proposed", objective.dep).merged(**point)
        if violations(space, config, objective.dep):  # proposals: every rule blocks
            continue
        best = max(best, objective(config)[0])
    return best


def campaign(sampler: str, space: SearchSpace, objective: Objective, seed: int,
             trials: int) -> list[float]:
    """The controller's loop, in memory: best feasible capacity after each measured trial."""
    dep = objective.dep
    plan = make_sampler(sampler, space, seed=seed)
    study = optuna.create_study(direction="maximize", sampler=plan.sampler)
    for role in BASELINES:
        study.enqueue_trial(space_params(plan.space, base_config(role, dep), dep),
                            user_attrs={"role": role})
    best, curve, seen = 0.0, [], set()
    for _ in range(trials * 10):
        if len(curve) == trials:
            break
        trial = study.ask()
        role = trial.user_attrs.get("role", "proposed")
        config = base_config(role, dep).merged(**plan.space.suggest(trial))
        broken = [v for v in violations(space, config, dep)
                  if role == "proposed" or v.severity == "error"]
        if broken:
            constraints, value = rejected_constraints(objective.slo, len(broken)), 0.0
        else:
            value, constraints = objective(config)
        for name, c in constraints.items():
            trial.set_constraint(name, c)
        study.tell(trial, value)
        key = tuple(sorted(config.explicit().items()))
        if broken or key in seen:
            continue  # free: no engine ran
        seen.add(key)
        best = max(best, value)
        curve.append(best)
    return curve + [best] * (trials - len(curve))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, the chat trace only")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=160, help="requests per trace")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    seeds = [0] if args.quick else list(range(args.seeds))
    traces: list[Callable[[int], Trace]] = [chat_trace] if args.quick else [chat_trace,
                                                                            document_trace]
    slo, dep = parse_slo(SLO_TEXT), DEMO
    space = deployment_space(SPACE, dep)
    pct: dict[str, dict[str, list[float]]] = {s: {str(b): [] for b in BUDGETS} for s in SAMPLERS}
    gains_default, gains_heuristic, rows = [], [], []
    t0 = time.monotonic()
    for make_trace in traces:
        trace = make_trace(args.requests)
        objective = Objective(trace, slo, dep)
        optimum = exhaustive(space, objective)
        grid_points, exhaustive_s = len(objective.cache), objective.wall_s
        default = objective(base_config("vllm-default", dep))[0]
        heuristic = objective(base_config("guide-heuristic", dep))[0]
        gains_default.append(100 * (optimum / default - 1) if default else float("inf"))
        gains_heuristic.append(100 * (optimum / heuristic - 1) if heuristic else float("inf"))
        for sampler in SAMPLERS:
            for seed in seeds:
                curve = campaign(sampler, space, objective, seed, max(BUDGETS))
                for b in BUDGETS:
                    pct[sampler][str(b)].append(100 * curve[b - 1] / optimum)
        rows.append((trace.name, len(trace), grid_points, exhaustive_s, optimum, default,
                     heuristic))
    wall_s = time.monotonic() - t0
    console = Console()
    info = Table(title=f"Exhaustive grid: DeepSeek-V4-Flash on 8xH200, {SLO_TEXT}, space "
                       f"{space.name}")
    for col in ("trace", "requests", "configs", "grid s", "optimum tok/s", "vLLM default",
                "guide heuristic"):
        info.add_column(col, justify="right")
    for name, n, points, secs, opt, d, h in rows:
        info.add_row(name, str(n), str(points), f"{secs:.0f}", f"{opt:,.0f}", f"{d:,.0f}",
                     f"{h:,.0f}")
    console.print(info)
    median = {s: {b: round(statistics.median(v), 1) for b, v in by.items()}
              for s, by in pct.items()}
    table = Table(title=f"Best capacity as % of the optimum, median over {len(seeds)} seed(s) x "
                        f"{len(traces)} trace(s) (wall {wall_s:.0f} s)")
    table.add_column("sampler")
    for b in BUDGETS:
        table.add_column(f"{b} trials", justify="right")
    for s in SAMPLERS:
        table.add_row(s, *(f"{median[s][str(b)]:.1f}" for b in BUDGETS))
    console.print(table)
    print(json.dumps({"pct_of_optimum": median,
                      "gain_vs_default_pct": round(statistics.median(gains_default), 1),
                      "gain_vs_heuristic_pct": round(statistics.median(gains_heuristic), 1)}))


if __name__ == "__main__":
    main()

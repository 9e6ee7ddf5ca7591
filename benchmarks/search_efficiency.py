"""How fast each sampler reaches the best config: best capacity after 10, 20, 30 and 40 trials
for our default sampler (constrained TPE), random search, a vLLM auto-tune style grid and, where
torch is installed, Optuna's GP sampler, as a percentage of the optimum an exhaustive grid finds
over the same space, median over seeds, all in one run.

The case: the simulator, 8xH200 serving DeepSeek-V4-Flash (autotune.domain.deployment.DEMO), a
chat-like and a document-like trace with an SLO each (SLOS), the space
benchmarks/search_efficiency.yaml. Every trial is the controller's (run_trial, its rules, its
references first); measurements are cached in benchmarks/.cache/. The method in full and the
results: docs/benchmarks/search-efficiency.md.

Usage: .venv/bin/python benchmarks/search_efficiency.py [--quick] [--seeds N] [--first-seed K]
[--trace-seed N] [--jobs N] [--step-model roofline|measured]
Prints a table, then one JSON line with pct_of_optimum, gain_vs_default_pct,
gain_vs_heuristic_pct, gain_vs_recipe_pct and repeats_per_seed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from rich.console import Console
from rich.table import Table

from autotune.domain.deployment import DEMO, DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import CapacitySearch
from autotune.domain.slo import parse_slo
from autotune.domain.vllm_defaults import deployment_args
from autotune.measure.capacity import run_trial
from autotune.measure.trial_spec import TrialSpec
from autotune.search.baselines import baseline_configs
from autotune.search.objective import (
    capacity_attrs,
    is_feasible,
    outcome_constraints,
    rejected_constraints,
)
from autotune.search.samplers import make_sampler
from autotune.search.spaces import SearchSpace
from autotune.search.spaces.deployment import (
    config_for,
    deployment_space,
    space_params,
)
from autotune.search.spaces.violations import violations
from autotune.traffic.synthetic import chat_trace_rows
from autotune.traffic.trace import Trace
from autotune.workers.sim.backend import SimulatorBackend

SPACE = str(Path(__file__).with_name("search_efficiency.yaml"))
# Per trace. Chat is latency-sensitive (the chat tier): at a 50 ms TPOT ceiling only raw
# throughput binds on 8xH200 and vLLM's throughput-oriented defaults are near the optimum. For
# documents (long prompts, short answers) a 20 ms ceiling makes every config prefill-stall-bound
# and the defaults again near the optimum; 50 ms leaves the step budget and chunking to tune.
SLOS = {"chat-like": "ttft_p99<=2s,tpot_p99<=20ms", "document-like": "ttft_p99<=2s,tpot_p99<=50ms"}
BUDGETS = (10, 20, 30, 40)
# GP (Optuna's GPSampler) runs on PyTorch, an optional extra: compared where it is installed.
SAMPLERS = ("tpe", "random", "grid") + (("gp",) if importlib.util.find_spec("torch") else ())
# 10 s of offered traffic per replay (5x the TTFT ceiling: an overload shows as a growing queue),
# whatever the multiplier; 6 bisection steps: ~1.1% resolution.
SEARCH = CapacitySearch(bisect_steps=6, window_s=10.0)
CACHE_DIR = Path(__file__).with_name(".cache") / "search_efficiency"
CACHE_FORMAT = 2  # 2: rows hold at_capacity
CHAT_REQUESTS, DOCUMENT_REQUESTS = 6000, 3000  # ~11 and ~13 minutes at their recorded rates


def chat_trace(requests: int = CHAT_REQUESTS, seed: int = 0) -> Trace:
    return Trace.from_rows("chat-like", chat_trace_rows(requests=requests, rate_rps=10.0,
                                                        seed=seed))


def document_trace(requests: int = DOCUMENT_REQUESTS, seed: int = 0) -> Trace:
    """Long prompts (median 3000 tokens), short outputs (median 64), Poisson arrivals."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1 / 4.0, requests))
    prompt = np.clip(rng.lognormal(np.log(3000), 0.6, requests), 256, 12_000).astype(int)
    output = np.clip(rng.lognormal(np.log(64), 0.5, requests), 8, 512).astype(int)
    return Trace.from_rows("document-like", [
        {"arrival_s": float(a - arrival[0]), "prompt_tokens": int(p), "output_tokens": int(o)}
        for a, p, o in zip(arrival, prompt, output, strict=True)])


def _sim_digest() -> str:
    """The simulator's source and profiles: a cached measurement is only as good as they are."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for path in sorted([*(root / "workers" / "sim").rglob("*.py"),
                        *(root / "workers" / "sim").rglob("*.yaml"),
                        root / "autotune" / "measure" / "capacity.py",
                        root / "autotune" / "measure" / "metrics.py"]):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


Key = tuple[tuple[str, Any], ...]
# Capacity (0: infeasible), constraints, censored, and what the line sweep reads of the replay
# at capacity: the share of each SLO ceiling used and the peak requests in flight (trial user
# attributes from search.objective.capacity_attrs, as the recorder sets them).
Measured = tuple[float, dict[str, float], bool, dict[str, Any]]


def measure(trace: Trace, slo_text: str, dep: DeploymentSpec, config: EngineConfig,
            step_model: str = "roofline") -> Measured:
    slo = parse_slo(slo_text)
    spec = TrialSpec(study_name="search-efficiency", trial_number=0, config=config,
                     deployment=dep, trace=trace, slo=slo, backend="sim", search=SEARCH)
    outcome = run_trial(spec, SimulatorBackend(step_model=step_model))
    constraints = outcome_constraints(outcome, slo)
    value = outcome.capacity_output_tok_s if is_feasible(constraints) else 0.0
    top = SEARCH.ladder(trace.duration_s)[-1]
    censored = value > 0 and outcome.capacity_rate_scale >= top  # never failed: a lower bound
    return value, constraints, censored, capacity_attrs(outcome, slo)


class Objective:
    """Capacity of a config on one trace (0 if infeasible), measured once per config."""

    def __init__(self, trace: Trace, slo_text: str, dep: DeploymentSpec, jobs: int = 1,
                 step_model: str = "roofline") -> None:
        self.trace, self.slo_text, self.slo, self.dep, self.jobs = (
            trace, slo_text, parse_slo(slo_text), dep, jobs)
        self.step_model = step_model
        self.cache: dict[Key, Measured] = {}
        self.wall_s = 0.0
        self.measured = 0  # measurements made in this run (not read from disk)
        # The roofline's key is as it was before the option (caches of earlier runs stay valid).
        keyed = [CACHE_FORMAT, trace.digest, slo_text, repr(SEARCH), dep.name, _sim_digest()]
        if step_model != "roofline":
            keyed.append(step_model)
        digest = hashlib.sha256(json.dumps(keyed).encode()).hexdigest()[:16]
        self.path = CACHE_DIR / f"{trace.name}-{digest}.json"
        if self.path.exists():
            for row in json.loads(self.path.read_text()):
                self.cache[tuple((k, v) for k, v in row["config"])] = (
                    row["value"], row["constraints"], row["censored"], row["at_capacity"])

    @staticmethod
    def key(config: EngineConfig) -> Key:
        return tuple(sorted(config.explicit().items()))

    def prefetch(self, configs: list[EngineConfig]) -> None:
        """Measure the configs not known yet, in `jobs` processes."""
        todo = list({self.key(c): c for c in configs if self.key(c) not in self.cache}.values())
        if not todo:
            return
        t0 = time.monotonic()
        if self.jobs > 1:
            with ProcessPoolExecutor(self.jobs) as pool:
                results = list(pool.map(measure, [self.trace] * len(todo),
                                        [self.slo_text] * len(todo), [self.dep] * len(todo),
                                        todo, [self.step_model] * len(todo), chunksize=1))
        else:
            results = [measure(self.trace, self.slo_text, self.dep, c, self.step_model)
                       for c in todo]
        for config, result in zip(todo, results, strict=True):
            self.cache[self.key(config)] = result
        self.measured += len(todo)
        self.wall_s += time.monotonic() - t0
        self.save()

    def save(self) -> None:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        rows = [{"config": [list(kv) for kv in k], "value": v, "constraints": c, "censored": z,
                 "at_capacity": u} for k, (v, c, z, u) in self.cache.items()]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rows))
        tmp.replace(self.path)

    def __call__(self, config: EngineConfig) -> tuple[float, dict[str, float], dict[str, Any]]:
        """Capacity (0: infeasible), constraints and the user attributes read at capacity."""
        if self.key(config) not in self.cache:
            self.prefetch([config])
        value, constraints, _, use = self.cache[self.key(config)]
        return value, constraints, use


def base_config(role: str, dep: DeploymentSpec) -> EngineConfig:
    """A baseline's config, else (a proposal's base) the deployment's own arguments."""
    return baseline_configs(dep).get(role) or EngineConfig(**deployment_args(dep))


def exhaustive(space: SearchSpace, objective: Objective) -> tuple[float, EngineConfig, list[float]]:
    """The optimum over every grid point the rules allow, its config, and every capacity."""
    configs = [config_for(space, base_config("proposed", objective.dep), point)
               for point in space.grid_points()]
    configs = [c for c in configs if not violations(space, c, objective.dep)]  # rules block
    objective.prefetch(configs)
    values = [objective(c)[0] for c in configs]
    best = max(range(len(configs)), key=lambda i: values[i])
    return values[best], configs[best], values


def campaign(sampler: str, space: SearchSpace, objective: Objective, seed: int,
             trials: int) -> tuple[list[float], int]:
    """The controller's loop, in memory: best feasible capacity after each measured trial, and
    how many proposals repeated a measured config (free: no engine, no budget)."""
    dep = objective.dep
    plan = make_sampler(sampler, space, seed=seed)
    study = optuna.create_study(direction="maximize", sampler=plan.sampler)
    for role, config in baseline_configs(dep).items():
        study.enqueue_trial(space_params(plan.space, config, dep), user_attrs={"role": role})
    best, seen, repeats = 0.0, set(), 0
    curve: list[float] = []
    for _ in range(trials * 10):
        if len(curve) == trials:
            break
        trial = study.ask()
        role = trial.user_attrs.get("role", "proposed")
        config = config_for(space, base_config(role, dep), plan.space.suggest(trial))
        broken = [v for v in violations(space, config, dep)
                  if role == "proposed" or v.severity == "error"]
        if broken:
            constraints, value = rejected_constraints(objective.slo, len(broken)), 0.0
        else:
            value, constraints, at_capacity = objective(config)
            for key, attr in at_capacity.items():
                trial.set_user_attr(key, attr)  # as the recorder sets them
        for name, c in constraints.items():
            trial.set_constraint(name, c)
        study.tell(trial, value)
        key = config.key()
        if key in seen and not broken:
            repeats += 1
        if broken or key in seen:
            continue  # free: no engine ran
        seen.add(key)
        best = max(best, value)
        curve.append(best)
    return curve + [best] * (trials - len(curve)), repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="one seed, the document trace only (the cheaper grid)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="seeds FIRST..FIRST+N-1: held-out seeds judge a sampler change")
    parser.add_argument("--trace-seed", type=int, default=0,
                        help="draw the traces with this seed: a held-out trace judges a "
                             "sampler change made while looking at seed 0's")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes measuring the exhaustive grid")
    parser.add_argument("--step-model", choices=("roofline", "measured"), default="roofline",
                        help="the simulator's GPU step model: roofline (default: the model the "
                             "sampler's constants were chosen on, the figures in docs/benchmarks"
                             "/search-efficiency.md) or measured (campaigns' default)")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    seeds = [args.first_seed] if args.quick else list(range(args.first_seed,
                                                           args.first_seed + args.seeds))
    traces: list[Callable[..., Trace]] = ([document_trace] if args.quick
                                         else [chat_trace, document_trace])
    dep = DEMO
    space = deployment_space(SPACE, dep)
    # Per sampler and budget: each trace's median over seeds.
    pct: dict[str, dict[str, list[float]]] = {s: {str(b): [] for b in BUDGETS} for s in SAMPLERS}
    # Per trace and sampler: the measured trials each seed needed to reach 98% of the optimum
    # (None: not within the largest budget), a figure that still separates samplers when the
    # medians at the budgets saturate.
    to_98: dict[str, dict[str, list[int | None]]] = {}
    by_trace: dict[str, dict[str, dict[str, float]]] = {}
    gains_default, gains_heuristic, gains_recipe, rows, optima = [], [], [], [], {}
    repeats: dict[str, dict[str, list[int]]] = {}  # proposals that repeated a measured config
    t0 = time.monotonic()
    for make_trace in traces:
        trace = make_trace(seed=args.trace_seed)
        objective = Objective(trace, SLOS[trace.name], dep, jobs=args.jobs,
                              step_model=args.step_model)
        optimum, best_config, values = exhaustive(space, objective)
        default = objective(base_config("vllm-default", dep))[0]
        heuristic = objective(base_config("guide-heuristic", dep))[0]
        recipe = objective(base_config("vllm-recipe", dep))[0]
        gains_recipe.append(100 * (optimum / recipe - 1) if recipe else float("inf"))
        gains_default.append(100 * (optimum / default - 1) if default else float("inf"))
        gains_heuristic.append(100 * (optimum / heuristic - 1) if heuristic else float("inf"))
        t1 = time.monotonic()
        to_98[trace.name], by_trace[trace.name] = {}, {}
        for sampler in SAMPLERS:
            here: dict[str, list[float]] = {str(b): [] for b in BUDGETS}
            to_98[trace.name][sampler] = []
            for seed in seeds:
                curve, repeated = campaign(sampler, space, objective, seed, max(BUDGETS))
                repeats.setdefault(trace.name, {}).setdefault(sampler, []).append(repeated)
                for b in BUDGETS:
                    here[str(b)].append(100 * curve[b - 1] / optimum)
                to_98[trace.name][sampler].append(
                    next((i + 1 for i, v in enumerate(curve) if v >= 0.98 * optimum), None))
            by_trace[trace.name][sampler] = {b: round(statistics.median(v), 1)
                                             for b, v in here.items()}
            for budget, v in here.items():
                pct[sampler][budget].append(statistics.median(v))
        near = {f: sum(v >= f * optimum for v in values) for f in (0.98, 0.95)}
        censored = sum(z for _, _, z, _ in objective.cache.values())
        rows.append((trace.name, len(trace), trace.duration_s, len(values), near,
                     sum(v == 0 for v in values), censored, objective.measured,
                     objective.wall_s, time.monotonic() - t1, optimum, default, heuristic))
        optima[trace.name] = {"capacity_output_tok_s": round(optimum, 1),
                              "config": space_params(space, best_config, dep)}
    wall_s = time.monotonic() - t0
    console = Console(width=200)
    info = Table(title="Exhaustive grid: DeepSeek-V4-Flash on 8xH200, space "
                       f"{space.name}, capacity on {SEARCH.window_s:.0f} s windows")
    for col in ("trace", "SLO", "requests", "span s", "configs", ">=98% opt", ">=95% opt", "infeasible",
                "censored", "measured", "grid s", "samplers s", "optimum tok/s", "vLLM default",
                "guide heuristic"):
        info.add_column(col, justify="right", no_wrap=True)
    for name, n, span, points, near, zero, cens, made, secs, ssecs, opt, d, h in rows:
        info.add_row(name, SLOS[name], str(n), f"{span:.0f}", str(points), str(near[0.98]), str(near[0.95]),
                     str(zero), str(cens), str(made), f"{secs:.0f}", f"{ssecs:.0f}",
                     f"{opt:,.0f}", f"{d:,.0f}", f"{h:,.0f}")
    console.print(info)
    median = {s: {b: round(statistics.mean(v), 1) for b, v in by.items()}
              for s, by in pct.items()}
    table = Table(title=f"Best capacity as % of the optimum: median over {len(seeds)} seed(s), "
                        f"mean over {len(traces)} trace(s) (wall {wall_s:.0f} s)")
    table.add_column("sampler")
    for b in BUDGETS:
        table.add_column(f"{b} trials", justify="right")
    for s in SAMPLERS:
        table.add_row(s, *(f"{median[s][str(b)]:.1f}" for b in BUDGETS))
    console.print(table)
    detail = Table(title="Per trace: % of the optimum (median over seeds), and the trials each "
                         "seed needed to reach 98% of it (- : not within "
                         f"{max(BUDGETS)})")
    for col in ("trace", "sampler", *(f"{b}" for b in BUDGETS), "trials to 98% per seed",
                f"repeats in {max(BUDGETS)} per seed"):
        detail.add_column(col, justify="right")
    for name, per in by_trace.items():
        for s in SAMPLERS:
            detail.add_row(name, s, *(f"{per[s][str(b)]:.1f}" for b in BUDGETS),
                           " ".join("-" if n is None else str(n) for n in to_98[name][s]),
                           " ".join(map(str, repeats[name][s])))
    console.print(detail)
    print(json.dumps({"pct_of_optimum": median,
                      "gain_vs_default_pct": round(statistics.median(gains_default), 1),
                      "gain_vs_heuristic_pct": round(statistics.median(gains_heuristic), 1),
                      "gain_vs_recipe_pct": round(statistics.median(gains_recipe), 1),
                      "repeats_per_seed": repeats,
                      "pct_of_optimum_by_trace": by_trace, "trials_to_98pct": to_98,
                      "optimum": optima, "slo": SLOS, "window_s": SEARCH.window_s,
                      "bisect_steps": SEARCH.bisect_steps, "seeds": len(seeds),
                      "step_model": args.step_model, "wall_s": round(wall_s, 1)}))


if __name__ == "__main__":
    main()

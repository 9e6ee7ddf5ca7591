"""The simulator judged on real GPU serving: every vLLM aggregated row of aiconfigurator-core's
silicon sample (benchmarks/data/, 1,328 measurements on H100, H200, B200 and B300) whose model
and GPU the catalogue has, simulated at the load it was measured under, beside aiconfigurator's
own static estimate of the same rows (gpu_fidelity_aic.py, extra `autotune[aiconfigurator]`).
The rows are the judge: nothing is fitted to them (benchmarks/data/README.md).

Each row runs as measured: its model, precision and layout, its vLLM release's default engine
arguments, and aiperf's closed loop of fixed-length requests (gpu_fidelity_rows.py reads the
columns). The method in detail and every run: docs/benchmarks/gpu-fidelity.md.

Usage: PYTHONPATH=. .venv/bin/python benchmarks/gpu_fidelity.py [--jobs N] [--limit N]
           [--models SUBSTR,...] [--no-aic] [--rounds W,M] [--stat mean|median]
           [--clients spread|together] [--first-round burst|steady]
           [--engine-args defaults|today|harness] [--no-band] [--rows-out FILE]
Prints the skipped rows by reason, error tables per model and per model, system and precision,
then one JSON line: {"rows": N, "models": M, "sim": {...}, "aic_static": {...}, ...}.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from autotune.domain.catalogue import Model
from autotune.domain.deployment import DeploymentSpec
from autotune.errors import ConfigError, EngineStartError
from autotune.search.baselines import vllm_defaults
from autotune.workers.sim.closed_loop import spread_starts
from autotune.workers.sim.engine import replay_closed_loop, start_perf
from autotune.workers.sim.perf import EngineShape
from autotune.workers.sim.profile import find_profile
from autotune.workers.sim.shape import engine_shape
from autotune.workers.sim.step_table import ROOFLINE, select_step_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_fidelity_aic as aic
from gpu_fidelity_rows import MatchedRow, load_rows, match_rows

WARMUP_ROUNDS, MEASURED_ROUNDS = 2, 4
# How the rows' harness profiles (generator/config/backend_templates/benchmark/bench_run.sh.j2):
# aiperf --concurrency N --warmup-request-count 2N --num-requests N x BENCH_MULTI_ROUND (20).
# aiperf runs its phases one after the other, each waiting until its last request has returned
# (aiperf 0.3.0 timing/credit_issuing_strategy.py::CreditIssuingStrategy._execute_phases;
# 0.13.0 timing/phase_orchestrator.py, `seamless` off by default), and issues a concurrency
# phase's N credits at once (CONCURRENCY_BURST). So the 20 profiled rounds begin with N prompts
# at once on an idle engine: that round is simulated as such (--first-round burst) and weighs
# 1/20 of the row's mean; the other 19 are the clients' steady state (--clients).
PROFILED_ROUNDS = 20
# max_model_len as aiconfigurator's benchmark harness sets it for agg vLLM workers
# (generator/rule_plugin/benchmark/vllm.rule: max_seq_len = isl + osl + 1500, rendered as
# --max-model-len): vLLM's default, the model's whole context, leaves no room for the KV cache
# of MiniMax-M2.5 (196,608 tokens) on 10 of the rows' layouts, which all started for real.
HARNESS_CONTEXT_MARGIN = 1500
KEYS = ("tpot_ape_median", "tpot_ape_p90", "ttft_ape_median", "ttft_ape_p90")

Estimate = tuple[float, float] | str  # (TTFT ms, TPOT ms), or why there is none


@dataclass(frozen=True)
class Method:
    """How each row is simulated: the command line's choices."""

    rounds: tuple[int, int] = (WARMUP_ROUNDS, MEASURED_ROUNDS)  # warm-up, measured (steady)
    stat: str = "mean"  # or "median": over the measured requests
    seed: int = 0
    engine_args: str = "defaults"  # the row release's defaults, "today" or "harness"
    clients: str = "spread"  # the steady state's client start state, or "together"
    first_round: str = "burst"  # the profiled phase's burst round, or "steady" to leave it out


@dataclass
class RowResult:
    """One judge row: measured, simulated (per step model) and aiconfigurator's figures."""

    matched: MatchedRow
    sim: Estimate = "not run"
    step_model: str = ROOFLINE
    roofline: Estimate | None = None  # the roofline too, where the measured table ran
    other_starts: Estimate | None = None  # the same step model, the other client start state
    aic: Estimate = "not run"
    aic_unfitted: Estimate = "not run"  # without its two TTFT terms fitted to this corpus
    sim_s: float = 0.0
    notes: list[str] = field(default_factory=list)


def _per_request_ms(result: object, skip: int) -> tuple[np.ndarray, np.ndarray] | str:
    """TTFT and TPOT in ms of each request after the first `skip` (TPOT of those with more
    than one output token), or why there are none."""
    ttft_s = np.asarray(result.ttft_s)[skip:]  # type: ignore[attr-defined]
    e2e_s = np.asarray(result.e2e_s)[skip:]  # type: ignore[attr-defined]
    out = np.asarray(result.output_tokens)[skip:]  # type: ignore[attr-defined]
    failed = np.asarray(result.failed)[skip:]  # type: ignore[attr-defined]
    if failed.any():
        return f"sim: {int(failed.sum())} of {len(failed)} measured requests failed"
    tpot_s = (e2e_s - ttft_s)[out > 1] / (out[out > 1] - 1)
    return ttft_s * 1e3, tpot_s * 1e3


def _reduce(parts: list[tuple[np.ndarray, float]], stat: str) -> float:
    """The mean (or median) over requests drawn from parts of given weight: each part's
    requests stand for that share of all the measured ones."""
    parts = [(v, w) for v, w in parts if len(v)]
    if not parts:
        return float("nan")
    values = np.concatenate([v for v, _ in parts])
    weights = np.concatenate([np.full(len(v), w / len(v)) for v, w in parts])
    if stat == "mean":
        return float(np.average(values, weights=weights))
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cumulative, cumulative[-1] / 2)])


def _latencies_ms(parts: list[tuple[object, int, float]], stat: str) -> Estimate:
    """Mean (or median) TTFT and TPOT in ms over the requests of several simulated runs, each
    (result, requests to skip, its weight among the measured requests)."""
    ttfts, tpots = [], []
    for result, skip, weight in parts:
        got = _per_request_ms(result, skip)
        if isinstance(got, str):
            return got
        ttfts.append((got[0], weight))
        tpots.append((got[1], weight))
    return _reduce(ttfts, stat), _reduce(tpots, stat)


class ServedDeployment(DeploymentSpec):
    """The row's deployment with its model served at the row's precision rather than as the
    checkpoint ships (FP8 or NVFP4 serving of a BF16 checkpoint, NVIDIA's NVFP4 MiniMax-M2.5):
    whatever reads `model_info` (vLLM's defaults, the rules vLLM enforces, the simulator's
    memory and step times) sees the weights that ran, e.g. no block-FP8 shard rule on NVFP4
    experts."""

    served: Model

    @property
    def model_info(self) -> Model:
        return self.served


# The first vLLM release that schedules asynchronously by default, read in each release's
# source (sdists from PyPI): 0.11.2, 0.12.0 and 0.13.0 declare `async_scheduling: bool = False`
# (vllm/config/scheduler.py::SchedulerConfig) and their engine arguments pass that on; 0.14.0
# declares None, which VllmConfig.__post_init__ (vllm/config/vllm.py) turns on where nothing
# is incompatible. aiconfigurator's harness never passes --async-scheduling
# (generator/config/backend_templates/vllm/cli_args*.j2), so its rows of older releases ran
# synchronously: the CPU's step time adds to the GPU's, and an arrival joins the next step.
ASYNC_SCHEDULING_DEFAULT_SINCE = (0, 14, 0)


def release(version: str) -> tuple[int, ...] | None:
    """A row's vLLM release as numbers ("0.12.0" -> (0, 12, 0)); None where the row names none
    or a nightly build, whose defaults are taken to be today's."""
    parts = version.strip().split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def release_defaults(version: str) -> dict[str, object]:
    """The engine arguments whose default in the row's vLLM release differs from today's."""
    ran = release(version)
    if ran is not None and ran < ASYNC_SCHEDULING_DEFAULT_SINCE:
        return {"async_scheduling": False}
    return {}


def row_engine(m: MatchedRow, engine_args: str = "defaults"
               ) -> tuple[ServedDeployment, EngineShape]:
    """The row's deployment (its model at its served precision) and engine shape: vLLM's
    defaults for its GPU and layout as the row's vLLM release had them (`release_defaults`),
    today's defaults ("today"), or the benchmark harness's arguments on the release's defaults
    ("harness"). Raises ConfigError, EngineStartError or ValidationError where the simulator
    refuses it."""
    r = m.row
    dep = ServedDeployment(name="gpu-fidelity", model=m.catalogue_model, gpu=m.gpu.name,
                           gpu_count=r.tp * r.dp, tensor_parallel_size=r.tp,
                           max_model_len=r.isl + r.osl + HARNESS_CONTEXT_MARGIN, served=m.model)
    config = vllm_defaults(dep)
    if engine_args != "today" and (older := release_defaults(r.backend_version)):
        config = config.merged(**older)
    if m.ep and not config.enable_expert_parallel:  # TPn+EP: one rank, experts whole
        config = config.merged(enable_expert_parallel=True)
    if engine_args == "harness":
        # aiconfigurator's benchmark harness for agg vLLM workers (generator/rule_plugin/
        # benchmark/vllm.rule): max_batch_size = the row's batch per attention-DP rank,
        # max_num_tokens = batch + ISL + 1500; whether the rows ran with it is not recorded.
        batch = max(1, r.concurrency // r.dp)
        config = config.merged(max_num_seqs=batch,
                               max_num_batched_tokens=batch + r.isl + HARNESS_CONTEXT_MARGIN)
    return dep, engine_shape(config, dep)


def simulate(m: MatchedRow, table_wanted: bool, method: Method = Method()
             ) -> tuple[Estimate, str]:
    """The row simulated in closed loop; the step model that ran ("measured" or "roofline")."""
    r = m.row
    try:
        dep, shape = row_engine(m, method.engine_args)
    except (ConfigError, EngineStartError, ValidationError) as exc:
        return f"sim: {str(exc).splitlines()[0]}", ROOFLINE
    chosen = select_step_model(m.gpu.name, m.catalogue_model, m.layout, m.precision,
                               shape.kv_cache_dtype)
    table = chosen.table if table_wanted else None
    profile = find_profile(m.gpu.name, m.catalogue_model, "gpu", None)  # bundled: fitted to tables
    try:
        perf = start_perf(shape, dep, profile, table=table)
    except EngineStartError as exc:
        return f"sim: {str(exc).splitlines()[0]}", chosen.name
    warmup, measured = method.rounds
    n = (warmup + measured) * r.concurrency
    isl, osl = np.full(n, r.isl), np.full(n, r.osl)
    starts = spread_starts(perf, isl, osl, r.concurrency) if method.clients == "spread" else None
    steady = replay_closed_loop(perf, isl, osl, r.concurrency, method.seed, start_s=starts)
    parts: list[tuple[object, int, float]] = [(steady, warmup * r.concurrency, 1.0)]
    if method.first_round == "burst":
        # The profiled phase's first round: its N prompts at once on the idle engine.
        clients = r.concurrency
        burst = replay_closed_loop(perf, isl[:clients], osl[:clients], clients, method.seed,
                                   start_s=None)
        parts = [(burst, 0, 1 / PROFILED_ROUNDS),
                 (steady, warmup * r.concurrency, 1 - 1 / PROFILED_ROUNDS)]
    return _latencies_ms(parts, method.stat), ("measured" if table else ROOFLINE)


def judge_row(m: MatchedRow, with_aic: bool, method: Method = Method(),
              band: bool = True) -> RowResult:
    """Everything for one row; runs in a worker process."""
    logging.disable(logging.WARNING)  # the package logs its data fallbacks per call
    out = RowResult(m)
    t0 = time.perf_counter()
    out.sim, out.step_model = simulate(m, True, method)
    if out.step_model == "measured":
        out.roofline, _ = simulate(m, False, method)
    if band and isinstance(out.sim, tuple):
        other = "together" if method.clients == "spread" else "spread"
        out.other_starts, _ = simulate(m, True, replace(method, clients=other))
    out.sim_s = time.perf_counter() - t0
    if with_aic:
        out.aic = aic.estimate(m.row)
        out.aic_unfitted = aic.estimate(m.row, corpus_terms=False)
    return out


def ape(estimate: tuple[float, float], ttft_ms: float, tpot_ms: float) -> tuple[float, float]:
    """Signed percentage errors (TTFT, TPOT) of an estimate against the measured row."""
    return (100 * (estimate[0] - ttft_ms) / ttft_ms, 100 * (estimate[1] - tpot_ms) / tpot_ms)


def error_stats(errors: list[tuple[float, float]]) -> dict[str, float]:
    """APE median and P90 of TTFT and TPOT, and the signed median of each (the bias)."""
    if not errors:
        return {}
    e = np.asarray(errors)
    a = np.abs(e)
    return {"tpot_ape_median": float(np.median(a[:, 1])),
            "tpot_ape_p90": float(np.percentile(a[:, 1], 90)),
            "ttft_ape_median": float(np.median(a[:, 0])),
            "ttft_ape_p90": float(np.percentile(a[:, 0], 90)),
            "tpot_bias_median": float(np.median(e[:, 1])),
            "ttft_bias_median": float(np.median(e[:, 0]))}


def _errors(results: Iterable[RowResult], which: str) -> list[tuple[float, float]]:
    out = []
    for r in results:
        est = getattr(r, which)
        if isinstance(est, tuple):
            out.append(ape(est, r.matched.row.ttft_ms, r.matched.row.tpot_ms))
    return out


def band_stats(results: Iterable[RowResult]) -> dict[str, float]:
    """Where the measured TTFT and TPOT fall against the band the simulator's two client start
    states span (phase-locked and spread; a real engine sits between them, docs/benchmarks/
    gpu-fidelity.md): the share of rows below, within and above it. A diagnostic beside the
    errors, not a target: a row in the band says the step times can explain it and the
    clients' clumping decides where in the band it lies."""
    counts: Counter[str] = Counter()
    rows = 0
    for r in results:
        if not (isinstance(r.sim, tuple) and isinstance(r.other_starts, tuple)):
            continue
        rows += 1
        for i, metric in enumerate(("ttft", "tpot")):
            measured = (r.matched.row.ttft_ms, r.matched.row.tpot_ms)[i]
            lo, hi = sorted((r.sim[i], r.other_starts[i]))
            where = "below" if measured < lo else "above" if measured > hi else "in"
            counts[f"{metric}_{where}"] += 1
    if not rows:
        return {}
    return {"rows": rows, **{f"{m}_{w}_band": round(100 * counts[f"{m}_{w}"] / rows, 1)
                             for m in ("ttft", "tpot") for w in ("below", "in", "above")}}


def _cell(stats: dict[str, float], key: str) -> str:
    return f"{stats[key]:.1f}" if key in stats else "-"


def _table(title: str, groups: dict[str, list[RowResult]], aic_present: bool) -> Table:
    t = Table(title=title)
    t.add_column("group")
    t.add_column("rows", justify="right")
    t.add_column("step model")
    whos = ("sim", *(("aic", "aic_unfitted") if aic_present else ()))
    for who in whos:
        t.add_column(f"{who} rows", justify="right")
        for metric in ("TTFT", "TPOT"):
            t.add_column(f"{who} {metric} APE med / P90 / bias %", justify="right")
    for name, rows in groups.items():
        used = Counter(r.step_model for r in rows if isinstance(r.sim, tuple))
        cells = [name, str(len(rows)), ", ".join(f"{k} {v}" for k, v in sorted(used.items()))]
        for who in whos:
            errs = _errors(rows, who)
            s = error_stats(errs)
            cells.append(str(len(errs)))
            for metric in ("ttft", "tpot"):
                cells.append(f"{_cell(s, f'{metric}_ape_median')} / {_cell(s, f'{metric}_ape_p90')}"
                             f" / {_cell(s, f'{metric}_bias_median')}")
        t.add_row(*cells)
    return t


def _four(stats: dict[str, float]) -> dict[str, float | None]:
    return {k: (round(stats[k], 2) if k in stats else None) for k in KEYS}


def _ms(estimate: Estimate | None) -> list[float] | None:
    return [round(v, 3) for v in estimate] if isinstance(estimate, tuple) else None


def write_rows(path: Path, results: Iterable[RowResult]) -> None:
    """One JSON line per row: what ran and what each estimator said (TTFT, TPOT ms)."""
    with path.open("w") as f:
        for r in results:
            row = r.matched.row
            f.write(json.dumps({
                "id": row.id, "model": row.model_path, "system": row.system,
                "precision": r.matched.precision, "layout": r.matched.layout,
                "checkpoint": r.matched.checkpoint or row.model_path,
                "kv_cache_dtype": r.matched.model.checkpoint_kv_cache_dtype or "auto",
                "isl": row.isl, "osl": row.osl, "concurrency": row.concurrency,
                "measured": [row.ttft_ms, row.tpot_ms], "step_model": r.step_model,
                "sim": _ms(r.sim), "sim_other_starts": _ms(r.other_starts),
                "roofline": _ms(r.roofline), "aic_static": _ms(r.aic),
                "aic_unfitted": _ms(r.aic_unfitted)}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: the CPU count)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N matched rows")
    parser.add_argument("--models", default="",
                        help="comma-separated substrings of model_path to keep")
    parser.add_argument("--no-aic", action="store_true", help="skip aiconfigurator's estimate")
    parser.add_argument("--rounds", default=f"{WARMUP_ROUNDS},{MEASURED_ROUNDS}",
                        help="warm-up and measured rounds of `concurrency` requests each")
    parser.add_argument("--stat", choices=("mean", "median"), default="mean")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine-args", choices=("defaults", "today", "harness"),
                        default="defaults",
                        help="vLLM's defaults for the GPU as the row's vLLM release had them "
                             "(the issue's reading of the rows), today's defaults, or "
                             "aiconfigurator's benchmark harness's max_num_seqs and "
                             "max_num_batched_tokens")
    parser.add_argument("--clients", choices=("spread", "together"), default="spread",
                        help="clients' first sends spread over one request's service time "
                             "(the desynchronised steady state; spread_starts), or all at once "
                             "(phase-locked)")
    parser.add_argument("--first-round", choices=("burst", "steady"), default="burst",
                        help="the profiled phase's first round as aiperf sends it, N prompts at "
                             "once on an idle engine (weight 1/20, PROFILED_ROUNDS), or every "
                             "measured round in the clients' steady state")
    parser.add_argument("--no-band", action="store_true",
                        help="skip the other client start state (band_stats)")
    parser.add_argument("--rows-out", type=Path, default=None,
                        help="also write one JSON line per simulated row (its load and layout, "
                             "measured and estimated TTFT and TPOT in ms), to study the errors")
    args = parser.parse_args()
    console = Console(width=200)
    try:
        warmup, measured = (int(v) for v in args.rounds.split(","))
        if warmup < 0 or measured < 1 or args.jobs < 1:
            raise ValueError
    except ValueError:
        print(f"gpu_fidelity: --rounds {args.rounds!r} --jobs {args.jobs}: --rounds takes "
              "WARMUP,MEASURED (e.g. 2,4; measured >= 1) and --jobs a positive count",
              file=sys.stderr)
        sys.exit(2)

    started = time.perf_counter()
    rows = load_rows()
    wanted = [s.strip() for s in args.models.split(",") if s.strip()]
    if wanted:
        rows = [r for r in rows if any(w.lower() in r.model_path.lower() for w in wanted)]
    matched, skipped = match_rows(rows)
    if args.limit:
        matched = matched[:args.limit]
    absent = "--no-aic given" if args.no_aic else aic.available()
    with_aic = absent is None

    method = Method((warmup, measured), args.stat, args.seed, args.engine_args, args.clients,
                    args.first_round)
    work = [(m, with_aic, method, not args.no_band) for m in matched]
    if args.jobs > 1 and len(work) > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(judge_row, *zip(*work, strict=True), chunksize=4))
    else:
        results = [judge_row(*w) for w in work]

    for r in results:
        if isinstance(r.sim, str):
            skipped[r.sim] += 1
    covered = [r for r in results if isinstance(r.sim, tuple)]
    aic_skipped = Counter(r.aic for r in covered if with_aic and isinstance(r.aic, str))

    console.print(f"gpu_fidelity: {len(rows)} judge rows, {len(covered)} simulated; "
                  f"{time.strftime('%Y-%m-%d')}, {platform.node()}, {os.cpu_count()} CPUs, "
                  f"--jobs {args.jobs}, rounds {warmup}+{measured}, {args.stat}, clients "
                  f"{args.clients}, first round {args.first_round}, engine args "
                  f"{args.engine_args}")
    for reason, n in skipped.most_common():
        console.print(f"  skipped {n:4d}: {reason}")
    if absent:
        console.print(f"aiconfigurator: {absent}")
    for reason, n in aic_skipped.most_common():
        console.print(f"  aiconfigurator gave no estimate for {n:4d} simulated rows: {reason}")

    by_model: dict[str, list[RowResult]] = defaultdict(list)
    by_system: dict[str, list[RowResult]] = defaultdict(list)
    for r in covered:
        row = r.matched.row
        by_model[row.model_path].append(r)
        by_system[f"{row.model_path} {row.system} {r.matched.precision}"].append(r)
    console.print(_table("Per model", {**dict(sorted(by_model.items())), "all": covered},
                         with_aic))
    console.print(_table("Per model, system and precision", dict(sorted(by_system.items())),
                         with_aic))
    tabled = [r for r in covered if r.roofline is not None]
    if tabled:
        side = {"measured table": tabled,
                "roofline, same rows": [RowResult(r.matched, sim=r.roofline or "") for r in tabled]}
        console.print(_table("Step models side by side (rows with a measured table)", side,
                             False))
    both = [r for r in covered if isinstance(r.aic, tuple)]
    if with_aic and both:
        console.print(_table(f"Head to head on the {len(both)} rows both estimate (aic_unfitted: "
                             "aiconfigurator without the two TTFT terms it fitted to this "
                             "corpus, gpu_fidelity_aic)", {"rows both estimate": both}, True))
    bands = {name: band_stats(rs) for name, rs in [*sorted(by_model.items()), ("all", covered)]}
    if bands["all"]:
        t = Table(title="Measured against the band of the two client start states (% of rows: "
                        "below / in / above)")
        for col in ("group", "rows", "TTFT", "TPOT"):
            t.add_column(col, justify="left" if col == "group" else "right")
        for name, b in bands.items():
            t.add_row(name, str(b["rows"]), *(f"{b[f'{m}_below_band']:.0f} / {b[f'{m}_in_band']:.0f}"
                                              f" / {b[f'{m}_above_band']:.0f}"
                                              for m in ("ttft", "tpot")))
        console.print(t)
    if args.rows_out:
        write_rows(args.rows_out, covered)
        console.print(f"per-row figures: {args.rows_out}")
    wall = time.perf_counter() - started
    console.print(f"wall {wall:.0f} s; simulation {sum(r.sim_s for r in results):.0f} s of "
                  f"worker time")

    def group(rs: list[RowResult]) -> dict[str, object]:
        return {"rows": len(rs), "sim": _four(error_stats(_errors(rs, "sim"))),
                "aic_rows": len(_errors(rs, "aic")),
                "aic_static": _four(error_stats(_errors(rs, "aic"))) if with_aic else None,
                "aic_unfitted": (_four(error_stats(_errors(rs, "aic_unfitted")))
                                 if with_aic else None)}

    print(json.dumps({
        "rows": len(covered), "models": len(by_model),
        "sim": _four(error_stats(_errors(covered, "sim"))),
        "aic_static": _four(error_stats(_errors(covered, "aic"))) if with_aic else None,
        "aic_unfitted": (_four(error_stats(_errors(covered, "aic_unfitted")))
                         if with_aic else None),
        "by_model": {k: group(v) for k, v in sorted(by_model.items())},
        "aic_rows": len(both),
        "step_models": dict(Counter(r.step_model for r in covered)),
        "skipped": dict(skipped), "engine_args": args.engine_args,
        "clients": args.clients, "first_round": args.first_round,
        "band": bands if bands["all"] else None,
        "wall_s": round(wall, 1),
    }))


if __name__ == "__main__":
    main()

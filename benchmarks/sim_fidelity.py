"""How well the calibrated simulator predicts a real engine it was not fitted to.

Real vLLM CPU-build engines serve the tiny test model under a set of engine configs (CONFIGS),
each replaying the same synthetic trace below its capacity and in a burst past it, `--repeats`
times on fresh engines. The `cpu` profile is calibrated on the first `--fit` configs; the
simulator predicts the rest, judged on output throughput, P99 TTFT, step times and the rank
correlation of the held-out capacities, with the real repeats' spread beside each error. The
method, the hosts' run times and every run: docs/benchmarks/simulator-fidelity.md.

Needs the vLLM CPU build: AUTOTUNE_ENGINE__PYTHON=.venv-engine/bin/python (`make engine-venv`).
Usage: .venv/bin/python benchmarks/sim_fidelity.py [--fit N] [--quick | --requests N]
                     [--repeats N] [--scales X,Y] [--load F] [--save FILE | --measured FILE]
Prints a table, then one JSON line with throughput_err_max, ttft_p99_err_max and spearman.
--save keeps the real measurements (JSON lines; FILE.partial while measuring); --measured
judges a saved set again without engines (benchmarks/measurements/fidelity-runN.jsonl.gz).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
from rich.console import Console
from rich.table import Table

from autotune.domain.records import CapacitySearch, Measurement, ReplayResult, percentile_ms
from autotune.errors import ConfigError
from autotune.measure.metrics import summarize
from autotune.settings import engine_python_env
from autotune.workers.sim.calibrate import STEP_METRICS, calibrate, simulate, step_pairs_ms
from autotune.workers.sim.fidelity import (
    HOST_PROBE,
    HOST_PROBE_DRIFT,
    HOST_STEAL,
    append_measurements,
    fidelity_trace,
    grouped,
    in_configs_order,
    interleaved,
    load_measurements,
    measure_passes,
    pooled_ttft_p99_ms,
    save_measurements,
)
from autotune.workers.sim.profile import Profile, find_profile

# Fitted on the first --fit configs, judged on the rest; the ones that matter on a CPU engine:
# concurrency, the token budget, chunking and the block size.
CONFIGS: list[dict[str, object]] = [
    {"max_num_seqs": 4}, {"max_num_seqs": 32}, {"max_num_seqs": 8, "max_num_batched_tokens": 512},
    {"max_num_seqs": 64, "block_size": 64},
    {"max_num_seqs": 2}, {"max_num_seqs": 16}, {"max_num_seqs": 48},
    {"max_num_seqs": 16, "max_num_batched_tokens": 256},
    {"max_num_seqs": 8, "block_size": 128}, {"max_num_seqs": 24, "enable_chunked_prefill": False},
    {"max_num_seqs": 12, "enable_prefix_caching": False},
    # Two whose capacity is far from the others': where the held-out capacities lie within the
    # real repeats' spread, rank correlation measures noise, not the model.
    {"max_num_seqs": 1}, {"max_num_seqs": 32, "max_num_batched_tokens": 128},
]
# Below capacity (TTFT is service time) and a burst far past it (throughput is capacity, TTFT the
# time to drain the queue). Capacity is a property of the host, so the rate below it is a share
# of each engine's own capacity, measured by its discarded burst (LOAD), unless --scales gives
# fixed multipliers: near a config's capacity the error says more about the rate than the model
# (docs/benchmarks/simulator-fidelity.md).
SCALES, LOAD = (256.0,), 0.5
# P99 over 120 requests is the second-worst one, and moves between two runs; 360 makes it the
# fourth-worst (docs/benchmarks/simulator-fidelity.md).
REQUESTS, QUICK_REQUESTS = 360, 48
# Each config and multiplier is replayed this many times, once per pass over all configs on a
# fresh engine, the simulator judged against their mean throughput and the P99 TTFT of their
# requests pooled, and the spread between the repeats printed beside the error: it is how well
# one real replay predicts the next, the floor of any model's error. Three pooled judge the
# 11th-worst of 1,080 requests (docs/benchmarks/simulator-fidelity.md).
REPEATS = 3
# Simulations the fit may spend: about 75 per coefficient fitted (eight).
FIT_EVALS = 600
# Above this send-lag P99 a replay timed the box, not the engine: the tuner would not use it.
CLIENT_BOUND_MS = CapacitySearch().max_send_lag_p99_ms
# Above this share of CPU time stolen by other guests during a replay, it timed the neighbours,
# not the engine: a 3-s stall in a 30-s replay would be 10%.
HOST_BOUND_STEAL_PCT = 5.0


class Row(NamedTuple):
    """One held-out config at one rate: measured (the mean of its repeats) against predicted."""

    scale: float
    real_tok_s: float
    sim_tok_s: float
    tput_err: float
    ttft_err: float
    real_ttft_ms: float  # P99 over the repeats' requests pooled (older files: mean of P99s)
    sim_ttft_ms: float  # the same over the simulated repeats
    send_lag_ms: float  # the largest of the repeats'; nan: saved before the lag was kept
    tput_err_first: float  # against the first replay alone, as before repeats were measured
    ttft_err_first: float
    tput_spread: float  # between the repeats: max / min - 1 (nan with one replay)
    ttft_spread: float
    tok_s_each: tuple[float, ...]  # each repeat's throughput
    step_err: float  # decode step times by batch size, model against engine: mean |rel|; nan: none
    prefill_err: float  # prefill step times by prompt-length bin, the same way
    one_seq_ms_each: tuple[float, ...]  # each repeat's engine: its one-sequence decode step (nan: none)
    steal_pct_each: tuple[float, ...]  # each repeat's host steal, % (nan: saved before it was kept)


class Judgement(NamedTuple):
    """The held-out rows and the fit they were judged by."""

    rows: list[Row]
    fitted: Profile
    before: dict[str, float]  # the fit's mean relative errors before and after
    after: dict[str, float]
    evals: int
    repeats: int
    pooled_groups: int  # rows whose real P99 TTFT is over pooled requests
    ttft_errs_mean_of_repeats: list[float]  # per row, against the mean of the repeats' P99s


def probe_reference_ms(measured: list[Measurement], fitted_on: list[Measurement]
                       ) -> float | None:
    """The host speed the fit is for: the median host-probe TPOT of the replays it is fitted
    to, ms; None unless every replay was probed (files saved before the probe existed)."""
    if not all(HOST_PROBE in m.observed for m in measured):
        return None
    return float(np.median([m.observed[HOST_PROBE] for m in fitted_on]))


def slowdown(m: Measurement, reference_ms: float | None) -> float:
    """How much slower the replay's host ran than the reference (1: not probed)."""
    return m.observed[HOST_PROBE] / reference_ms if reference_ms else 1.0


def judge(groups: list[list[Measurement]], fit_n: int, reference_ms: float | None
          ) -> Judgement:
    """Fit the cpu profile to the first fit_n groups, and set each held-out group's repeats
    against the simulator's, each repeat simulated at its own host's speed where probed."""
    fit_on = [m for g in groups[:fit_n] for m in g]
    fitted, before, after, evals = calibrate(
        fit_on, find_profile("cpu", "tiny-llama", "cpu", None), max_evals=FIT_EVALS,
        slowdowns=[slowdown(m, reference_ms) for m in fit_on])
    quiet = fitted.with_coefficients(noise_cv=0.0)
    rows: list[Row] = []
    errs_mean_of_repeats: list[float] = []
    pooled_groups = 0
    for group in groups[fit_n:]:
        profiles = [quiet.slowed(slowdown(r, reference_ms)) for r in group]
        sims = _simulated(group, profiles)
        summaries = [summarize(x) for x in sims]
        sim_tok = [x.output_tok_s for x in summaries]
        sim_p99 = [x.ttft_p99_ms for x in summaries]
        sim_ttft = percentile_ms(np.concatenate([x.ttft_s[~x.failed] for x in sims]), 99.0)
        tok = [r.observed["output_tok_s"] for r in group]
        ttft = [r.observed["ttft_p99_ms"] for r in group]
        # P99 TTFT over the repeats' requests pooled, where they were kept; else (older
        # files) the mean of the repeats' own P99s, against the mean of the simulated ones.
        pooled = pooled_ttft_p99_ms(group)
        pooled_groups += pooled is not None
        real_tok, sim_tok_mean = float(np.mean(tok)), float(np.mean(sim_tok))
        real_ttft = pooled if pooled is not None else float(np.mean(ttft))
        sim_ttft = sim_ttft if pooled is not None else float(np.mean(sim_p99))
        errs_mean_of_repeats.append(abs(float(np.mean(sim_p99)) / float(np.mean(ttft)) - 1))
        lag = _max_known(r.observed.get("send_lag_p99_ms", float("nan")) for r in group)
        step_errs = _step_errors(group, profiles)
        rows.append(Row(group[0].rate_scale, real_tok, sim_tok_mean,
                        abs(sim_tok_mean / real_tok - 1), abs(sim_ttft / real_ttft - 1),
                        real_ttft, sim_ttft, float("nan") if lag is None else lag,
                        abs(sim_tok[0] / tok[0] - 1), abs(sim_p99[0] / ttft[0] - 1),
                        _spread(tok), _spread(ttft), tuple(tok),
                        step_errs["decode_step_ms"], step_errs["prefill_step_ms"],
                        tuple(_one_seq_step_ms(r) for r in group),
                        tuple(r.observed.get(HOST_STEAL, float("nan")) for r in group)))
    return Judgement(rows, fitted, before, after, evals, max(len(g) for g in groups),
                     pooled_groups, errs_mean_of_repeats)


def _simulated(replays: list[Measurement], profiles: list[Profile]) -> list[ReplayResult]:
    """The simulator's replay of each measured one, each by its own profile."""
    found = [simulate(r, p) for r, p in zip(replays, profiles, strict=True)]
    started = [x for x in found if x is not None]
    assert len(started) == len(found), f"the simulator would not start {replays[0].config}"
    return started


def _spread(values: list[float]) -> float:
    """How far apart repeated measurements of one thing are: max / min - 1."""
    return max(values) / min(values) - 1 if len(values) > 1 else float("nan")


def _known(values: Iterable[float]) -> list[float]:
    """The values that are not nan (one replay: no spread; no lag kept; no step timings)."""
    return [x for x in values if x == x]


def _max_known(values: Iterable[float]) -> float | None:
    """The largest, ignoring nan; None if there is none."""
    known = _known(values)
    return max(known) if known else None


def _mean_known(values: Iterable[float]) -> float | None:
    """The mean, ignoring nan, to 4 places; None if there is none."""
    known = _known(values)
    return round(float(np.mean(known)), 4) if known else None


def _step_errors(replays: list[Measurement], profiles: list[Profile]) -> dict[str, float]:
    """Mean |modelled / measured - 1| of the replays' step times, each by its own profile, per
    STEP_METRICS kind (nan: none timed)."""
    pairs = [step_pairs_ms(r, p) for r, p in zip(replays, profiles, strict=True)]
    errs = {k: [abs(p / o - 1) for kinds in pairs for p, o in kinds.get(k, ())]
            for k in STEP_METRICS}
    return {k: float(np.mean(v)) if v else float("nan") for k, v in errs.items()}


def _one_seq_step_ms(m: Measurement) -> float:
    """The replay's one-sequence decode step, ms (nan: it never ran one alone, as in a burst)."""
    return next((s.step_ms for s in m.step_times if s.batch == 1 and not s.prompt_tokens),
                float("nan"))


def _pct(x: float) -> str:
    return "-" if x != x else f"{x:.0%}"


def _scales(text: str) -> tuple[float, ...]:
    try:
        scales = tuple(sorted(float(x) for x in text.split(",")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated numbers: {text!r}") from None
    if not scales or min(scales) <= 0:
        raise argparse.ArgumentTypeError(f"multipliers must be positive: {text!r}")
    return scales


def spearman(a: list[float], b: list[float]) -> float:
    ra = np.argsort(np.argsort(a)).astype(float)
    rb = np.argsort(np.argsort(b)).astype(float)
    return float(np.corrcoef(ra, rb)[0, 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", type=int, default=4, help="configs used for fitting")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_REQUESTS} requests per replay instead of {REQUESTS}")
    parser.add_argument("--requests", type=int, help="requests per replay (with --measured: "
                                                      "as many as the saved replays had)")
    parser.add_argument("--repeats", type=int, default=REPEATS,
                        help=f"replays per config and multiplier, one per pass over all "
                             f"configs on fresh engines (default {REPEATS}); the mean is "
                             "judged, and the spread between them is printed")
    parser.add_argument("--scales", type=_scales, default=SCALES,
                        help="fixed rate multipliers, comma-separated (default: "
                             f"{','.join(f'{x:g}' for x in SCALES)}); with --measured, the file's")
    parser.add_argument("--load", type=float, default=LOAD,
                        help="also replay at this share of each engine's capacity, as its "
                             f"discarded pass at the top multiplier measured it (default {LOAD}; "
                             "0: fixed multipliers only)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--save", type=Path, help="write the real measurements here")
    source.add_argument("--measured", type=Path, help="judge these saved measurements instead")
    args = parser.parse_args()
    # One line per engine on stderr while measuring: a run takes 1-10 hours, set by the host.
    logging.basicConfig(stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("autotune.fidelity").setLevel(logging.INFO)
    if args.repeats < 1:
        sys.exit(f"sim_fidelity: --repeats must be at least 1, not {args.repeats}")
    if not 0 <= args.load < 1:
        sys.exit(f"sim_fidelity: --load is a share of capacity in [0, 1), not {args.load}")
    if len(CONFIGS) - args.fit < 6:
        sys.exit(f"sim_fidelity: --fit {args.fit} leaves fewer than 6 configs to judge")
    trace = fidelity_trace(args.requests or (QUICK_REQUESTS if args.quick else REQUESTS))
    if args.measured is not None:
        try:
            measured = in_configs_order(load_measurements(args.measured, trace), CONFIGS)
        except ConfigError as exc:
            sys.exit(f"sim_fidelity: {exc}")
        if len(grouped(measured)) % len(CONFIGS) or not measured:
            sys.exit(f"sim_fidelity: {args.measured} has replays of {len(grouped(measured))} "
                     f"configs and rates, not a multiple of the {len(CONFIGS)} configs")
    else:
        engine_python = engine_python_env()
        if not engine_python or not Path(engine_python).exists():
            sys.exit("sim_fidelity: set AUTOTUNE_ENGINE__PYTHON to the vLLM CPU venv's python "
                     "(make engine-venv)")
        # Measured alternately from the fitted and the judged configs: the cores are shared, and
        # a load that rises while the judged configs run last slows them for reasons no config
        # explains (it did once: docs/benchmarks/simulator-fidelity.md).
        order = interleaved(len(CONFIGS), args.fit)
        partial = None if args.save is None else args.save.with_name(args.save.name + ".partial")
        if partial is not None and partial.exists():
            sys.exit(f"sim_fidelity: {partial} holds a stopped run's measurements; move it "
                     "away first")
        with tempfile.TemporaryDirectory() as tmp:
            found = measure_passes(
                [CONFIGS[i] for i in order], trace, engine_python, Path(tmp), args.scales,
                args.repeats, args.load or None,
                None if partial is None else lambda done: append_measurements(done, partial))
        per = len(found) // len(CONFIGS)
        by_config = {i: [replace(m, source=m.source.replace(f"config {k} ", f"config {i} ", 1))
                         for m in found[k * per:(k + 1) * per]] for k, i in enumerate(order)}
        measured = [m for i in range(len(CONFIGS)) for m in by_config[i]]
        if partial is not None:
            save_measurements(measured, args.save)
            partial.unlink(missing_ok=True)
    groups = grouped(measured)  # config-major, as CONFIGS
    fit_n = args.fit * len(groups) // len(CONFIGS)
    scales = sorted({m.rate_scale for m in measured})
    burst = max(scales)  # the saturating multiplier; the others are below capacity
    # Judged at one host speed; at each engine's probed speed too, where every replay was
    # probed (too noisy to be the headline: docs/benchmarks/simulator-fidelity.md).
    reference_ms = probe_reference_ms(measured, [m for g in groups[:fit_n] for m in g])
    judged = judge(groups, fit_n, None)
    probed = judge(groups, fit_n, reference_ms) if reference_ms else None
    rows, fitted, evals, repeats = judged.rows, judged.fitted, judged.evals, judged.repeats
    before, after = judged.before, judged.after
    table = Table(title=f"Simulator fidelity: tiny-llama on the vLLM CPU build, {len(trace)} "
                        f"requests, {judged.repeats} replay(s) each; fitted on {args.fit} "
                        f"configs ({evals} simulations), judged on {len(CONFIGS) - args.fit}")
    for col in ("config", "rate x", "tok/s real", "spread", "tok/s sim", "err",
                "TTFT p99 real ms", "spread", "sim ms", "err", "decode err", "prefill err",
                "send lag p99 ms", "1-seq step ms", "probe ms", "steal %", "load"):
        table.add_column(col, justify="right")
    for row, group in zip(rows, groups[fit_n:], strict=True):
        label = {k: v for k, v in group[0].config.explicit().items() if k != "max_model_len"}
        table.add_row(json.dumps(label, separators=(",", ":")),
                      f"{row.scale:g}", f"{row.real_tok_s:.0f}", _pct(row.tput_spread),
                      f"{row.sim_tok_s:.0f}", f"{row.tput_err:.0%}", f"{row.real_ttft_ms:.0f}",
                      _pct(row.ttft_spread), f"{row.sim_ttft_ms:.0f}", f"{row.ttft_err:.0%}",
                      _pct(row.step_err), _pct(row.prefill_err), f"{row.send_lag_ms:.0f}",
                      " ".join("-" if x != x else f"{x:.1f}" for x in row.one_seq_ms_each),
                      " ".join(f"{r.observed[HOST_PROBE]:.1f}" if HOST_PROBE in r.observed
                               else "-" for r in group),
                      " ".join("-" if x != x else f"{x:.0f}" for x in row.steal_pct_each),
                      " ".join(r.source.rpartition(" ")[2] for r in group))
    console = Console(width=160)
    console.print(table)
    console.print("fit error (mean |rel|) before -> after: " + ", ".join(
        f"{k} {before[k]:.0%} -> {after[k]:.0%}" for k in before))
    console.print("fitted: " + ", ".join(f"{k}={getattr(fitted.coefficients, k):.3g}"
                                         for k in fitted.fit["coefficients_fitted"]))  # type: ignore[index]
    tput_err, ttft_err = [r.tput_err for r in rows], [r.ttft_err for r in rows]
    top = [r for r in rows if r.scale == burst]
    clean = [r for r in rows if r.send_lag_ms <= CLIENT_BOUND_MS]
    # Rows none of whose repeats had CPU stolen past the bound (a repeat saved before steal was
    # kept counts as quiet).
    quiet_host = [r for r in rows
                  if not any(x > HOST_BOUND_STEAL_PCT for x in r.steal_pct_each)]
    steal_known = _known(x for r in rows for x in r.steal_pct_each)
    print(json.dumps({**_headline(rows, burst),
                      "throughput_err_mean": round(float(np.mean(tput_err)), 4),
                      "ttft_p99_err_mean": round(float(np.mean(ttft_err)), 4),
                      "spearman_pooled": round(spearman([r.real_tok_s for r in rows],
                                                        [r.sim_tok_s for r in rows]), 3),
                      "scales": list(scales), "requests": len(trace),
                      # Below capacity (each config's own share of it, or fixed
                      # multipliers) and in the burst.
                      "err_max_by_rate": {
                          name: {"throughput": round(max(r.tput_err for r in part), 4),
                                 "ttft_p99": round(max(r.ttft_err for r in part), 4)}
                          for name, part in (("below", [r for r in rows if r.scale != burst]),
                                             ("burst", top)) if part},
                      "held_out_replays": len(rows),
                      # Step times read off the held-out replays' token streams (autotune.
                      # step_timings), against the step model: mean |rel| of the decode steps
                      # by batch size and of the prefill steps by prompt-length bin.
                      "decode_step_err_mean": _mean_known(r.step_err for r in rows),
                      "prefill_step_err_mean": _mean_known(r.prefill_err for r in rows),
                      "repeats": repeats,
                      # What the measured P99 TTFT is: over the repeats' requests pooled (see
                      # autotune.workers.sim.fidelity.pooled_ttft_p99_ms), or the mean of their P99s
                      # (files saved before each request's TTFT was kept)...
                      "ttft_p99_measured_as": ("pooled" if judged.pooled_groups == len(rows)
                                               else "mean_of_repeats"
                                               if not judged.pooled_groups
                                               else "mixed"),
                      # ... and the error against the mean of the repeats' P99s, as earlier
                      # runs judged it.
                      "ttft_p99_err_max_mean_of_repeats": round(
                          max(judged.ttft_errs_mean_of_repeats), 4),
                      # Against one replay each (the first), as runs before repeats judged.
                      "throughput_err_max_first_replay": round(max(r.tput_err_first
                                                                   for r in rows), 4),
                      "ttft_p99_err_max_first_replay": round(max(r.ttft_err_first
                                                                 for r in rows), 4),
                      # Real against real: how the first repeats rank the held-out configs'
                      # capacity against how the second ones do (the floor of `spearman`)...
                      "spearman_repeats": (
                          round(spearman([r.tok_s_each[0] for r in top],
                                         [r.tok_s_each[1] for r in top]), 3)
                          if all(len(r.tok_s_each) > 1 for r in top) else None),
                      # ... and the largest max/min - 1 between repeats.
                      "repeat_spread_max": {
                          k: None if v is None else round(v, 4) for k, v in (
                              ("throughput", _max_known(r.tput_spread for r in rows)),
                              ("ttft_p99", _max_known(r.ttft_spread for r in rows)))},
                      # Held-out replays whose client sent late (the whole box stalled), and
                      # the TTFT error on the others: the engine alone.
                      "client_bound_replays": len(rows) - len(clean),
                      "ttft_p99_err_max_not_client_bound": (
                          round(max(r.ttft_err for r in clean), 4) if clean else None),
                      # How fast each held-out replay's engine instance ran one sequence:
                      # instances of one config can differ all replay long.
                      "one_seq_step_ms_range": (
                          None if not (known := _known(x for r in rows for x in r.one_seq_ms_each))
                          else [round(min(known), 2), round(max(known), 2)]),
                      # Held-out rows in which another guest took more than
                      # HOST_BOUND_STEAL_PCT of the CPUs during a repeat, and the TTFT error on
                      # the others (None: no steal was kept).
                      "host_steal_pct_max": max(steal_known) if steal_known else None,
                      "host_bound_rows": (len(rows) - len(quiet_host)) if steal_known else None,
                      "ttft_p99_err_max_not_host_bound": (
                          round(max(r.ttft_err for r in quiet_host), 4)
                          if steal_known and quiet_host else None),
                      "send_lag_p99_ms_max": max((round(r.send_lag_ms, 1) for r in rows
                                                  if r.send_lag_ms == r.send_lag_ms),
                                                 default=None),
                      # The host-speed probe (autotune.workers.sim.fidelity.HOST_PROBE): the fitted
                      # replays' median, the held-out replays' slowdowns against it, the
                      # largest drift between an engine's two probes, and the headline figures
                      # with each replay at its probed speed (None: not probed).
                      "host_probe_reference_ms": reference_ms and round(reference_ms, 3),
                      "host_slowdown_range": reference_ms and [
                          round(f(slowdown(m, reference_ms) for g in groups[fit_n:] for m in g),
                                3) for f in (min, max)],
                      "host_probe_drift_max": reference_ms and max(
                          abs(m.observed.get(HOST_PROBE_DRIFT, 0.0)) for m in measured),
                      "with_probe": probed and _headline(probed.rows, burst)}))


def _headline(rows: list[Row], burst: float) -> dict[str, float]:
    """The figures the issue sets targets for: largest errors and the burst's rank correlation."""
    top = [r for r in rows if r.scale == burst]
    return {"throughput_err_max": round(max(r.tput_err for r in rows), 4),
            "ttft_p99_err_max": round(max(r.ttft_err for r in rows), 4),
            "spearman": round(spearman([r.real_tok_s for r in top], [r.sim_tok_s for r in top]),
                              3)}


if __name__ == "__main__":
    main()

"""Real measurements for judging the simulator: CPU-build vLLM engines serving the tiny model.

Used by `benchmarks/sim_fidelity.py` and the calibration integration test, so both measure the
same way: one engine per config, warmed up and then run through the trace once unmeasured (the
CPU build specialises kernels per shape for a while), then the same trace at each multiplier,
`repeats` times: a P99 of a few hundred requests moves between two replays of the same engine,
and the repeats say by how much (`grouped` puts them together again).

Every replay on an engine draws its prompt token ids from its own seed: with one seed a later
replay finds the earlier ones' prompts in the prefix cache and measures a much shorter TTFT than
a cold engine, which is what the simulator predicts from a trace without prefix hashes
(docs/benchmarks/simulator-fidelity.md).
"""

from __future__ import annotations

import gzip
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from autotune.atomic import atomic_write_text
from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import Measurement, ReplayResult, percentile_ms
from autotune.domain.step_timings import steps_from_json, steps_to_json
from autotune.errors import ConfigError
from autotune.measure.metrics import summarize
from autotune.measure.tiny_model import make_tiny_model
from autotune.traffic.trace import Trace
from autotune.workers.vllm.backend import VllmBackend

log = logging.getLogger("autotune.fidelity")

CPU = DeploymentSpec(name="fidelity", model="tiny-llama", gpu="cpu", gpu_count=1,
                     tensor_parallel_size=1, max_model_len=2048)
SCALES = (1.5, 4.0)
# The send lag is not predicted: it says whether the replay measured the engine or the box
# (see autotune.measure.capacity: a real trial above CapacitySearch.max_send_lag_p99_ms is client-bound).
OBSERVED = ("output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "send_lag_p99_ms")
# Nor is the host's steal: the share of the CPUs' time the hypervisor gave to other guests while
# the replay ran (/proc/stat). A stolen CPU stalls engine and client alike; steal does not see
# everything a neighbour takes (docs/benchmarks/simulator-fidelity.md).
HOST_STEAL = "host_steal_pct"
# What steal misses, a gauge of the engine's speed measured the same way for every config: its
# median TPOT over lone requests (a 64-token prompt, 64 tokens out, nothing else running), once
# before the engine's measured replays and once after, averaged. A one-sequence decode step is
# the same work under every config this benchmark varies (block size aside: a 128-token context
# is one to four blocks), so where it differs between engines the host ran at another speed.
# Kept with the replay, as is the drift between the two probes (after / before - 1); too noisy
# to correct by (docs/benchmarks/simulator-fidelity.md).
HOST_PROBE, HOST_PROBE_DRIFT = "host_probe_tpot_ms", "host_probe_drift"
# The gap outlasts 64 tokens at the slowest one-sequence step seen (see docs/benchmarks/
# simulator-fidelity.md): each request has the engine to itself.
PROBE_REQUESTS, PROBE_GAP_S, PROBE_TOKENS = 6, 0.6, 64
PROBE_SEEDS = (1001, 1002)  # prompts no replay draws


def fidelity_trace(requests: int = 40, seed: int = 7) -> Trace:
    """Chat-like: Poisson arrivals at 2 req/s, prompts of 32-768 tokens, 16-96 output tokens."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(0.5, requests))
    prompts, outputs = rng.integers(32, 768, requests), rng.integers(16, 96, requests)
    rows: list[dict[str, object]] = [
        {"arrival_s": float(t - arrivals[0]), "prompt_tokens": int(p), "output_tokens": int(o)}
        for t, p, o in zip(arrivals, prompts, outputs, strict=True)]
    return Trace.from_rows("fidelity", rows)


def fidelity_config(values: dict[str, object]) -> EngineConfig:
    """The engine arguments measure_real runs a benchmark config with: block size 32 unless
    given."""
    return EngineConfig(max_model_len=CPU.max_model_len, block_size=32).merged(**values)


def interleaved(n: int, fit: int) -> list[int]:
    """0..n-1 with the first `fit` spread evenly among the rest: 0, 4, 5, 1, 6, 7, 2, ... ."""
    rest = list(range(fit, n))
    gap = len(rest) / max(fit, 1)
    order: list[int] = []
    for i in range(fit):
        order.append(i)
        order.extend(rest[round(i * gap):round((i + 1) * gap)])
    return order if fit else rest


def measure_real(configs: Sequence[dict[str, object]], trace: Trace, engine_python: str,
                 work: Path, scales: Sequence[float] = SCALES, repeats: int = 1,
                 load: float | None = None,
                 engine_done: Callable[[list[Measurement]], None] | None = None,
                 numbered: tuple[int, int] | None = None) -> list[Measurement]:
    """One CPU engine per config (block size 32 unless given), the trace at each multiplier
    `repeats` times in a row; config by config, each multiplier's repeats together.
    `engine_done` is given each engine's measurements as it finishes (a run takes hours), and
    each engine logs a line, numbered after `numbered`'s (engines before these, in all).

    With `load`, each engine is also replayed at that share of its own capacity, first: the
    discarded pass then runs at the highest multiplier (which should be past every config's
    capacity) and measures it. A fixed multiplier is below capacity on one host and past it on
    another (docs/benchmarks/simulator-fidelity.md)."""
    model = make_tiny_model(work / "model")
    before, engines = numbered or (0, len(configs))
    found = []
    for i, values in enumerate(configs):
        config = fidelity_config(values)
        backend = cpu_engine(model, engine_python, work)
        started = time.monotonic()
        try:
            backend.start(config, CPU, label=f"fidelity{i}")
            backend.warmup(trace, 0)  # prompts of seed 1 (see VllmBackend.warmup)
            # Discarded: the steady state is what is compared.
            discarded = summarize(backend.replay(trace, max(scales) if load else min(scales), 2))
            rates = list(scales)
            if load:
                rates.insert(0, capacity_share(trace, discarded.output_tok_s, load))
            runs = [scale for scale in rates for _ in range(repeats)]
            probe_before = host_probe_tpot_ms(backend, PROBE_SEEDS[0])
            for seed, scale in enumerate(runs, start=3):
                ticks = cpu_ticks()
                result = backend.replay(trace, scale, seed)
                steal = steal_pct(ticks, cpu_ticks())
                s = summarize(result)
                observed = {k: getattr(s, k) for k in OBSERVED if getattr(s, k) is not None}
                if steal is not None:
                    observed[HOST_STEAL] = steal
                found.append(Measurement(config=config, deployment=CPU, trace=trace,
                                         rate_scale=scale, seed=seed, observed=observed,
                                         source=f"config {i} x{scale:g} load {_load_1min()}",
                                         step_times=s.step_times,
                                         ttft_each_ms=ttfts_ms(result)))
            probed = _probed(probe_before, host_probe_tpot_ms(backend, PROBE_SEEDS[1]))
            found[-len(runs):] = [replace(m, observed={**m.observed, **probed})
                                  for m in found[-len(runs):]]
            if engine_done is not None:
                engine_done(found[-len(runs):])
            # A run's length is set by the host (benchmarks/sim_fidelity.py): the first line
            # tells a slow one.
            log.info("engine %d of %d (%s): discarded replay %.0f tok/s, %.0f s",
                     before + i + 1, engines, ", ".join(f"{k}={v}" for k, v in values.items()),
                     discarded.output_tok_s, time.monotonic() - started)
        finally:
            backend.stop()
    return found


def measure_passes(configs: Sequence[dict[str, object]], trace: Trace, engine_python: str,
                   work: Path, scales: Sequence[float] = SCALES, passes: int = 1,
                   load: float | None = None,
                   engine_done: Callable[[list[Measurement]], None] | None = None,
                   ) -> list[Measurement]:
    """measure_real over all configs `passes` times, each pass on fresh engines, the later
    ones at the rates the first found: the repeats of a config lie a pass apart, since repeats
    back to back share whatever state the engine and host are in
    (docs/benchmarks/simulator-fidelity.md). Returned config by config, each config's replays
    in pass order."""
    engines = len(configs) * passes
    first = measure_real(configs, trace, engine_python, work, scales, 1, load, engine_done,
                         (0, engines))
    per_config = len(first) // len(configs)
    found = [first[i * per_config:(i + 1) * per_config] for i in range(len(configs))]
    for later in range(1, passes):
        for i, values in enumerate(configs):
            rates = [m.rate_scale for m in found[i][:per_config]]
            again = measure_real([values], trace, engine_python, work, rates, 1,
                                 engine_done=engine_done,
                                 numbered=(later * len(configs) + i, engines))
            found[i] += [replace(m, source=m.source.replace("config 0 ", f"config {i} ", 1))
                         for m in again]
    return [m for runs in found for m in runs]


def probe_trace() -> Trace:
    """PROBE_REQUESTS lone requests, PROBE_GAP_S apart, each PROBE_TOKENS in and out."""
    return Trace.from_rows("host-probe", [
        {"arrival_s": i * PROBE_GAP_S, "prompt_tokens": PROBE_TOKENS,
         "output_tokens": PROBE_TOKENS} for i in range(PROBE_REQUESTS)])


def host_probe_tpot_ms(backend: VllmBackend, seed: int) -> float | None:
    """The engine's median TPOT over probe_trace(), ms; None if it returned no tokens."""
    return summarize(backend.replay(probe_trace(), 1.0, seed)).tpot_p50_ms


def _probed(before: float | None, after: float | None) -> dict[str, float]:
    """The probe's observations: the mean of the two and their drift (none where one failed)."""
    if not before or not after:
        return {}
    return {HOST_PROBE: round((before + after) / 2, 3),
            HOST_PROBE_DRIFT: round(after / before - 1, 4)}


def cpu_engine(model: Path, engine_python: str, work: Path) -> VllmBackend:
    """A vLLM CPU-build engine for the tiny model (dummy weights, eager), logging under work."""
    return VllmBackend(model_path=str(model),
                       command=[engine_python, "-m", "vllm.entrypoints.openai.api_server"],
                       extra_args=["--load-format", "dummy", "--enforce-eager"],
                       log_dir=str(work / "logs"))


def capacity_share(trace: Trace, capacity_tok_s: float, share: float) -> float:
    """The multiplier at which the trace offers `share` of an engine's output capacity, to two
    significant digits."""
    offered_tok_s = float(np.sum(trace.output_tokens)) / trace.duration_s  # at 1x
    return float(f"{share * capacity_tok_s / offered_tok_s:.2g}")


def ttfts_ms(result: ReplayResult) -> tuple[float, ...]:
    """The completed requests' TTFTs, ms, in trace order (to 0.01 ms: the saved file stays
    small)."""
    return tuple(round(float(t) * 1000.0, 2) for t in result.ttft_s[~result.failed])


def pooled_ttft_p99_ms(replays: Sequence[Measurement]) -> float | None:
    """P99 TTFT over the requests of all the replays together, as summarize() takes it; None
    unless every replay kept its requests' TTFTs (files saved before they were kept).

    The P99 of one replay of 360 requests is its fourth-worst request: below capacity one late
    request moves it (docs/benchmarks/simulator-fidelity.md). Three replays pooled make it the
    eleventh-worst of 1,080."""
    if not replays or not all(m.ttft_each_ms for m in replays):
        return None
    values = np.concatenate([np.asarray(m.ttft_each_ms, dtype=float) for m in replays])
    return percentile_ms(values / 1000.0, 99.0)


def grouped(measured: Sequence[Measurement]) -> list[list[Measurement]]:
    """The replays of one config at one multiplier together, in the order first seen."""
    groups: dict[tuple[str, float], list[Measurement]] = {}
    for m in measured:
        key = (json.dumps(m.config.explicit(), sort_keys=True), m.rate_scale)
        groups.setdefault(key, []).append(m)
    return list(groups.values())


def in_configs_order(measured: Sequence[Measurement], configs: Sequence[dict[str, object]]
                     ) -> list[Measurement]:
    """The replays config by config in the order of `configs` (as measure_real sets them up),
    each config's in the order given: a stopped run's appended file holds them in the order
    they were measured. ConfigError for a replay of a config not among them."""
    index = {fidelity_config(values).key(): i for i, values in enumerate(configs)}
    strays = {m.config.key() for m in measured} - index.keys()
    if strays:
        raise ConfigError(f"measurements of configs the benchmark does not run: {sorted(strays)}")
    return sorted(measured, key=lambda m: index[m.config.key()])


def cpu_ticks(stat: Path = Path("/proc/stat")) -> tuple[int, int] | None:
    """(stolen, all) CPU time since boot, in ticks over all CPUs; None where there is no
    /proc/stat to read (not Linux)."""
    try:
        fields = stat.read_text().split("\n", 1)[0].split()
        # cpu user nice system idle iowait irq softirq steal [guest guest_nice: inside user]
        ticks = [int(x) for x in fields[1:9]]
        return ticks[7], sum(ticks)
    except (OSError, ValueError, IndexError):
        return None


def steal_pct(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of CPU time stolen between two cpu_ticks() readings, percent (to 0.1)."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round(100.0 * (after[0] - before[0]) / (after[1] - before[1]), 1)


def _load_1min() -> str:
    """The 1-minute load average: the cores are shared, and contention shows in the timings."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except (OSError, IndexError):
        return "?"


def save_measurements(measured: Sequence[Measurement], path: Path) -> None:
    """One JSON object a line: the config's explicit arguments, multiplier, seed, observations,
    decode step timings, each request's TTFT."""
    atomic_write_text(path, _lines(measured))


def append_measurements(measured: Sequence[Measurement], path: Path) -> None:
    """save_measurements' lines added to the end of `path`: load_measurements reads what a
    stopped run had appended."""
    with path.open("a") as out:
        out.write(_lines(measured))


def _lines(measured: Sequence[Measurement]) -> str:
    return "".join(json.dumps({"config": m.config.explicit(), "rate_scale": m.rate_scale,
                               "seed": m.seed, "observed": m.observed, "source": m.source,
                               "step_times": steps_to_json(m.step_times),
                               "ttft_each_ms": list(m.ttft_each_ms),
                               "trace_digest": m.trace.digest}) + "\n"
                   for m in measured)


def load_measurements(path: Path, trace: Trace) -> list[Measurement]:
    """What save_measurements wrote (gzipped too: `.gz`), against the trace those replays
    used."""
    try:
        text = (gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz"
                else path.read_text())
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        if not rows or any(r["trace_digest"] != trace.digest for r in rows):
            raise ConfigError(f"measurements {path}: none there, or replays of another trace "
                              f"(its digest is not {trace.digest})")
        return [Measurement(config=EngineConfig.from_mapping(r["config"]), deployment=CPU,
                            trace=trace, rate_scale=float(r["rate_scale"]), seed=int(r["seed"]),
                            observed={k: float(v) for k, v in r["observed"].items()},
                            source=str(r.get("source", "")),
                            step_times=steps_from_json(r),
                            ttft_each_ms=tuple(float(x) for x in r.get("ttft_each_ms", ())))
                for r in rows]
    except ConfigError:
        raise
    except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"measurements {path}: cannot read them ({exc})") from None

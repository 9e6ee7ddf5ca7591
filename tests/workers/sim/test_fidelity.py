"""The fidelity benchmark's saved measurements: what is written is what is read back."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import Measurement
from autotune.domain.step_timings import StepTime
from autotune.errors import ConfigError
from autotune.traffic.trace import Trace
from autotune.workers.sim.fidelity import (
    CPU,
    append_measurements,
    capacity_share,
    cpu_ticks,
    fidelity_trace,
    grouped,
    in_configs_order,
    interleaved,
    load_measurements,
    measure_passes,
    pooled_ttft_p99_ms,
    save_measurements,
    steal_pct,
)


def _measured() -> list[Measurement]:
    trace = fidelity_trace(24)
    return [Measurement(config=EngineConfig(max_model_len=2048, max_num_seqs=seqs, block_size=32),
                        deployment=CPU, trace=trace, rate_scale=scale, seed=seed,
                        observed={"output_tok_s": 100.0 * seqs, "ttft_p99_ms": 50.0 * scale},
                        source=f"config {seqs} x{scale:g} load 1.20",
                        step_times=(StepTime(batch=1, kv_tokens=400.0, step_ms=2.1 * scale,
                                                  gaps=30),) if seed == 3 else (),
                        ttft_each_ms=(12.5, 40.25) if seed == 3 else ())
            for seed, (seqs, scale) in enumerate([(4, 1.5), (4, 4.0), (32, 1.5)], start=3)]


def test_saved_measurements_read_back_the_same(tmp_path: Path) -> None:
    measured = _measured()
    path = tmp_path / "m.jsonl"
    save_measurements(measured, path)
    assert not list(tmp_path.glob("*.tmp"))  # written whole, then moved into place
    back = load_measurements(path, fidelity_trace(24))
    assert [(m.config, m.rate_scale, m.seed, m.observed, m.source, m.step_times,
             m.ttft_each_ms) for m in back] == [
        (m.config, m.rate_scale, m.seed, m.observed, m.source, m.step_times, m.ttft_each_ms)
        for m in measured]
    assert back[0].step_times and back[0].ttft_each_ms  # the step timings and TTFTs too


def test_appended_measurements_read_back_as_a_saved_file(tmp_path: Path) -> None:
    """What a stopped run appended engine by engine reads as if saved at once."""
    measured, path, whole = _measured(), tmp_path / "m.jsonl.partial", tmp_path / "m.jsonl"
    append_measurements(measured[:2], path)
    append_measurements(measured[2:], path)
    save_measurements(measured, whole)
    assert path.read_text() == whole.read_text()


def test_gzipped_measurements_read_back_the_same(tmp_path: Path) -> None:
    """Runs kept in the repository are gzipped (benchmarks/measurements)."""
    path, packed = tmp_path / "m.jsonl", tmp_path / "m.jsonl.gz"
    save_measurements(_measured(), path)
    packed.write_bytes(gzip.compress(path.read_bytes()))
    trace = fidelity_trace(24)
    assert load_measurements(packed, trace) == load_measurements(path, trace)
    packed.write_bytes(gzip.compress(path.read_bytes())[:-20])  # cut short
    with pytest.raises(ConfigError, match="cannot read"):
        load_measurements(packed, trace)


def test_replays_are_put_in_the_benchmarks_config_order(tmp_path: Path) -> None:
    """A stopped run appended its engines in the order measured (interleaved, pass by pass);
    judging needs them config by config, fitted configs first."""
    measured = _measured()  # seqs 4, 4, 32
    configs: list[dict[str, object]] = [{"max_num_seqs": 32}, {"max_num_seqs": 4}]
    shuffled = [measured[1], measured[2], measured[0]]
    assert [(m.config.max_num_seqs, m.seed) for m in in_configs_order(shuffled, configs)] == [
        (32, 5), (4, 4), (4, 3)]  # stable within a config: pass order is kept
    with pytest.raises(ConfigError, match="does not run"):
        in_configs_order(measured, configs[:1])


def test_files_saved_before_ttfts_were_kept_still_read(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    save_measurements(_measured(), path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "ttft_each_ms"})
                            + "\n" for r in rows))
    back = load_measurements(path, fidelity_trace(24))
    assert [m.ttft_each_ms for m in back] == [(), (), ()]
    assert pooled_ttft_p99_ms(back[:1]) is None  # judged by the mean of P99s, as before


def test_p99_ttft_is_taken_over_the_repeats_requests_together() -> None:
    """Pooled, not averaged: 99 fast requests and one slow one in one replay, 100 fast in the
    other. Alone the slow one pulls the first replay's P99 up; in the pool of 200 it is the
    worst request, above the P99."""
    one, = [m for m in _measured() if m.seed == 3]
    slow = replace(one, ttft_each_ms=(10.0,) * 99 + (500.0,))
    fast = replace(one, ttft_each_ms=(10.0,) * 100)
    pooled = pooled_ttft_p99_ms([slow, fast])
    assert pooled is not None
    # numpy's linear P99 of 199 tens and one 500: rank 0.99 * 199 = 197.01, both tens.
    assert pooled == pytest.approx(10.0)
    alone = pooled_ttft_p99_ms([slow])  # rank 98.01: 10 + 0.01 * 490
    assert alone == pytest.approx(14.9)
    assert pooled_ttft_p99_ms([slow, replace(one, ttft_each_ms=())]) is None
    assert pooled_ttft_p99_ms([]) is None


def test_passes_repeat_every_config_on_fresh_engines_at_the_first_passs_rates(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Pass 2 starts after pass 1 has measured every config (its repeats lie a pass apart), at
    the rates pass 1 found, and the result reads config by config as grouped() expects."""
    import autotune.workers.sim.fidelity as fidelity

    calls: list[tuple[list[dict[str, object]], list[float], float | None]] = []
    numbers: list[tuple[int, int]] = []
    trace = fidelity_trace(24)

    def fake(configs, trace_, engine_python, work, scales, repeats, load=None,  # type: ignore[no-untyped-def]
             engine_done=None, numbered=None):
        assert repeats == 1
        calls.append((list(configs), list(scales), load))
        numbers.append(numbered)
        found = []
        for i, values in enumerate(configs):
            seqs = int(values["max_num_seqs"])  # type: ignore[call-overload]
            rates = [0.1 * seqs, *scales] if load else list(scales)
            engine = [Measurement(
                config=EngineConfig(max_model_len=2048, block_size=32).merged(**values),
                deployment=CPU, trace=trace_, rate_scale=scale, seed=3,
                observed={"output_tok_s": 1.0}, source=f"config {i} x{scale:g} load 1")
                for scale in rates]
            engine_done(engine)
            found += engine
        return found

    monkeypatch.setattr(fidelity, "measure_real", fake)
    configs: list[dict[str, object]] = [{"max_num_seqs": 4}, {"max_num_seqs": 32}]
    finished: list[list[Measurement]] = []
    found = measure_passes(configs, trace, "python", tmp_path, (256.0,), passes=2, load=0.5,
                           engine_done=finished.append)
    assert calls == [(configs, [256.0], 0.5), ([configs[0]], [0.4, 256.0], None),
                     ([configs[1]], [3.2, 256.0], None)]
    assert [(m.config.max_num_seqs, m.rate_scale) for m in found] == [
        (4, 0.4), (4, 256.0), (4, 0.4), (4, 256.0), (32, 3.2), (32, 256.0), (32, 3.2), (32, 256.0)]
    assert [m.source.split(" x")[0] for m in found] == ["config 0"] * 4 + ["config 1"] * 4
    assert [len(g) for g in grouped(found)] == [2, 2, 2, 2]
    # Every engine of every pass is handed on as it finishes, in the order they ran.
    assert [[(m.config.max_num_seqs, m.rate_scale) for m in e] for e in finished] == [
        [(4, 0.4), (4, 256.0)], [(32, 3.2), (32, 256.0)], [(4, 0.4), (4, 256.0)],
        [(32, 3.2), (32, 256.0)]]
    # Their progress lines count on through the passes: engines 1-2, 3, 4 of 4.
    assert numbers == [(0, 4), (2, 4), (3, 4)]


def test_repeated_replays_are_grouped_by_config_and_multiplier() -> None:
    first, second = _measured(), _measured()
    # As measure_real orders repeats (each multiplier's together) and shuffled: same groups.
    for order in (first[:2] + second[:2] + first[2:] + second[2:], first + second[::-1]):
        groups = grouped(order)
        assert [[(m.config.max_num_seqs, m.rate_scale) for m in g] for g in groups] == [
            [(4, 1.5)] * 2, [(4, 4.0)] * 2, [(32, 1.5)] * 2]
    assert [len(g) for g in grouped(first)] == [1, 1, 1]


def test_a_share_of_capacity_is_the_multiplier_offering_it() -> None:
    trace = Trace.from_rows("t", [{"arrival_s": t, "prompt_tokens": 10, "output_tokens": 50}
                                  for t in (0.0, 5.0, 10.0)])  # 150 tokens in 10 s: 15 tok/s
    assert capacity_share(trace, 300.0, 0.5) == 10.0  # 150 tok/s offered at 10x
    assert capacity_share(trace, 100.0, 0.5) == pytest.approx(3.3)  # two significant digits


def test_measurements_of_another_trace_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    save_measurements(_measured(), path)
    with pytest.raises(ConfigError, match="another trace"):
        load_measurements(path, fidelity_trace(40))


def test_a_damaged_file_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    save_measurements(_measured(), path)
    rows = path.read_text().splitlines()
    row = json.loads(rows[0])
    del row["observed"]
    path.write_text(json.dumps(row) + "\n" + "\n".join(rows[1:]) + "\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_measurements(path, fidelity_trace(24))
    with pytest.raises(ConfigError, match="cannot read"):
        load_measurements(tmp_path / "absent.jsonl", fidelity_trace(24))


@pytest.mark.parametrize(("n", "fit"), [(11, 4), (11, 0), (9, 5), (6, 6), (7, 1)])
def test_the_measuring_order_spreads_the_fitted_configs_among_the_judged(n: int, fit: int) -> None:
    order = interleaved(n, fit)
    assert sorted(order) == list(range(n))  # each config once
    if 0 < fit < n:
        positions = [order.index(i) for i in range(fit)]
        assert positions == sorted(positions) and positions[0] == 0
        # Not bunched at the start: most judged configs run before the last fitted one.
        judged_before_last = max(positions) - (fit - 1)
        assert judged_before_last >= (n - fit) * (fit - 1) // fit


def test_engine_steps_times_a_step_by_the_gaps_of_a_token_stream() -> None:
    from benchmarks.engine_steps import gap_spanning, steady_gaps_s

    stream = [0.0, 1.0, 2.0, 2.5, 3.0, 10.0, 11.0]
    assert steady_gaps_s([stream], settle=1) == [1.0, 0.5, 0.5, 7.0]
    assert steady_gaps_s([stream[:2]], settle=1) == []
    assert gap_spanning(stream, 4.0, 5.0) == 7.0  # the step that held the prompt's prefill
    assert gap_spanning(stream, 2.2, 2.4) == 0.5
    with pytest.raises(ValueError, match="no tokens around"):
        gap_spanning(stream, 20.0, 21.0)


def test_host_steal_is_the_stolen_share_of_all_cpu_time_between_two_readings(
        tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # cpu user nice system idle iowait irq softirq steal guest guest_nice (guest is in user)
    stat.write_text("cpu  100 0 50 800 10 0 5 35 7 0\ncpu0 50 0 25 400 5 0 2 18 3 0\n")
    before = cpu_ticks(stat)
    assert before == (35, 1000)
    stat.write_text("cpu  300 0 100 1400 10 0 5 185 7 0\n")
    after = cpu_ticks(stat)
    assert steal_pct(before, after) == 15.0  # 150 of 1,000 ticks
    assert steal_pct(before, before) is None  # no time passed
    assert steal_pct(None, after) is None
    assert cpu_ticks(tmp_path / "absent") is None
    stat.write_text("not a stat file\n")
    assert cpu_ticks(stat) is None
    # The machine's own reading is a pair of counters.
    here = cpu_ticks()
    assert here is None or 0 <= here[0] <= here[1]

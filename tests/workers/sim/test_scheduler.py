"""The scheduler's lazy decodes (autotune/workers/sim/scheduler.py, "Speed") give exactly the result of
walking every running request one by one each step, on random traffic and engines that
preempt, chunk prompts (a decode after a prompt in running order included), share cached
prefixes and run data-parallel ranks, open and closed loop."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import ReplayResult
from autotune.workers.sim.closed_loop import simulate_closed_loop
from autotune.workers.sim.perf import PerfModel
from autotune.workers.sim.profile import find_profile
from autotune.workers.sim.scheduler import _Rank, simulate, simulate_data_parallel
from autotune.workers.sim.shape import engine_shape

TINY = DeploymentSpec(name="t", model="tiny-llama", gpu="cpu", gpu_count=1,
                      tensor_parallel_size=1, max_model_len=1024)
KV_BYTES_PER_TOKEN = 1024  # tiny-llama (tests/workers/sim/test_mechanisms.py)


def _perf(blocks: int, block_size: int, max_model_len: int = 1024, **args: object) -> PerfModel:
    dep = TINY.model_copy(update={"max_model_len": max_model_len})
    shape = engine_shape(EngineConfig(block_size=block_size, **args), dep)  # type: ignore[arg-type]
    profile = find_profile("cpu", "tiny-llama", "cpu", None).with_coefficients(noise_cv=0.0)
    space = blocks * block_size * KV_BYTES_PER_TOKEN / 2**30
    return PerfModel(TINY.gpu_info, TINY.model_info, shape, profile, cpu_kvcache_space_gib=space)


def _both(run: Callable[[], ReplayResult], monkeypatch: pytest.MonkeyPatch
          ) -> tuple[ReplayResult, ReplayResult]:
    lazy = run()
    with monkeypatch.context() as m:
        m.setattr(_Rank, "lazy_decodes", False)
        one_by_one = run()
    return lazy, one_by_one


def _assert_same(a: ReplayResult, b: ReplayResult) -> None:
    for field in ("scheduled_s", "ttft_s", "e2e_s", "output_tokens", "failed", "queue_s"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    # The same gaps, each as often; a shared gap may be recorded once with its count.
    np.testing.assert_array_equal(np.sort(np.repeat(a.itl_s, a.itl_weight)),
                                  np.sort(np.repeat(b.itl_s, b.itl_weight)))
    assert a.engine_stats == b.engine_stats


@st.composite
def _cases(draw: st.DrawFn) -> dict[str, object]:
    n = draw(st.integers(2, 80))
    chunked = draw(st.booleans())
    budget = draw(st.integers(32, 512)) if chunked else draw(st.integers(1024, 1200))
    prefix = draw(st.integers(0, 3))  # requests share a prompt prefix of this many hashes
    return {
        # Bursts (gaps of 0) and lulls; long enough outputs for runs of decode-only steps.
        "gaps": draw(st.lists(st.sampled_from([0.0, 0.0, 0.001, 0.01, 0.05, 0.3]), min_size=n,
                              max_size=n)),
        "prompts": draw(st.lists(st.integers(1, 600), min_size=n, max_size=n)),
        "outputs": draw(st.lists(st.integers(1, 400), min_size=n, max_size=n)),
        "prefix": prefix,
        "engine": {"blocks": draw(st.integers(40, 400)), "block_size": draw(st.sampled_from([32, 64])),
                   "max_num_seqs": draw(st.integers(2, 32)), "max_num_batched_tokens": budget,
                   "enable_chunked_prefill": chunked,
                   "enable_prefix_caching": draw(st.booleans()),
                   "long_prefill_token_threshold": draw(st.sampled_from([0, 16, 48]))},
        "skip": draw(st.booleans()),
    }


def _trace(case: dict[str, object]) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                             tuple[tuple[int, ...], ...]]:
    arrival = np.cumsum(case["gaps"])  # type: ignore[arg-type]
    prompts = np.array(case["prompts"])
    outputs = np.array(case["outputs"])
    hashes = tuple(tuple(range(min(int(case["prefix"]), int(p) // 16)))  # type: ignore[call-overload]
                   + tuple(1000 * (i + 1) + j for j in range(int(p) // 16))
                   for i, p in enumerate(prompts))
    return arrival, prompts, outputs, hashes


@settings(max_examples=150, deadline=None)
@given(case=_cases())
def test_lazy_decodes_replay_as_one_by_one_open_loop(case: dict[str, object]) -> None:
    perf = _perf(**case["engine"])  # type: ignore[arg-type]
    arrival, prompts, outputs, hashes = _trace(case)
    with pytest.MonkeyPatch.context() as monkeypatch:
        a, b = _both(lambda: simulate(perf, arrival, prompts, outputs, hashes, 16,
                                      np.random.default_rng(0), 1e6, bool(case["skip"])),
                     monkeypatch)
    _assert_same(a, b)


@settings(max_examples=100, deadline=None)
@given(case=_cases(), ranks=st.integers(2, 3), lockstep=st.booleans())
def test_lazy_decodes_replay_as_one_by_one_data_parallel(case: dict[str, object], ranks: int,
                                                         lockstep: bool) -> None:
    perf = _perf(**case["engine"])  # type: ignore[arg-type]
    arrival, prompts, outputs, hashes = _trace(case)
    with pytest.MonkeyPatch.context() as monkeypatch:
        a, b = _both(lambda: simulate_data_parallel(
            perf, ranks, lockstep, arrival, prompts, outputs, hashes, 16,
            np.random.default_rng(0), 1e6, bool(case["skip"])), monkeypatch)
    _assert_same(a, b)


@settings(max_examples=100, deadline=None)
@given(case=_cases(), clients=st.integers(1, 16))
def test_lazy_decodes_replay_as_one_by_one_closed_loop(case: dict[str, object],
                                                       clients: int) -> None:
    perf = _perf(**case["engine"])  # type: ignore[arg-type]
    _, prompts, outputs, hashes = _trace(case)
    with pytest.MonkeyPatch.context() as monkeypatch:
        a, b = _both(lambda: simulate_closed_loop(perf, prompts, outputs, hashes, 16, clients,
                                                  np.random.default_rng(0), bool(case["skip"])),
                     monkeypatch)
    _assert_same(a, b)


def test_a_run_switches_between_the_two_ways_and_replays_the_same(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The property tests above can only fail where the two ways could differ: in this fixed
    case the cache is too small (requests are preempted, so some steps are taken one by one)
    and the lazy run also takes most steps lazily; both replay the same."""
    perf = _perf(blocks=12, block_size=32, max_model_len=256, max_num_seqs=12, max_num_batched_tokens=64,
                 enable_chunked_prefill=True, enable_prefix_caching=True,
                 long_prefill_token_threshold=16)
    n = 30
    arrival = np.linspace(0.0, 0.2, n)
    prompts = np.array([40 + 37 * (i % 5) for i in range(n)])
    outputs = np.array([20 + 3 * (i % 7) for i in range(n)])
    hashes = tuple(tuple(range(int(p) // 16)) for p in prompts)
    ways: list[bool] = []
    original = _Rank.complete

    def spy(self: _Rank, *args: object) -> None:
        ways.append(self._lazy_step)
        original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_Rank, "complete", spy)
    lazy = simulate(perf, arrival, prompts, outputs, hashes, 16, np.random.default_rng(0), 1e6)
    lazy_ways, ways[:] = list(ways), []
    monkeypatch.setattr(_Rank, "lazy_decodes", False)
    one_by_one = simulate(perf, arrival, prompts, outputs, hashes, 16, np.random.default_rng(0),
                          1e6)
    _assert_same(lazy, one_by_one)
    assert lazy.engine_stats["preemptions"] > 0
    assert 0 < lazy_ways.count(False) < lazy_ways.count(True)
    assert not any(ways)

"""A sweep row's figures: vllm bench serve's names and definitions
(vllm/benchmarks/serve.py::calculate_metrics)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.domain.records import ReplayResult
from autotune.measure.bench_metrics import send_clump_mean, serve_metrics


def _result(**overrides: object) -> ReplayResult:
    values: dict[str, object] = dict(
        scheduled_s=np.zeros(4), ttft_s=np.array([0.1, 0.2, 0.3, np.nan]),
        e2e_s=np.array([1.1, 0.2, 2.3, np.nan]), output_tokens=np.array([11, 1, 21, 0]),
        failed=np.array([False, False, False, True]), itl_s=np.array([0.1, 0.1, 0.3]),
        itl_weight=np.ones(3), wall_s=4.0)
    return ReplayResult(**{**values, **overrides})  # type: ignore[arg-type]


def test_throughputs_count_completed_requests_over_the_duration() -> None:
    row = serve_metrics(_result(), np.array([100, 200, 300, 400]))
    assert (row["completed"], row["failed"]) == (3, 1)
    assert row["request_throughput"] == pytest.approx(3 / 4.0)
    assert row["output_throughput"] == pytest.approx(33 / 4.0)
    assert row["total_token_throughput"] == pytest.approx((600 + 33) / 4.0)


def test_tpot_leaves_out_one_token_requests_and_percentiles_are_numpys_linear() -> None:
    row = serve_metrics(_result(), np.full(4, 10))
    tpots = [(1.1 - 0.1) / 10 * 1000, (2.3 - 0.3) / 20 * 1000]  # the 1-token request has none
    assert row["mean_tpot_ms"] == pytest.approx(np.mean(tpots))
    assert row["p99_tpot_ms"] == pytest.approx(np.percentile(tpots, 99))
    assert row["median_ttft_ms"] == pytest.approx(200.0)
    assert row["mean_e2el_ms"] == pytest.approx(np.mean([1100, 200, 2300]))
    assert row["mean_itl_ms"] == pytest.approx(np.mean([100, 100, 300]))


def test_weighted_gaps_count_as_many_gaps() -> None:
    """The simulator stands one value for a run of equal gaps: three gaps of 100 ms and one of
    300 ms weigh as such."""
    row = serve_metrics(_result(itl_s=np.array([0.1, 0.3]), itl_weight=np.array([3.0, 1.0])),
                        np.full(4, 10))
    assert row["mean_itl_ms"] == pytest.approx(150.0)
    assert row["median_itl_ms"] == pytest.approx(100.0)


def test_no_completed_request_gives_no_latency() -> None:
    row = serve_metrics(_result(failed=np.ones(4, dtype=bool), itl_s=np.array([])), np.ones(4))
    assert row["completed"] == 0 and row["output_throughput"] == 0
    assert math.isnan(row["median_ttft_ms"]) and math.isnan(row["p99_itl_ms"])


def test_send_clump_mean_counts_requests_per_clump_after_the_first_round() -> None:
    # A first round of 4 at once (skipped), then clumps of 2, 1 and 3: sends 0.3 ms apart are
    # one clump, 1 ms or more apart two.
    sends = [0, 0, 0, 0, 0.5, 0.5003, 0.9, 1.4, 1.4001, 1.4011 - 1e-6]  # 0.999 ms: one clump
    assert send_clump_mean(np.array(sends), skip=4) == pytest.approx(6 / 3)
    assert send_clump_mean(np.array([0.0, 1.0, 2.0]), skip=0) == 1.0  # desynchronised
    assert np.isnan(send_clump_mean(np.array([0.0, 1.0]), skip=1))

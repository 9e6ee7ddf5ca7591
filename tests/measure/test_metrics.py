from __future__ import annotations

import numpy as np
import pytest

from autotune.domain.records import ReplayResult
from autotune.domain.slo import parse_slo
from autotune.measure.metrics import (
    QUANTILE_PCTS,
    concurrency,
    latency_quantiles_ms,
    meets,
    slo_violations,
    summarize,
)


def result(**overrides: object) -> ReplayResult:
    values: dict[str, object] = dict(
        scheduled_s=np.array([0.0, 1.0, 2.0, 3.0]),
        ttft_s=np.array([0.1, 0.2, 0.3, np.nan]),
        e2e_s=np.array([1.1, 2.2, 0.3, np.nan]),
        output_tokens=np.array([11, 21, 1, 0]),
        failed=np.array([False, False, False, True]),
        itl_s=np.array([0.1, 0.5]),
        itl_weight=np.array([3, 1]),
        wall_s=4.0,
    )
    values.update(overrides)
    return ReplayResult(**values)  # type: ignore[arg-type]


def test_summary_fields() -> None:
    s = summarize(result())
    assert (s.requests, s.completed, s.error_rate) == (4, 3, 0.25)
    assert s.output_tok_s == pytest.approx(33 / 4)
    # TPOT only for requests with more than one token: (1.1-0.1)/10 and (2.2-0.2)/20.
    assert s.tpot_p50_ms == pytest.approx(100.0)
    assert s.ttft_p50_ms == pytest.approx(200.0)


def test_itl_percentiles_respect_weights() -> None:
    s = summarize(result())
    assert s.itl_p50_ms == pytest.approx(100.0)  # three of four gaps are 0.1 s
    assert s.itl_p99_ms == pytest.approx(500.0)


def test_slo_violations_are_relative_and_count_errors() -> None:
    s = summarize(result(failed=np.array([False, False, False, False]),
                         ttft_s=np.array([0.1, 0.2, 0.3, 0.4]), e2e_s=np.array([1, 2, 1, 1.0]),
                         output_tokens=np.array([2, 2, 2, 2])))
    slo = parse_slo("ttft_p99<=200ms")
    v = slo_violations(s, slo)
    assert v["ttft_p99_ms"] == pytest.approx((s.ttft_p99_ms - 200) / 200) and v["ttft_p99_ms"] > 0
    assert v["error_rate"] == 0 and not meets(s, slo)
    assert meets(s, parse_slo("ttft_p99<=1s"))
    assert not meets(summarize(result()), parse_slo("ttft_p99<=10s"))  # one request failed


def test_goodput_counts_requests_within_every_per_request_ceiling() -> None:
    r = result(failed=np.array([False, False, False, False]),
               ttft_s=np.array([0.1, 0.2, 0.3, 0.4]), e2e_s=np.array([1.1, 2.2, 0.5, 4.4]),
               output_tokens=np.array([11, 21, 3, 41]))
    # TPOT: 0.1, 0.1, 0.1, 0.1 s; TTFT <= 250 ms keeps the first two.
    assert summarize(r, parse_slo("ttft_p99<=250ms,tpot_p99<=150ms")).goodput_request_s == (
        pytest.approx(2 / 4.0))
    assert summarize(r, parse_slo("e2e_p99<=2s")).goodput_request_s == pytest.approx(2 / 4.0)
    assert summarize(r).goodput_request_s is None


def test_latency_quantiles_match_the_summary() -> None:
    q = latency_quantiles_ms(result())
    assert q["pcts"] == list(QUANTILE_PCTS) and 0.0 in q["pcts"] and 100.0 in q["pcts"]
    at = {p: i for i, p in enumerate(q["pcts"])}
    # The failed request is left out: TTFTs 0.1, 0.2, 0.3 s.
    assert (q["ttft_ms"][at[0.0]], q["ttft_ms"][at[100.0]]) == pytest.approx((100.0, 300.0))
    s = summarize(result())
    assert q["ttft_ms"][at[50.0]] == pytest.approx(s.ttft_p50_ms)
    assert q["e2e_ms"][at[99.0]] == pytest.approx(s.e2e_p99_ms)
    assert q["tpot_ms"] == pytest.approx([100.0] * len(QUANTILE_PCTS))  # 1-token requests: none


def test_latency_quantiles_of_a_replay_that_served_nothing_are_nan() -> None:
    q = latency_quantiles_ms(result(failed=np.array([True] * 4)))
    assert all(np.isnan(q["e2e_ms"]))


def test_concurrency_is_the_time_average_and_the_peak_in_flight() -> None:
    # In flight: [0, 1.1], [1, 3.2], [2, 2.3]; the failed request is not counted.
    mean, peak = concurrency(result())
    assert mean == pytest.approx((1.1 + 2.2 + 0.3) / 4.0) and peak == 2
    # Output tok/s over the mean in flight: output tokens per second of E2E, a user's rate.
    assert summarize(result()).output_tok_s / mean == pytest.approx(33 / 3.6)
    # One request ending as the next starts: never two at once.
    back_to_back = result(scheduled_s=np.array([0.0, 1.0, 2.0, 3.0]),
                          e2e_s=np.array([1.0, 1.0, 1.0, np.nan]))
    assert concurrency(back_to_back)[1] == 1
    assert concurrency(result(failed=np.array([True] * 4))) == (0.0, 0)

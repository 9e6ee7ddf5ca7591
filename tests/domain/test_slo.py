from __future__ import annotations

import pytest

from autotune.domain.slo import parse_slo
from autotune.errors import ConfigError


def test_parses_ceilings_in_both_units() -> None:
    slo = parse_slo("ttft_p99<=2s, tpot_p99<=100ms,e2e_p99.9<=30.5s")
    assert slo.to_dict() == {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 100.0, "e2e_p99_9_ms": 30500.0}


def test_round_trips_through_its_dict() -> None:
    slo = parse_slo("ttft_p99<=2s,itl_p90<=40ms")
    assert type(slo).from_dict(slo.to_dict()) == slo


@pytest.mark.parametrize("text, fragment", [
    ("", "empty"),
    ("ttft_p99<2s", "cannot read SLO term"),
    ("ttft_p99<=2", "cannot read SLO term"),
    ("ttft_p99<=2min", "cannot read SLO term"),
    ("latency_p99<=2s", "unknown SLO metric 'latency'"),
    ("ttft_p95<=2s", "unknown percentile 'p95'"),
    ("ttft_p99<=0s", "must be positive"),
    ("ttft_p99<=1s,ttft_p99<=2s", "twice"),
])
def test_malformed_slo_names_the_problem(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_slo(text)

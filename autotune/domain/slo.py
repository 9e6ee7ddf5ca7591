"""SLO ceilings such as "ttft_p99<=2s,tpot_p99<=100ms"."""

from __future__ import annotations

import re
from dataclasses import dataclass

from autotune.errors import ConfigError, SettingError

DEFAULT_SLO = "ttft_p99<=2s,tpot_p99<=50ms"  # a campaign's, where none is given

METRICS = ("ttft", "tpot", "itl", "e2e")
PERCENTILES = ("p50", "p90", "p99", "p99.9")
_UNIT_TO_MS = {"ms": 1.0, "s": 1000.0}
_TERM = re.compile(
    r"^\s*(?P<metric>[a-z0-9]+)_(?P<pct>p[0-9.]+)\s*<=\s*(?P<value>[0-9]+(?:\.[0-9]+)?)\s*"
    r"(?P<unit>ms|s)\s*$"
)
_EXAMPLE = 'e.g. {slo} "ttft_p99<=2s,tpot_p99<=100ms"'  # a SettingError's template


@dataclass(frozen=True)
class Ceiling:
    metric: str  # ttft, tpot, itl, e2e
    percentile: str  # p50, p90, p99, p99.9
    limit_ms: float

    @property
    def key(self) -> str:
        """The latency-summary field this ceiling bounds, e.g. ttft_p99_ms."""
        return f"{self.metric}_{self.percentile.replace('.', '_')}_ms"

    def __str__(self) -> str:
        return f"{self.metric}_{self.percentile}<={self.limit_ms:g}ms"


@dataclass(frozen=True)
class SLO:
    ceilings: tuple[Ceiling, ...]

    def __str__(self) -> str:
        return ",".join(str(c) for c in self.ceilings)

    def to_dict(self) -> dict[str, float]:
        return {c.key: c.limit_ms for c in self.ceilings}

    @classmethod
    def from_dict(cls, data: dict[str, float]) -> SLO:
        return parse_slo(",".join(f"{_key_to_term(k)}<={v}ms" for k, v in data.items()))


def _key_to_term(key: str) -> str:
    metric, pct = key.removesuffix("_ms").split("_", 1)
    return f"{metric}_{pct.replace('_', '.')}"


def parse_slo(text: str) -> SLO:
    """Parse a comma-separated list of `<metric>_<percentile><=<value><unit>` ceilings."""
    if not text or not text.strip():
        raise SettingError("the SLO is empty; give at least one ceiling, " + _EXAMPLE)
    ceilings: list[Ceiling] = []
    for term in text.split(","):
        m = _TERM.match(term)
        if not m:
            raise SettingError(
                "cannot read SLO term {term!r}: expected <metric>_<percentile><=<value><ms|s>, "
                + _EXAMPLE, term=term.strip())
        metric, pct = m["metric"], m["pct"]
        if metric not in METRICS:
            raise ConfigError(
                f"unknown SLO metric {metric!r} in {term.strip()!r}; use one of {', '.join(METRICS)}"
            )
        if pct not in PERCENTILES:
            raise ConfigError(
                f"unknown percentile {pct!r} in {term.strip()!r}; use one of {', '.join(PERCENTILES)}"
            )
        limit_ms = float(m["value"]) * _UNIT_TO_MS[m["unit"]]
        if limit_ms <= 0:
            raise ConfigError(f"SLO ceiling {term.strip()!r} must be positive")
        ceiling = Ceiling(metric, pct, limit_ms)
        if any(c.key == ceiling.key for c in ceilings):
            raise ConfigError(f"SLO names {ceiling.key} twice; give each ceiling once")
        ceilings.append(ceiling)
    return SLO(tuple(ceilings))

"""One sub-trace per path of the tuning guide (hot / warm / cold, as `stats.paths` classifies
them), so that a config can be tuned per path. Each sub-trace keeps its requests' times,
shifted to start at 0."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from autotune.traffic.parquet_store import write_parquet
from autotune.traffic.stats import paths
from autotune.traffic.trace import Trace

PATH_NAMES = ("hot", "warm", "cold")


def split_by_path(trace: Trace, *, hot_max_tokens: int = 512,
                  warm_min_share: float = 0.01) -> dict[str, Trace]:
    """{path: sub-trace} for every path that has requests."""
    return split_into(trace, {name: (name,) for name in PATH_NAMES},
                      hot_max_tokens=hot_max_tokens, warm_min_share=warm_min_share)


def split_into(trace: Trace, groups: dict[str, tuple[str, ...]], *, hot_max_tokens: int = 512,
               warm_min_share: float = 0.01) -> dict[str, Trace]:
    """{group: sub-trace} for every group that has requests, a group being the union of some
    paths (e.g. {"hot": ("hot",), "cold": ("warm", "cold")}); requests keep their order."""
    labels = np.asarray(paths(trace, hot_max_tokens=hot_max_tokens, warm_min_share=warm_min_share))
    out: dict[str, Trace] = {}
    for name, members in groups.items():
        index = np.flatnonzero(np.isin(labels, members))
        if len(index):
            out[name] = trace.take(index, f"{trace.name}-{name}")
    return out


def write_split(parts: dict[str, Trace], out_dir: Path) -> dict[str, Path]:
    """Write each sub-trace as out_dir/PATH.parquet (each file atomically)."""
    written: dict[str, Path] = {}
    for name, part in parts.items():
        written[name] = out_dir / f"{name}.parquet"
        write_parquet(part, written[name])
    return written

"""The Parquet store that `traffic import` writes (`autotune.traffic.parquet_store`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.traffic.formats.trace_format import MagicBytes, Notes, TraceFormat

if TYPE_CHECKING:
    from autotune.traffic.trace import Trace


def read_parquet_trace(path: Path) -> tuple[Trace, Notes]:
    """Checked as it is read; nothing to repair."""
    from autotune.traffic.parquet_store import read_parquet

    return read_parquet(path), []


FORMAT = TraceFormat("parquet", MagicBytes(b"PAR1"), read_parquet_trace, time="seconds",
                     notes="the store `traffic import` writes; must be sorted")

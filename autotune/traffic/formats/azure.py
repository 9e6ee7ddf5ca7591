"""Azure LLM inference traces, 2023 and 2024: a CSV of TIMESTAMP (wall clock, 100 ns; UTC),
ContextTokens, GeneratedTokens."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.traffic.formats.trace_format import CsvHeader, Notes, TraceFormat

if TYPE_CHECKING:
    from autotune.traffic.trace import Trace

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def read_azure(path: Path) -> tuple[Trace, Notes]:
    """Sorted by time if they are not (the published files are)."""
    from autotune.traffic.columns import RawTable, build_trace
    from autotune.traffic.formats._walk import csv_rows, missing_columns_error
    from autotune.traffic.trace import file_digest

    header, rows = csv_rows(path)
    if not all(c in header for c in COLUMNS):
        raise missing_columns_error(path, header, list(COLUMNS))
    table = RawTable(path, labels=dict(zip(("arrival_s", "prompt_tokens", "output_tokens"),
                                           COLUMNS, strict=True)))
    for row, rec in rows:
        table.add(row, {"arrival_s": rec["TIMESTAMP"], "prompt_tokens": rec["ContextTokens"],
                        "output_tokens": rec["GeneratedTokens"]})
    return build_trace(table, name=path.stem, digest=file_digest(path), time_unit="iso"), []


FORMAT = TraceFormat("azure", CsvHeader(COLUMNS), read_azure,
                     time="wall clock (100 ns), read as UTC",
                     notes="Azure LLM inference traces 2023 and 2024")

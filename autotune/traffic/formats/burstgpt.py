"""BurstGPT CSV: Timestamp (seconds from the start), Model, Request tokens, Response tokens,
Total tokens, Log Type. Failed requests (zero response tokens) are dropped."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import TraceError
from autotune.traffic.formats.trace_format import CsvHeader, Notes, TraceFormat

if TYPE_CHECKING:
    from autotune.traffic.trace import Trace

COLUMNS = ("Timestamp", "Request tokens", "Response tokens")  # what it is recognised and read by


def read_burstgpt(path: Path, model: str | None = None) -> tuple[Trace, Notes]:
    """`model` keeps only that model's rows."""
    from autotune.traffic.columns import RawTable, build_trace
    from autotune.traffic.formats._walk import csv_rows, missing_columns_error
    from autotune.traffic.trace import file_digest

    header, rows = csv_rows(path)
    wanted = list(COLUMNS) + (["Model"] if model else [])
    if not all(c in header for c in wanted):
        raise missing_columns_error(path, header, wanted)
    table = RawTable(path, labels={"arrival_s": "Timestamp", "prompt_tokens": "Request tokens",
                                   "output_tokens": "Response tokens"})
    failed = other_model = 0
    models: set[str] = set()
    for row, rec in rows:
        if model is not None:
            models.add(rec.get("Model") or "")
            if rec.get("Model") != model:
                other_model += 1
                continue
        response = rec.get("Response tokens")
        if response is not None and response.strip() in ("0", "0.0"):
            failed += 1
            continue
        table.add(row, {"arrival_s": rec["Timestamp"], "prompt_tokens": rec["Request tokens"],
                        "output_tokens": response})
    if model is not None and not len(table):
        raise TraceError(f"{path}: no rows of model {model!r}; the file has "
                         f"{', '.join(sorted(models)) or 'no models'}")
    notes = [f"dropped {failed} failed requests (zero response tokens)"] if failed else []
    if other_model:
        notes.append(f"kept model {model!r}, dropped {other_model} rows of other models")
    return build_trace(table, name=path.stem, digest=file_digest(path), absolute_time=False), notes


FORMAT = TraceFormat("burstgpt", CsvHeader(COLUMNS), read_burstgpt, time="seconds from the start",
                     notes="rows with zero response tokens are failures and are dropped; "
                           "--model keeps one model's rows",
                     read_one_model=read_burstgpt)

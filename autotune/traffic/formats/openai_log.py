"""The capture proxy's JSONL log (`autotune.traffic.capture_format`), epoch seconds."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.traffic import capture_format
from autotune.traffic.formats.trace_format import JsonObject, Notes, TraceFormat

if TYPE_CHECKING:
    from autotune.traffic.trace import Trace


def read_capture(path: Path) -> tuple[Trace, Notes]:
    """Sorted by arrival, since the proxy writes a record when its response finishes. A partial
    last line (a crash while writing it) is skipped, with a note."""
    from autotune.traffic.columns import RawTable, build_trace, row_error
    from autotune.traffic.formats._walk import json_lines
    from autotune.traffic.trace import file_digest

    table = RawTable(path, labels={v: k for k, v in capture_format.COLUMNS.items()})
    partial: list[int] = []
    for row, rec in json_lines(path, partial_tail=partial):
        version = rec.get("v", capture_format.CAPTURE_FORMAT_VERSION)
        if version != capture_format.CAPTURE_FORMAT_VERSION:
            raise row_error(path, row, "v", f"capture format version {version!r}; this autotune "
                            f"reads version {capture_format.CAPTURE_FORMAT_VERSION}")
        table.add(row, capture_format.trace_values(rec))
    # The proxy writes whole lines, so a cut last line is a crash mid-write: skip it.
    notes = [f"skipped a partial last line (row {partial[0]}): the capture was cut off while "
             "writing it"] if partial else []
    return build_trace(table, name=path.stem, digest=file_digest(path), absolute_time=True), notes


FORMAT = TraceFormat("openai-log", JsonObject(capture_format.is_capture_record), read_capture,
                     time="epoch seconds", notes="the capture proxy's log",
                     help="the capture proxy's log")

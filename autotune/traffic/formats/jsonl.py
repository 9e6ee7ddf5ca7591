"""Our JSONL: one object a line with the trace's own column names, sorted by arrival. What no
other format recognises is read as this, whose reader then names what is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.traffic.formats.trace_format import Notes, Otherwise, TraceFormat

if TYPE_CHECKING:
    from autotune.traffic.trace import Trace

KEYS = ("arrival_s", "prompt_tokens", "output_tokens", "max_tokens", "api", "session_id",
        "tenant", "priority", "hash_ids", "hash_block_tokens", "prompt")


def read_jsonl(path: Path) -> tuple[Trace, Notes]:
    """An arrival earlier than the line before is an error, not repaired."""
    from autotune.traffic.columns import RawTable, build_trace
    from autotune.traffic.formats._walk import json_lines
    from autotune.traffic.trace import file_digest

    table = RawTable(path)
    for row, rec in json_lines(path):
        table.add(row, {k: rec.get(k) for k in KEYS})
    return build_trace(table, name=path.stem, digest=file_digest(path), order="strict"), []


FORMAT = TraceFormat("jsonl", Otherwise(), read_jsonl, time="seconds",
                     notes="ours; must be sorted")

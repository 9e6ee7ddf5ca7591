"""Mooncake (FAST'25) JSONL: timestamp in ms from the start, input_length, output_length,
hash_ids of 512-token prompt blocks."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.traffic.formats.trace_format import JsonObject, Notes, TraceFormat

if TYPE_CHECKING:
    from autotune.traffic.trace import Trace

BLOCK_TOKENS = 512  # Mooncake's hash_ids each stand for 512 prompt tokens
KEYS = ("timestamp", "input_length", "output_length")


def is_mooncake_record(rec: dict[str, Any]) -> bool:
    return all(k in rec for k in KEYS)


def read_mooncake(path: Path) -> tuple[Trace, Notes]:
    """Sorted by arrival if it is not."""
    from autotune.traffic.columns import RawTable, build_trace
    from autotune.traffic.formats._walk import json_lines
    from autotune.traffic.trace import file_digest

    table = RawTable(path, labels={"arrival_s": "timestamp", "prompt_tokens": "input_length",
                                   "output_tokens": "output_length"})
    for row, rec in json_lines(path):
        table.add(row, {"arrival_s": rec.get("timestamp"), "prompt_tokens": rec.get("input_length"),
                        "output_tokens": rec.get("output_length"), "hash_ids": rec.get("hash_ids")})
    return build_trace(table, name=path.stem, digest=file_digest(path), time_unit="ms",
                       absolute_time=False, hash_block_tokens=BLOCK_TOKENS), []


FORMAT = TraceFormat("mooncake", JsonObject(is_mooncake_record), read_mooncake,
                     time="ms from the start", notes="hash_ids of 512-token blocks")

"""Every trace format autotune reads, one registration each (trace_format.py); a new format is
a module of its own with its FORMAT, listed here.

The order is the one `--format`'s help and its error list them in, and the order detection
tries formats of the same kind of signature in (detect.py: first bytes, then the first line as
a JSON object, then as a CSV header).
"""

from __future__ import annotations

from autotune.traffic.formats import azure, burstgpt, jsonl, mooncake, openai_log, parquet
from autotune.traffic.formats.trace_format import TraceFormat

TRACE_FORMATS: tuple[TraceFormat, ...] = (azure.FORMAT, mooncake.FORMAT, burstgpt.FORMAT,
                                          openai_log.FORMAT, jsonl.FORMAT, parquet.FORMAT)
# What --format takes: auto (recognised by content) or a format's name.
FORMATS = ("auto", *(f.name for f in TRACE_FORMATS))


def by_name(name: str) -> TraceFormat:
    return next(f for f in TRACE_FORMATS if f.name == name)

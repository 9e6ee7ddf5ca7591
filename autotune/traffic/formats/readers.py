"""One reader per file format. Each walks its file, collects raw columns and leaves every check
to `autotune.traffic.columns.build_trace`; the notes say what a reader repaired or dropped."""

from __future__ import annotations

from pathlib import Path

from autotune.errors import TraceError
from autotune.traffic import capture_format
from autotune.traffic.columns import RawTable, build_trace, row_error
from autotune.traffic.formats._walk import csv_rows, json_lines, missing_columns_error
from autotune.traffic.trace import Trace, file_digest

MOONCAKE_BLOCK_TOKENS = 512  # Mooncake's hash_ids each stand for 512 prompt tokens
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens",
                    "Log Type")
OUR_KEYS = ("arrival_s", "prompt_tokens", "output_tokens", "max_tokens", "api", "session_id",
            "tenant", "priority", "hash_ids", "hash_block_tokens", "prompt")

Notes = list[str]


def read_jsonl(path: Path) -> tuple[Trace, Notes]:
    """Our JSONL: one object a line with the trace's own column names; sorted by arrival (an
    arrival earlier than the line before is an error)."""
    table = RawTable(path)
    for row, rec in json_lines(path):
        table.add(row, {k: rec.get(k) for k in OUR_KEYS})
    return build_trace(table, name=path.stem, digest=file_digest(path), order="strict"), []


def read_mooncake(path: Path) -> tuple[Trace, Notes]:
    """Mooncake (FAST'25) JSONL: timestamp in ms from the start, input_length, output_length,
    hash_ids of 512-token prompt blocks. Sorted by arrival if it is not."""
    table = RawTable(path, labels={"arrival_s": "timestamp", "prompt_tokens": "input_length",
                                   "output_tokens": "output_length"})
    for row, rec in json_lines(path):
        table.add(row, {"arrival_s": rec.get("timestamp"), "prompt_tokens": rec.get("input_length"),
                        "output_tokens": rec.get("output_length"), "hash_ids": rec.get("hash_ids")})
    return build_trace(table, name=path.stem, digest=file_digest(path), time_unit="ms",
                       absolute_time=False, hash_block_tokens=MOONCAKE_BLOCK_TOKENS), []


def read_azure(path: Path) -> tuple[Trace, Notes]:
    """Azure LLM inference traces, 2023 and 2024: TIMESTAMP (wall clock, 100 ns; UTC),
    ContextTokens, GeneratedTokens. Sorted by time if they are not (the published files are)."""
    header, rows = csv_rows(path)
    if not all(c in header for c in AZURE_COLUMNS):
        raise missing_columns_error(path, header, list(AZURE_COLUMNS))
    table = RawTable(path, labels=dict(zip(("arrival_s", "prompt_tokens", "output_tokens"),
                                           AZURE_COLUMNS, strict=True)))
    for row, rec in rows:
        table.add(row, {"arrival_s": rec["TIMESTAMP"], "prompt_tokens": rec["ContextTokens"],
                        "output_tokens": rec["GeneratedTokens"]})
    return build_trace(table, name=path.stem, digest=file_digest(path), time_unit="iso"), []


def read_burstgpt(path: Path, model: str | None = None) -> tuple[Trace, Notes]:
    """BurstGPT CSV: Timestamp (seconds from the start), Model, Request tokens, Response tokens,
    Total tokens, Log Type. Failed requests (zero response tokens) are dropped; `model` keeps only
    that model's rows."""
    header, rows = csv_rows(path)
    wanted = ["Timestamp", "Request tokens", "Response tokens"] + (["Model"] if model else [])
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


def read_capture(path: Path) -> tuple[Trace, Notes]:
    """The capture proxy's JSONL log (`autotune.traffic.capture_format`); sorted by arrival,
    since the proxy writes a record when its response finishes. A partial last line (a crash
    while writing it) is skipped, with a note."""
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

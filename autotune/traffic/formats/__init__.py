"""Trace file formats, recognised by content (never by file name), and one entry point.

| format | recognised by | time | notes |
|---|---|---|---|
| parquet | the Parquet magic bytes | s | the store (`autotune.traffic.parquet_store`) |
| jsonl | JSON lines with arrival_s, prompt_tokens, output_tokens | s | ours; must be sorted |
| openai-log | JSON lines with ts, api, prompt_tokens, output_tokens | epoch s | the capture proxy's log |
| mooncake | JSON lines with timestamp, input_length, output_length | ms | 512-token hash blocks |
| azure | CSV header TIMESTAMP, ContextTokens, GeneratedTokens | wall clock | 2023 and 2024 traces |
| burstgpt | CSV header Timestamp, Request tokens, Response tokens, ... | s | failed rows dropped |
| mapped | (never guessed: --map) | --time-unit | any CSV or JSONL |

Repairs, the same everywhere: importers of external formats (all but jsonl and parquet) sort rows
stably by arrival; equal arrivals are kept; arrivals are shifted to start at 0. Everything else
that is wrong is a `TraceError` naming the file, the row and the column (rows as the file counts
them: the line of a CSV or JSONL file, the header being line 1; the record of a Parquet file,
from 1). A problem of the whole file names the file and says what is wrong with it: empty, not
readable as Parquet, no or another schema version, a column of the wrong type.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import SettingError, SettingText, TraceError
from autotune.traffic import capture_format
from autotune.traffic.columns import TimeUnit, empty_error
from autotune.traffic.formats import readers
from autotune.traffic.formats._walk import first_line
from autotune.traffic.formats.mapped import read_mapped
from autotune.traffic.trace import DEMO_TRACE, Trace

FORMATS = ("auto", "azure", "mooncake", "burstgpt", "openai-log", "jsonl", "parquet")


@dataclass(frozen=True)
class Imported:
    trace: Trace
    format: str
    notes: tuple[str, ...]  # repairs and drops, for the user to read


def detect_format(path: Path) -> str:
    """The format of a file, by content. Unknown CSV headers are an error; anything else that is
    not recognised is read as our JSONL, whose reader then names what is wrong."""
    with path.open("rb") as f:
        if f.read(4) == b"PAR1":
            return "parquet"
    line = first_line(path)
    if not line:
        raise empty_error(path)
    if line.startswith("{"):
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            return "jsonl"
        if isinstance(rec, dict):
            if all(k in rec for k in readers.MOONCAKE_KEYS):
                return "mooncake"
            if capture_format.is_capture_record(rec):
                return "openai-log"
        return "jsonl"
    try:
        header = [h.strip() for h in next(csv.reader([line]), [])]
    except csv.Error:  # e.g. a bare carriage return: not a CSV header at all
        return "jsonl"
    if all(c in header for c in readers.AZURE_COLUMNS):
        return "azure"
    if all(c in header for c in ("Timestamp", "Request tokens", "Response tokens")):
        return "burstgpt"
    if len(header) > 1:
        raise TraceError(SettingText(
            "{path}: row 1, column '*': a CSV header ({header}) that no importer recognises; "
            "import it with {map} arrival=COLUMN,prompt_tokens=COLUMN,output_tokens=COLUMN",
            path=path, header=", ".join(header)[:200]))
    return "jsonl"


def import_file(path: Path, fmt: str = "auto", *, model: str | None = None,
                mapping: dict[str, str] | None = None, time_unit: TimeUnit = "s") -> Imported:
    """Read and check a trace file in the given format (auto: recognised by content)."""
    if not path.is_file():
        raise TraceError(SettingText("trace file {path} does not exist; pass {trace} with a trace "
                                     "file (the bundled demo trace is {demo})", path=path,
                                     demo=DEMO_TRACE))
    if fmt not in FORMATS:
        raise SettingError("{format} {fmt!r} is unknown; use {formats}", fmt=fmt,
                           formats=", ".join(FORMATS))
    if mapping is not None:
        if fmt != "auto":
            raise SettingError("{map} reads any CSV or JSONL itself; leave {format} at auto")
        trace, notes = read_mapped(path, mapping, time_unit)
        return Imported(trace, "mapped", tuple(notes))
    if fmt == "auto":
        fmt = detect_format(path)
    if model is not None and fmt != "burstgpt":
        raise SettingError("{model} filters BurstGPT traces; this file is {fmt}", fmt=fmt)
    if fmt == "parquet":
        from autotune.traffic.parquet_store import read_parquet

        return Imported(read_parquet(path), fmt, ())
    if fmt == "burstgpt":
        trace, notes = readers.read_burstgpt(path, model)
    else:
        reader: Callable[[Path], tuple[Trace, list[str]]] = {
            "azure": readers.read_azure, "mooncake": readers.read_mooncake,
            "openai-log": readers.read_capture, "jsonl": readers.read_jsonl}[fmt]
        trace, notes = reader(path)
    return Imported(trace, fmt, tuple(notes))


def load_trace(path: str | Path) -> Trace:
    """Load and validate a trace in any format an importer reads, recognised by its content."""
    return read_trace(Path(path))


def read_trace(path: Path) -> Trace:
    return import_file(path).trace

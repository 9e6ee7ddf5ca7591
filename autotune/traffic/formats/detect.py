"""Which registered format a file is, by content: its first bytes, then its first line as a
JSON object, then as a CSV header; formats of one kind of signature in the registry's order."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from autotune.errors import SettingText, TraceError
from autotune.traffic.formats.registry import TRACE_FORMATS
from autotune.traffic.formats.trace_format import CsvHeader, JsonObject, MagicBytes, Otherwise

_Kind = TypeVar("_Kind", MagicBytes, JsonObject, CsvHeader, Otherwise)


def detect_format(path: Path) -> str:
    """The format of a file, by content. Unknown CSV headers are an error; anything else that is
    not recognised is read as our JSONL (the Otherwise format), whose reader then names what is
    wrong."""
    for name, magic in _registered(MagicBytes):
        with path.open("rb") as f:
            if f.read(len(magic.prefix)) == magic.prefix:
                return name
    line = first_line(path)
    if not line:
        from autotune.traffic.columns import empty_error  # numpy: not at the CLI's start

        raise empty_error(path)
    found = _json_format(line) if line.startswith("{") else _csv_format(path, line)
    return found or next(name for name, _ in _registered(Otherwise))


def first_line(path: Path) -> str:
    """The first non-blank line, decoded leniently (for recognising the format only)."""
    with path.open("rb") as f:
        for raw in f:
            if raw.strip():
                return raw.decode("utf-8", errors="replace").strip()
    return ""


def _registered(kind: type[_Kind]) -> Iterator[tuple[str, _Kind]]:
    """The registered formats recognised by this kind of signature, in the registry's order."""
    for trace_format in TRACE_FORMATS:
        if isinstance(trace_format.recognised_by, kind):
            yield trace_format.name, trace_format.recognised_by


def _json_format(line: str) -> str | None:
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(rec, dict):
        return None
    return next((name for name, obj in _registered(JsonObject) if obj.accepts(rec)), None)


def _csv_format(path: Path, line: str) -> str | None:
    try:
        header = [h.strip() for h in next(csv.reader([line]), [])]
    except csv.Error:  # e.g. a bare carriage return: not a CSV header at all
        return None
    found = next((name for name, csv_header in _registered(CsvHeader)
                  if all(c in header for c in csv_header.columns)), None)
    if found is None and len(header) > 1:
        raise TraceError(SettingText(
            "{path}: row 1, column '*': a CSV header ({header}) that no importer recognises; "
            "import it with {map} arrival=COLUMN,prompt_tokens=COLUMN,output_tokens=COLUMN",
            path=path, header=", ".join(header)[:200]))
    return found

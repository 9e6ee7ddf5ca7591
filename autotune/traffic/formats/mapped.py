"""Any CSV or JSONL file (a gateway's access log, say) read through a column mapping.

``--map arrival=ts,prompt_tokens=usage.prompt_tokens,output_tokens=usage.completion_tokens``
names, per trace column, the source column: a CSV header, or a key of the JSON objects, where a
dotted path walks into nested objects (and a number into lists: ``choices.0.index``); a key that
itself contains dots is found first. CSV or JSONL is told by content (a first line opening with
``{`` is JSONL). Empty CSV cells are missing values. Times are in `time_unit` (s, ms, us, ns, or
iso for ISO 8601 strings); an `api` value naming a path (``/v1/chat/completions``) is read as
chat or completion.
"""

from __future__ import annotations

from pathlib import Path

from autotune.errors import SettingError
from autotune.traffic.columns import TIME_UNITS_S, RawTable, TimeUnit, build_trace
from autotune.traffic.formats._walk import csv_rows, json_lines, missing_columns_error
from autotune.traffic.formats.detect import first_line
from autotune.traffic.trace import Trace, file_digest

TARGETS = {"arrival": "arrival_s", "arrival_s": "arrival_s", "prompt_tokens": "prompt_tokens",
           "output_tokens": "output_tokens", "max_tokens": "max_tokens", "api": "api",
           "session_id": "session_id", "session": "session_id", "tenant": "tenant",
           "priority": "priority", "hash_ids": "hash_ids",
           "hash_block_tokens": "hash_block_tokens", "text": "prompt", "prompt": "prompt"}
REQUIRED = ("arrival_s", "prompt_tokens", "output_tokens")


def parse_mapping(spec: str) -> dict[str, str]:
    """``target=source,...`` -> {trace column: source column}."""
    mapping: dict[str, str] = {}
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        target, eq, source = part.partition("=")
        target, source = target.strip(), source.strip()
        if not eq or not source:
            raise SettingError("{map} entry {part!r} is not target=source", part=part)
        if target not in TARGETS:
            raise SettingError("{map} target {target!r} is unknown; use {targets}", target=target,
                               targets=", ".join(sorted(set(TARGETS))))
        mapping[TARGETS[target]] = source
    missing = [t for t in REQUIRED if t not in mapping]
    if missing:
        raise SettingError("{map} needs {missing} (e.g. {map} arrival=ts,"
                           "prompt_tokens=usage.prompt_tokens,output_tokens=usage.completion_tokens)",
                           missing=", ".join("arrival" if m == "arrival_s" else m
                                             for m in missing))
    return mapping


def check_time_unit(unit: str) -> TimeUnit:
    if unit not in (*TIME_UNITS_S, "iso"):
        raise SettingError("{time_unit} {unit!r} is unknown; use s, ms, us, ns or iso",
                           unit=unit)
    return unit  # type: ignore[return-value]


def lookup(obj: object, path: str) -> object:
    if isinstance(obj, dict) and path in obj:
        return obj[path]
    current = obj
    for part in path.split("."):
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return None
    return current


def _api(value: object) -> object:
    if isinstance(value, str):
        low = value.lower()
        if "chat" in low:
            return "chat"
        if "completion" in low:
            return "completion"
    return value


def read_mapped(path: Path, mapping: dict[str, str], time_unit: TimeUnit = "s") -> tuple[Trace, list[str]]:
    table = RawTable(path, labels=dict(mapping))
    if first_line(path).startswith("{"):
        for row, rec in json_lines(path):
            values = {col: lookup(rec, src) for col, src in mapping.items()}
            if "api" in values:
                values["api"] = _api(values["api"])
            table.add(row, values)
    else:
        header, rows = csv_rows(path)
        if not all(src in header for src in mapping.values()):
            raise missing_columns_error(path, header, list(mapping.values()))
        for row, cells in rows:
            values = {col: (cells[src] or None) for col, src in mapping.items()}
            if "api" in values:
                values["api"] = _api(values["api"])
            table.add(row, values)
    return build_trace(table, name=path.stem, digest=file_digest(path), time_unit=time_unit), []

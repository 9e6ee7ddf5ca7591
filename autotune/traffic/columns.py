"""Raw columns read from a file, checked once and turned into a `Trace`.

Every reader (our JSONL, the public formats, the capture log, a mapped CSV or JSONL) only walks
its file and collects raw values per canonical column; this module holds the one set of checks,
so every format refuses the same things with the same message: the file, the row (as the reader
numbers it: the line of a JSONL or CSV file, the header being line 1) and the column as the file
names it. When several rows are bad, the earliest is reported.

Checks: arrivals are finite, non-negative numbers (or ISO timestamps with ``time_unit="iso"``);
token counts are integers from 1 to `MAX_TOKENS`; `max_tokens` likewise where given; `api` is
``chat`` or ``completion``; `priority` an integer; `hash_ids` a list of 64-bit integers; prompt
text a string.

Order: with ``order="strict"`` an arrival earlier than the row before is an error (files autotune
writes are sorted, so an unsorted one was edited); with ``order="repair"`` the rows are sorted
stably by arrival (public traces and gateway logs are written by many servers and are only nearly
sorted). Equal arrivals are allowed either way. Arrivals are shifted to start at 0; where the
times were absolute (epoch or wall clock), the first one is kept as `Trace.start_epoch_s`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import numpy as np

from autotune.errors import TraceError
from autotune.traffic.trace import DEFAULT_BLOCK_TOKENS, Trace

MAX_TOKENS = 1 << 27  # no model has a context anywhere near 134M tokens: larger is corruption
MAX_ARRIVAL_S = 1e11  # about the year 5138 as an epoch time
MAX_BLOCK_TOKENS = 1 << 20
INT64_MAX = (1 << 63) - 1
API_VALUES = ("chat", "completion")
TIME_UNITS_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
TimeUnit = Literal["s", "ms", "us", "ns", "iso"]
Order = Literal["strict", "repair"]
EPOCH_MIN_S = 1e9  # numbers at least this large (2001-09-09 on) are read as epoch seconds

CANONICAL = ("arrival_s", "prompt_tokens", "output_tokens", "max_tokens", "api", "session_id",
             "tenant", "priority", "hash_ids", "hash_block_tokens", "prompt")


def row_error(path: Path, row: int, column: str, what: str) -> TraceError:
    return TraceError(f"{path}: row {row}, column {column!r}: {what}; fix or drop that row")


def empty_error(path: Path) -> TraceError:
    return TraceError(f"trace file {path} holds no requests; give a trace with at least one row")


@dataclass
class RawTable:
    """What a reader collected: per record its row number and raw values per canonical column
    (None where absent), and each canonical column's name in the file, for messages."""

    path: Path
    labels: dict[str, str] = field(default_factory=dict)
    rows: list[int] = field(default_factory=list)
    columns: dict[str, list[object]] = field(default_factory=dict)

    def add(self, row: int, values: dict[str, object]) -> None:
        n = len(self.rows)
        self.rows.append(row)
        for key, value in values.items():
            col = self.columns.get(key)
            if col is None:
                col = self.columns[key] = [None] * n
            col.append(value)
        for col in self.columns.values():
            if len(col) == n:
                col.append(None)

    def label(self, column: str) -> str:
        return self.labels.get(column, column)

    def __len__(self) -> int:
        return len(self.rows)


class _Problems:
    """The earliest bad row seen so far, so a message names the first row to fix."""

    def __init__(self, table: RawTable) -> None:
        self.table = table
        self.first: tuple[int, str, str] | None = None

    def add(self, index: int, column: str, what: str) -> None:
        if self.first is None or index < self.first[0]:
            self.first = (index, self.table.label(column), what)

    def raise_first(self) -> None:
        if self.first is not None:
            index, column, what = self.first
            raise row_error(self.table.path, self.table.rows[index], column, what)


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an int beyond the float range
            return None
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def parse_iso_s(value: str) -> float:
    """Epoch seconds of an ISO 8601 time; a time without zone is UTC. Fractions finer than a
    microsecond (the Azure traces have 100 ns) are cut to microseconds."""
    text = value.strip().replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{(rest[:digits] + '000000')[:6]}{rest[digits:]}"
    when = datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _arrivals(table: RawTable, problems: _Problems, unit: TimeUnit) -> np.ndarray:
    raw = table.columns.get("arrival_s", [None] * len(table))
    out = np.zeros(len(table))
    scale = TIME_UNITS_S.get(unit, 1.0)
    for i, value in enumerate(raw):
        if unit == "iso":
            try:
                seconds: float | None = parse_iso_s(value) if isinstance(value, str) else None
            except (ValueError, OverflowError):
                seconds = None
            if seconds is None:
                problems.add(i, "arrival_s", f"expected an ISO 8601 time, got {value!r}")
                continue
            if seconds < 0:  # as numbers must be: arrivals rebased to the first stay in range
                problems.add(i, "arrival_s", f"{value!r} is before 1970")
                continue
        else:
            number = _number(value)
            if number is None or number < 0:
                problems.add(i, "arrival_s", f"expected a non-negative number, got {value!r}")
                continue
            seconds = number * scale
        if seconds > MAX_ARRIVAL_S:
            problems.add(i, "arrival_s", f"{value!r} is too large for a time")
            continue
        out[i] = seconds
    return out


def _counts(table: RawTable, problems: _Problems, column: str, *, optional: bool) -> np.ndarray:
    """Token counts as int64; -1 where an optional column has no value."""
    raw = table.columns.get(column, [None] * len(table))
    out = np.full(len(table), -1, dtype=np.int64)
    for i, value in enumerate(raw):
        if value is None and optional:
            continue
        number = _number(value)
        if number is None or number != math.floor(number):
            problems.add(i, column, f"expected a whole number of tokens, got {value!r}")
        elif number < 1:
            problems.add(i, column, f"must be at least 1, got {value!r}")
        elif number > MAX_TOKENS:
            problems.add(i, column, f"{value!r} is more than {MAX_TOKENS} tokens")
        else:
            out[i] = int(number)
    return out


def _strings(table: RawTable, problems: _Problems, column: str,
             allowed: tuple[str, ...] | None = None) -> tuple[str | None, ...]:
    raw = table.columns.get(column)
    if raw is None:
        return ()
    out: list[str | None] = []
    for i, value in enumerate(raw):
        if value is None or (isinstance(value, str) and allowed is None):
            out.append(value)
        elif allowed is not None and value in allowed:
            out.append(str(value))
        else:
            want = " or ".join(repr(a) for a in allowed) if allowed else "a string"
            problems.add(i, column, f"expected {want}, got {value!r}")
            out.append(None)
    return tuple(out) if any(v is not None for v in out) else ()


def _priorities(table: RawTable, problems: _Problems) -> tuple[int | None, ...]:
    raw = table.columns.get("priority")
    if raw is None:
        return ()
    out: list[int | None] = []
    for i, value in enumerate(raw):
        number = None if value is None else _number(value)
        if value is not None and (number is None or number != math.floor(number)
                                  or abs(number) > 1 << 31):
            problems.add(i, "priority", f"expected an integer priority, got {value!r}")
        out.append(None if number is None else int(number))
    return tuple(out) if any(v is not None for v in out) else ()


def _hash_ids(table: RawTable, problems: _Problems) -> tuple[tuple[int, ...], ...]:
    raw = table.columns.get("hash_ids")
    if raw is None:
        return tuple(() for _ in range(len(table)))
    out: list[tuple[int, ...]] = []
    for i, value in enumerate(raw):
        if isinstance(value, str):  # a CSV cell holding a JSON list
            try:
                value = json.loads(value) if value.strip() else None
            except json.JSONDecodeError:
                pass
        if value is None:
            out.append(())
        elif isinstance(value, list) and all(
                isinstance(h, int) and not isinstance(h, bool) and -INT64_MAX - 1 <= h <= INT64_MAX
                for h in value):
            out.append(tuple(value))
        else:
            problems.add(i, "hash_ids", "expected a list of 64-bit integers")
            out.append(())
    return tuple(out)


def _block_tokens(table: RawTable, problems: _Problems, hashes: tuple[tuple[int, ...], ...],
                  fixed: int | None) -> int:
    if fixed is not None:
        return fixed
    raw = table.columns.get("hash_block_tokens", [None] * len(table))
    block: int | None = None
    for i, value in enumerate(raw):
        if value is None:
            continue
        number = _number(value)
        if number is None or number != math.floor(number) or not 1 <= number <= MAX_BLOCK_TOKENS:
            problems.add(i, "hash_block_tokens", f"expected a block size in tokens, got {value!r}")
        elif block is None:
            block = int(number)
        elif int(number) != block and hashes[i]:
            problems.add(i, "hash_block_tokens",
                         f"{value!r} differs from {block}, the block size of earlier rows")
    return block or DEFAULT_BLOCK_TOKENS


def build_trace(table: RawTable, *, name: str, digest: str, time_unit: TimeUnit = "s",
                order: Order = "repair", absolute_time: bool | None = None,
                hash_block_tokens: int | None = None) -> Trace:
    """Check the raw columns and build the trace (see the module docstring for the rules).

    absolute_time: whether arrivals are epoch times (None: ISO times are, and numbers from
    `EPOCH_MIN_S` seconds on are). hash_block_tokens: the format's fixed block size, if any."""
    if not len(table):
        raise empty_error(table.path)
    problems = _Problems(table)
    arrival = _arrivals(table, problems, time_unit)
    prompt = _counts(table, problems, "prompt_tokens", optional=False)
    output = _counts(table, problems, "output_tokens", optional=False)
    max_tokens = _counts(table, problems, "max_tokens", optional=True)
    apis = _strings(table, problems, "api", API_VALUES)
    sessions = _strings(table, problems, "session_id")
    tenants = _strings(table, problems, "tenant")
    texts = _strings(table, problems, "prompt")
    priorities = _priorities(table, problems)
    hashes = _hash_ids(table, problems)
    block = _block_tokens(table, problems, hashes, hash_block_tokens)
    if order == "strict":
        back = np.flatnonzero(np.diff(arrival) < 0)
        if len(back):
            problems.add(int(back[0]) + 1, "arrival_s",
                         "arrivals must not go back in time (this format is written sorted)")
    problems.raise_first()
    idx = np.argsort(arrival, kind="stable")
    start = float(arrival[idx[0]])
    if absolute_time is None:
        absolute_time = time_unit == "iso" or start >= EPOCH_MIN_S
    has_max = bool((max_tokens >= 0).any())

    def pick(values: tuple[object, ...]) -> tuple[object, ...]:
        return tuple(values[i] for i in idx) if values else ()

    return Trace.from_columns(
        name, arrival_s=arrival[idx] - start, prompt_tokens=prompt[idx], output_tokens=output[idx],
        hash_ids=pick(hashes), hash_block_tokens=block, digest=digest,  # type: ignore[arg-type]
        texts=pick(texts),  # type: ignore[arg-type]
        max_tokens=tuple(int(v) if v >= 0 else None for v in max_tokens[idx]) if has_max else (),
        apis=pick(apis), session_ids=pick(sessions), tenants=pick(tenants),  # type: ignore[arg-type]
        priorities=pick(priorities),  # type: ignore[arg-type]
        start_epoch_s=start if absolute_time else None)

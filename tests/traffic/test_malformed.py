"""Malformed inputs, property-based: every importer either reads a file (repairing only what is
documented: order by arrival, shift to 0, BurstGPT's failed rows) or raises a one-line
TraceError naming the file, the row and the column (an empty file: the file); never another
exception, and `traffic import` never leaves an output file behind."""

from __future__ import annotations

import json
import math
import re
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from autotune.cli.traffic import traffic_import
from autotune.errors import TraceError
from autotune.traffic.formats import import_file
from autotune.traffic.parquet_store import read_parquet, write_parquet
from autotune.traffic.trace import Trace

SETTINGS = settings(max_examples=50, deadline=None)
# A row's problem names row and column; a whole file's (empty, not Parquet, no schema version,
# a column of the wrong type) says so.
WHERE = re.compile(r"row \d+, column '[^']+'|holds no requests|not a readable Parquet file|"
                   r"column '[^']+' \(all rows\)|metadata")

good_count = st.integers(1, 100_000)
bad_value = st.one_of(
    st.integers(-10**6, 0), st.integers(10**9, 10**30), st.just(10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5), st.none(), st.booleans(),
    st.lists(st.integers(), max_size=2))
value = st.one_of(good_count, good_count, good_count, bad_value)


def _check(path: Path, **options: object) -> Trace | None:
    """Import path; on failure check the message, on success the trace's invariants."""
    out = path.with_name("out.parquet")
    try:
        traffic_import(path, out, "auto", None, None, None, **options)  # type: ignore[arg-type]
    except TraceError as exc:
        message = str(exc)
        assert str(path) in message and "\n" not in message
        assert WHERE.search(message), message
        assert not out.exists()
        return None
    trace = read_parquet(out)
    assert len(trace) >= 1 and trace.arrival_s[0] == 0
    assert (np.diff(trace.arrival_s) >= 0).all()
    assert (trace.prompt_tokens >= 1).all() and (trace.output_tokens >= 1).all()
    assert import_file(path).trace.content_digest() == trace.content_digest()
    return trace


def _jsonl(rows: list[dict[str, object]], cut: float | None) -> bytes:
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    return data[: int(len(data) * cut)] if cut is not None else data


row_keys = st.sampled_from(["arrival_s", "prompt_tokens", "output_tokens"])


@st.composite
def our_rows(draw: st.DrawFn) -> list[dict[str, object]]:
    n = draw(st.integers(0, 8))
    rows = []
    for _ in range(n):
        row = {"arrival_s": draw(st.one_of(st.floats(0, 1e4), bad_value)),
               "prompt_tokens": draw(value), "output_tokens": draw(value)}
        if draw(st.booleans()):
            row.pop(draw(row_keys))
        if draw(st.booleans()):
            row["hash_ids"] = draw(st.one_of(st.lists(st.integers(-2**63, 2**63 - 1), max_size=3), bad_value))
        rows.append(row)
    return rows


@SETTINGS
@given(rows=our_rows(), cut=st.one_of(st.none(), st.floats(0, 1)))
def test_our_jsonl(rows: list[dict[str, object]], cut: float | None) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.jsonl"
        path.write_bytes(_jsonl(rows, cut))
        _check(path)


@SETTINGS
@given(rows=st.lists(st.tuples(st.integers(0, 10**6), value, value,
                               st.lists(st.integers(0, 10**6), max_size=3)), min_size=1, max_size=8),
       cut=st.one_of(st.none(), st.floats(0, 1)))
def test_mooncake(rows: list[tuple[int, object, object, list[int]]], cut: float | None) -> None:
    records = [{"timestamp": t, "input_length": a, "output_length": b, "hash_ids": h}
               for t, a, b, h in rows]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.jsonl"
        path.write_bytes(_jsonl(records, cut))
        trace = _check(path)
        if trace is not None and cut is None:  # the repair: sorted by time, nothing lost
            assert Counter(trace.prompt_tokens.tolist()) == Counter(int(r[1]) for r in rows)  # type: ignore[call-overload]
            # Equal to a float rounding: ms become s by a multiplication (71 ms: 0.07100000000000001).
            span_ms = max(r[0] for r in rows) - min(r[0] for r in rows)
            assert trace.duration_s == pytest.approx(span_ms / 1000, rel=1e-12, abs=1e-12)


cell = st.one_of(st.integers(1, 10**5).map(str), st.integers(1, 10**5).map(str),
                 st.sampled_from(["", "0", "-3", "1.5", "nan", "inf", "1e400", "x", "10" * 30]))
stamp = st.one_of(
    st.datetimes().map(lambda t: t.strftime("%Y-%m-%d %H:%M:%S.%f") + "0"),
    st.sampled_from(["", "yesterday", "2023-13-01 00:00:00", "2023-11-16 18:17:03.9799600"]))


@SETTINGS
@given(rows=st.lists(st.tuples(stamp, cell, cell), max_size=8),
       header=st.sampled_from(["TIMESTAMP,ContextTokens,GeneratedTokens",
                               "TIMESTAMP,ContextTokens,GeneratedTokens,Extra"]),
       short=st.booleans(), cut=st.one_of(st.none(), st.floats(0, 1)))
# Times 1e11 s apart (years 1 and 3200): each in range, but not once rebased to the first,
# so the stored trace could not be read back; a time before 1970 is now refused at import.
@example(rows=[("0001-01-01 00:00:00.0000000", "1", "1"),
               ("3200-01-01 00:00:00.0000000", "1", "1")],
         header="TIMESTAMP,ContextTokens,GeneratedTokens", short=False, cut=None)
def test_azure_csv(rows: list[tuple[str, str, str]], header: str, short: bool,
                   cut: float | None) -> None:
    lines = [",".join(r[:2] if short and i == len(rows) - 1 else r) for i, r in enumerate(rows)]
    data = (header + "\n" + "".join(line + "\n" for line in lines)).encode()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "a.csv"
        path.write_bytes(data[: int(len(data) * cut)] if cut is not None else data)
        _check(path)


@SETTINGS
@given(rows=st.lists(st.tuples(st.floats(0, 1e6).map(str) | cell, st.sampled_from(["ChatGPT", "GPT-4"]),
                               cell, cell), max_size=8),
       model=st.sampled_from([None, "GPT-4"]))
def test_burstgpt_csv(rows: list[tuple[str, str, str, str]], model: str | None) -> None:
    body = "".join(f"{t},{m},{a},{b},0,API log\n" for t, m, a, b in rows)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "b.csv"
        path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + body)
        try:
            trace = import_file(path, model=model).trace
        except TraceError as exc:
            assert str(path) in str(exc) and "\n" not in str(exc)
            return
        kept = [r for r in rows if (model is None or r[1] == model) and r[3] not in ("0",)]
        assert len(trace) == len(kept)


@SETTINGS
@given(raw=st.binary(max_size=200), prefix=st.sampled_from([b"", b"{", b"PAR1", b"a,b\n", b"\xff"]))
@example(raw=b"a\rb\n", prefix=b"")  # a bare carriage return once crashed format detection
def test_arbitrary_bytes(raw: bytes, prefix: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "junk"
        path.write_bytes(prefix + raw)
        _check(path)


@SETTINGS
@given(arrivals=st.lists(st.floats(0, 1e5), min_size=1, max_size=20), cut=st.floats(0, 0.99))
def test_truncated_parquet(arrivals: list[float], cut: float) -> None:
    ordered = sorted(arrivals)
    trace = Trace.from_columns("t", arrival_s=ordered, prompt_tokens=[5] * len(ordered),
                               output_tokens=[7] * len(ordered))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.parquet"
        write_parquet(trace, path)
        assert read_parquet(path).arrival_s.tolist() == [a - ordered[0] for a in ordered]
        path.write_bytes(path.read_bytes()[: int(path.stat().st_size * cut)])
        _check(path)


def test_unsorted_and_duplicate_times() -> None:
    """Our own JSONL must be sorted (an error naming the row); external formats are sorted
    stably; duplicates are kept everywhere."""
    with tempfile.TemporaryDirectory() as d:
        ours = Path(d) / "ours.jsonl"
        ours.write_text("".join(json.dumps({"arrival_s": t, "prompt_tokens": p, "output_tokens": 1}) + "\n"
                                for t, p in [(1, 10), (1, 11), (0.5, 12)]))
        try:
            import_file(ours)
            raise AssertionError("an unsorted trace of ours must be refused")
        except TraceError as exc:
            assert "row 3, column 'arrival_s'" in str(exc)
        moon = Path(d) / "moon.jsonl"
        moon.write_text("".join(json.dumps({"timestamp": t, "input_length": p, "output_length": 1}) + "\n"
                                for t, p in [(1000, 10), (1000, 11), (500, 12)]))
        t = import_file(moon).trace
        assert t.prompt_tokens.tolist() == [12, 10, 11] and t.arrival_s.tolist() == [0, 0.5, 0.5]
        assert math.isclose(t.duration_s, 0.5)

"""Trace: one row per request, the traffic a trial replays.

This first version reads JSONL (one object per line: arrival_s, prompt_tokens, output_tokens,
optional hash_ids and max_tokens) and validates it; the traffic issue adds the Parquet store and
importers for public formats.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from autotune.errors import TraceError

BUNDLED_DIR = Path(__file__).resolve().parents[1] / "data"
DEMO_TRACE = BUNDLED_DIR / "demo_chat.jsonl"


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival. Arrays are read-only; hash_ids are per-request tuples of
    prefix-block ids (each block `hash_block_tokens` long; equal ids mean a shared prefix)."""

    name: str
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    hash_ids: tuple[tuple[int, ...], ...]
    hash_block_tokens: int
    digest: str
    texts: tuple[str | None, ...] = ()  # prompt text per request, where the trace has it

    @classmethod
    def from_rows(cls, name: str, rows: list[dict[str, object]]) -> Trace:
        """A trace from in-memory rows (same keys as the JSONL file), for generators and tests."""
        data = json.dumps(rows, sort_keys=True).encode()
        arrays = [np.asarray([r[k] for r in rows], dtype=dt) for k, dt in (
            ("arrival_s", np.float64), ("prompt_tokens", np.int64), ("output_tokens", np.int64))]
        for a in arrays:
            a.setflags(write=False)
        block = int(rows[0].get("hash_block_tokens", 512)) if rows else 512  # type: ignore[call-overload]
        texts = tuple(r.get("prompt") for r in rows)  # type: ignore[misc]
        return cls(name, arrays[0], arrays[1], arrays[2],
                   tuple(tuple(r.get("hash_ids") or ()) for r in rows),  # type: ignore[arg-type]
                   block, "sha256:" + hashlib.sha256(data).hexdigest(),
                   texts if any(t is not None for t in texts) else ())  # type: ignore[arg-type]

    def slice(self, start: int, count: int) -> Trace:
        """Requests start .. start+count-1, arrivals shifted to begin at 0."""
        rows = self.to_rows()[start:start + count]
        if rows:
            t0 = float(rows[0]["arrival_s"])  # type: ignore[arg-type]
            for r in rows:
                r["arrival_s"] = float(r["arrival_s"]) - t0  # type: ignore[arg-type]
        return Trace.from_rows(f"{self.name}[{start}:{start + count}]", rows)

    def text(self, index: int) -> str | None:
        return self.texts[index] if self.texts else None

    def to_rows(self) -> list[dict[str, object]]:
        rows: list[dict[str, object]] = []
        for i in range(len(self)):
            row: dict[str, object] = {
                "arrival_s": float(self.arrival_s[i]), "prompt_tokens": int(self.prompt_tokens[i]),
                "output_tokens": int(self.output_tokens[i]), "hash_ids": list(self.hash_ids[i]),
                "hash_block_tokens": self.hash_block_tokens}
            if self.text(i) is not None:
                row["prompt"] = self.text(i)
            rows.append(row)
        return rows

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) else 0.0


def file_digest(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def _row_error(path: Path, row: int, column: str, what: str) -> TraceError:
    return TraceError(f"{path}: row {row}, column {column!r}: {what}; fix or drop that row")


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def load_trace(path: str | Path) -> Trace:
    """Load and validate a trace: our JSONL, or an Azure LLM inference trace CSV (recognised by
    its header; the traffic issue adds the other public formats)."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"trace file {path} does not exist; pass --trace with a trace file "
                         f"(the bundled demo trace is {DEMO_TRACE})")
    with path.open() as f:
        first = f.readline().strip()
    if first.replace(" ", "") == AZURE_HEADER:
        return _load_azure_csv(path)
    if _is_mooncake(first):
        return _load_mooncake(path)
    return _load_jsonl(path)


MOONCAKE_BLOCK_TOKENS = 512  # Mooncake's hash_ids each stand for 512 prompt tokens


def _is_mooncake(first_line: str) -> bool:
    try:
        rec = json.loads(first_line)
    except json.JSONDecodeError:
        return False
    return isinstance(rec, dict) and {"timestamp", "input_length", "output_length"} <= set(rec)


def _json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number, object) for every non-empty line of a JSONL file."""
    with path.open() as f:
        for row, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _row_error(path, row, "*", f"not a JSON object ({exc.msg})") from None
            if not isinstance(rec, dict):
                raise _row_error(path, row, "*", "not a JSON object")
            yield row, rec


def _check_lengths(path: Path, row: int, rec: dict[str, Any], cols: tuple[str, str, str]) -> None:
    """cols: the time, prompt-length and output-length columns of this format."""
    for col in cols:
        value = rec.get(col)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise _row_error(path, row, col, f"expected a non-negative number, got {value!r}")
    if rec[cols[1]] < 1 or rec[cols[2]] < 1:
        raise _row_error(path, row, f"{cols[1]}/{cols[2]}", "must be at least 1")


def _hash_ids(path: Path, row: int, rec: dict[str, Any]) -> list[int]:
    ids = rec.get("hash_ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise _row_error(path, row, "hash_ids", "expected a list of integers")
    return ids


def _load_mooncake(path: Path) -> Trace:
    """Mooncake (FAST'25) JSONL: timestamp in ms from the start, input_length, output_length,
    hash_ids of 512-token prompt blocks."""
    rows: list[dict[str, object]] = []
    for row, rec in _json_lines(path):
        _check_lengths(path, row, rec, ("timestamp", "input_length", "output_length"))
        ids = _hash_ids(path, row, rec)
        rows.append({"arrival_s": rec["timestamp"] / 1000.0, "prompt_tokens": int(rec["input_length"]),
                     "output_tokens": int(rec["output_length"]), "hash_ids": ids,
                     "hash_block_tokens": MOONCAKE_BLOCK_TOKENS})
    return _imported(path, rows)


def _load_azure_csv(path: Path) -> Trace:
    """Azure 2023/2024 traces: TIMESTAMP (wall clock), ContextTokens, GeneratedTokens.
    Rows are sorted by time (a documented repair: the published files are nearly sorted)."""
    rows: list[dict[str, object]] = []
    t0: datetime | None = None
    with path.open(newline="") as f:
        for row, rec in enumerate(csv.DictReader(f), start=2):
            try:
                # Seven fractional digits (100 ns) are more than fromisoformat takes.
                stamp = rec["TIMESTAMP"].strip()
                head, _, frac = stamp.partition(".")
                when = datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}" if frac else head)
            except (ValueError, KeyError, AttributeError):
                raise _row_error(path, row, "TIMESTAMP", "expected a timestamp") from None
            t0 = t0 or when
            values = {}
            for col in ("ContextTokens", "GeneratedTokens"):
                try:
                    values[col] = int(rec[col])
                except (ValueError, KeyError, TypeError):
                    raise _row_error(path, row, col, f"expected an integer, got {rec.get(col)!r}") from None
                if values[col] < 1:
                    raise _row_error(path, row, col, "must be at least 1")
            rows.append({"arrival_s": (when - t0).total_seconds(),
                         "prompt_tokens": values["ContextTokens"],
                         "output_tokens": values["GeneratedTokens"]})
    return _imported(path, rows)


def _imported(path: Path, rows: list[dict[str, object]]) -> Trace:
    """A trace from an importer's rows, sorted by arrival, with the file's digest.

    Sorting is a documented repair, not a refusal: public traces and gateway logs are written by
    many servers and are only nearly sorted."""
    if not rows:
        raise TraceError(f"trace file {path} holds no requests; give a trace with at least one row")
    rows.sort(key=lambda r: float(r["arrival_s"]))  # type: ignore[arg-type]
    trace = Trace.from_rows(path.stem, rows)
    return Trace(trace.name, trace.arrival_s, trace.prompt_tokens, trace.output_tokens,
                 trace.hash_ids, trace.hash_block_tokens, file_digest(path))


def _load_jsonl(path: Path) -> Trace:
    arrival: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    hashes: list[tuple[int, ...]] = []
    texts: list[str | None] = []
    block_tokens = 0
    for row, rec in _json_lines(path):
        _check_lengths(path, row, rec, ("arrival_s", "prompt_tokens", "output_tokens"))
        if arrival and rec["arrival_s"] < arrival[-1]:
            raise _row_error(path, row, "arrival_s", "arrivals must not go back in time")
        text = rec.get("prompt")
        if text is not None and not isinstance(text, str):
            raise _row_error(path, row, "prompt", "expected the prompt text as a string")
        ids = _hash_ids(path, row, rec)
        if ids:
            block_tokens = int(rec.get("hash_block_tokens", block_tokens or 512))
        arrival.append(float(rec["arrival_s"]))
        prompt.append(int(rec["prompt_tokens"]))
        output.append(int(rec["output_tokens"]))
        hashes.append(tuple(ids))
        texts.append(text)
    if not arrival:
        raise TraceError(f"trace file {path} holds no requests; give a trace with at least one row")
    start = arrival[0]
    arrays = [np.asarray(a, dtype=dt) for a, dt in (([t - start for t in arrival], np.float64),
                                                   (prompt, np.int64), (output, np.int64))]
    for a in arrays:
        a.setflags(write=False)
    return Trace(path.stem, arrays[0], arrays[1], arrays[2], tuple(hashes), block_tokens or 512,
                 file_digest(path), tuple(texts) if any(t is not None for t in texts) else ())

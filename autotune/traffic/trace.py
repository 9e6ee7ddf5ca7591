"""Trace: one row per request, the traffic a trial replays.

Columns: `arrival_s` (seconds from the first request), `prompt_tokens`, `output_tokens`, and
optional ones: `max_tokens` (what the client asked for), `api` (``chat`` or ``completion``),
`session_id`, the tags `tenant` and `priority`, prefix block hashes (`hash_ids`, each block
`hash_block_tokens` long; equal ids mean a shared prefix) and the prompt text. An optional
column that a trace lacks is an empty tuple; a row without a value holds None.

`autotune.traffic.formats.load_trace` reads every format an importer knows, detected by
content: the Parquet store, our JSONL, the capture proxy's log, Azure, Mooncake and BurstGPT.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

BUNDLED_DIR = Path(__file__).resolve().parents[1] / "data"
DEMO_TRACE = BUNDLED_DIR / "demo_chat.jsonl"
DEFAULT_BLOCK_TOKENS = 512

# Optional per-row columns: Trace field -> key in rows (JSONL, to_rows/from_rows).
OPTIONAL_COLUMNS = {"texts": "prompt", "max_tokens": "max_tokens", "apis": "api",
                    "session_ids": "session_id", "tenants": "tenant", "priorities": "priority"}


def _frozen(values: object, dtype: type) -> np.ndarray:
    array: np.ndarray = np.array(values, dtype=dtype)
    array.setflags(write=False)
    return array


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival. Arrays are read-only; hash_ids are per-request tuples of
    prefix-block ids (each block `hash_block_tokens` long; equal ids mean a shared prefix).
    start_epoch_s: the wall-clock time of arrival 0 where the source had absolute times."""

    name: str
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    hash_ids: tuple[tuple[int, ...], ...]
    hash_block_tokens: int
    digest: str
    texts: tuple[str | None, ...] = ()  # prompt text per request, where the trace has it
    max_tokens: tuple[int | None, ...] = ()
    apis: tuple[str | None, ...] = ()  # "chat" or "completion"
    session_ids: tuple[str | None, ...] = ()
    tenants: tuple[str | None, ...] = ()
    priorities: tuple[int | None, ...] = ()
    start_epoch_s: float | None = None

    @classmethod
    def from_columns(
        cls, name: str, *, arrival_s: Sequence[float] | np.ndarray,
        prompt_tokens: Sequence[int] | np.ndarray, output_tokens: Sequence[int] | np.ndarray,
        hash_ids: Sequence[Sequence[int]] = (), hash_block_tokens: int = DEFAULT_BLOCK_TOKENS,
        digest: str | None = None, texts: Sequence[str | None] = (),
        max_tokens: Sequence[int | None] = (), apis: Sequence[str | None] = (),
        session_ids: Sequence[str | None] = (), tenants: Sequence[str | None] = (),
        priorities: Sequence[int | None] = (), start_epoch_s: float | None = None,
    ) -> Trace:
        """A trace from columns (already checked); digest None: a digest of the content."""
        n = len(arrival_s)

        def optional(values: Sequence[object]) -> tuple[object, ...]:
            values = tuple(values)
            if values and len(values) != n:
                raise ValueError(f"column of {len(values)} values for {n} requests")
            return values if any(v is not None for v in values) else ()

        trace = cls(name, _frozen(arrival_s, np.float64), _frozen(prompt_tokens, np.int64),
                    _frozen(output_tokens, np.int64),
                    tuple(tuple(int(h) for h in ids) for ids in hash_ids) or tuple(() for _ in range(n)),
                    int(hash_block_tokens), digest or "",
                    optional(texts), optional(max_tokens), optional(apis),  # type: ignore[arg-type]
                    optional(session_ids), optional(tenants), optional(priorities),  # type: ignore[arg-type]
                    start_epoch_s)
        return trace if digest else replace(trace, digest=trace.content_digest())

    @classmethod
    def from_rows(cls, name: str, rows: list[dict[str, object]]) -> Trace:
        """A trace from in-memory rows (same keys as the JSONL file), for generators and tests."""
        block = int(rows[0].get("hash_block_tokens", DEFAULT_BLOCK_TOKENS)) if rows else DEFAULT_BLOCK_TOKENS  # type: ignore[call-overload]
        extras = {f: [r.get(key) for r in rows] for f, key in OPTIONAL_COLUMNS.items()}
        return cls.from_columns(
            name, arrival_s=[r["arrival_s"] for r in rows],  # type: ignore[misc]
            prompt_tokens=[r["prompt_tokens"] for r in rows],  # type: ignore[misc]
            output_tokens=[r["output_tokens"] for r in rows],  # type: ignore[misc]
            hash_ids=[r.get("hash_ids") or () for r in rows],  # type: ignore[misc]
            hash_block_tokens=block, **extras)  # type: ignore[arg-type]

    def content_digest(self) -> str:
        """sha256 over every column: equal traces have equal digests, whatever file they came from."""
        h = hashlib.sha256()
        for array in (self.arrival_s, self.prompt_tokens, self.output_tokens):
            h.update(np.ascontiguousarray(array).tobytes())
        h.update(json.dumps([self.hash_ids, self.hash_block_tokens, self.start_epoch_s,
                             *(getattr(self, f) for f in OPTIONAL_COLUMNS)]).encode())
        return "sha256:" + h.hexdigest()

    def evolve(self, **columns: object) -> Trace:
        """A copy with some columns replaced (e.g. arrival_s=...), its digest recomputed."""
        current: dict[str, object] = {
            "arrival_s": self.arrival_s, "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens, "hash_ids": self.hash_ids,
            "hash_block_tokens": self.hash_block_tokens, "start_epoch_s": self.start_epoch_s,
            **{f: getattr(self, f) for f in OPTIONAL_COLUMNS}}
        unknown = set(columns) - set(current)
        if unknown:
            raise TypeError(f"not trace columns: {', '.join(sorted(unknown))}")
        return Trace.from_columns(self.name, **{**current, **columns})  # type: ignore[arg-type]

    def take(self, index: Sequence[int] | np.ndarray, name: str | None = None, *,
             shift: bool = True) -> Trace:
        """The requests at `index` (ascending), arrivals shifted to begin at 0 unless shift is
        False; every column is kept."""
        idx = np.asarray(index, dtype=np.int64)
        arrival = self.arrival_s[idx]
        offset = float(arrival[0]) if shift and len(arrival) else 0.0
        extras = {f: tuple(getattr(self, f)[i] for i in idx) if getattr(self, f) else ()
                  for f in OPTIONAL_COLUMNS}
        return Trace.from_columns(
            name or self.name, arrival_s=arrival - offset, prompt_tokens=self.prompt_tokens[idx],
            output_tokens=self.output_tokens[idx], hash_ids=[self.hash_ids[i] for i in idx],
            hash_block_tokens=self.hash_block_tokens,
            start_epoch_s=None if self.start_epoch_s is None else self.start_epoch_s + offset,
            **extras)  # type: ignore[arg-type]

    def slice(self, start: int, count: int) -> Trace:
        """Requests start .. start+count-1, arrivals shifted to begin at 0."""
        index = range(len(self))[start:start + count]
        return self.take(list(index), f"{self.name}[{start}:{start + count}]")

    def text(self, index: int) -> str | None:
        return self.texts[index] if self.texts else None

    def max_tokens_of(self, index: int) -> int | None:
        return self.max_tokens[index] if self.max_tokens else None

    def api(self, index: int) -> str | None:
        return self.apis[index] if self.apis else None

    def budget_tokens(self) -> np.ndarray:
        """Per request its max_tokens where known, else its output length (the hot-path test)."""
        if not self.max_tokens:
            return self.output_tokens
        return np.array([m if m is not None else int(o)
                         for m, o in zip(self.max_tokens, self.output_tokens, strict=True)],
                        dtype=np.int64)

    def to_rows(self) -> list[dict[str, object]]:
        rows: list[dict[str, object]] = []
        extras = [(key, getattr(self, f)) for f, key in OPTIONAL_COLUMNS.items() if getattr(self, f)]
        for i in range(len(self)):
            row: dict[str, object] = {
                "arrival_s": float(self.arrival_s[i]), "prompt_tokens": int(self.prompt_tokens[i]),
                "output_tokens": int(self.output_tokens[i]), "hash_ids": list(self.hash_ids[i]),
                "hash_block_tokens": self.hash_block_tokens}
            for key, values in extras:
                if values[i] is not None:
                    row[key] = values[i]
            rows.append(row)
        return rows

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) else 0.0


TRACE_FIELDS = tuple(f.name for f in fields(Trace))


def file_digest(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


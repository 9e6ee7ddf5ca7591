"""The trace store: one Parquet file per trace (pandas + pyarrow), with a schema version.

Schema version 1, one row per request, sorted by arrival:

| column | type | |
|---|---|---|
| arrival_s | double | seconds from the first request (required) |
| prompt_tokens, output_tokens | int64 | at least 1 (required) |
| hash_ids | list<int64> | prefix block hashes, maybe empty (required) |
| max_tokens, priority | int64, nullable | optional columns |
| api, session_id, tenant, prompt | string, nullable | optional columns; api is chat or completion |

File metadata: `autotune.trace.schema_version` ("1"), `autotune.trace.hash_block_tokens`, and
`autotune.trace.start_epoch_s` where the source had wall-clock times. Loading checks the version,
the column types and every value (the rules of `autotune.traffic.columns`; rows count from 1,
and an unsorted file is refused: this store is always written sorted). Writes are atomic.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from autotune.atomic import atomic_write
from autotune.errors import TraceError
from autotune.traffic.columns import RawTable, build_trace
from autotune.traffic.trace import Trace, file_digest

SCHEMA_VERSION = 1
KEY_VERSION = b"autotune.trace.schema_version"
KEY_BLOCK = b"autotune.trace.hash_block_tokens"
KEY_START = b"autotune.trace.start_epoch_s"
PARQUET_MAGIC = b"PAR1"

REQUIRED = {"arrival_s": pa.float64(), "prompt_tokens": pa.int64(), "output_tokens": pa.int64(),
            "hash_ids": pa.list_(pa.int64())}
OPTIONAL = {"max_tokens": ("max_tokens", pa.int64()), "priorities": ("priority", pa.int64()),
            "apis": ("api", pa.string()), "session_ids": ("session_id", pa.string()),
            "tenants": ("tenant", pa.string()), "texts": ("prompt", pa.string())}


def trace_frame(trace: Trace) -> pd.DataFrame:
    """The trace as a DataFrame with the store's columns (optional ones only where present)."""
    data: dict[str, object] = {
        "arrival_s": trace.arrival_s, "prompt_tokens": trace.prompt_tokens,
        "output_tokens": trace.output_tokens, "hash_ids": [list(h) for h in trace.hash_ids]}
    for attr, (column, _) in OPTIONAL.items():
        values = getattr(trace, attr)
        if values:
            data[column] = list(values)
    return pd.DataFrame(data)


def write_parquet(trace: Trace, path: Path) -> None:
    """Write the trace to path atomically (complete or not at all)."""
    frame = trace_frame(trace)
    schema = pa.schema([pa.field(c, t, nullable=False) for c, t in REQUIRED.items()]
                       + [pa.field(c, t) for c, t in OPTIONAL.values() if c in frame.columns])
    meta = {KEY_VERSION: str(SCHEMA_VERSION).encode(), KEY_BLOCK: str(trace.hash_block_tokens).encode()}
    if trace.start_epoch_s is not None:
        meta[KEY_START] = repr(trace.start_epoch_s).encode()
    table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False).replace_schema_metadata(meta)
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def _fits(actual: pa.DataType, wanted: pa.DataType) -> bool:
    if pa.types.is_list(wanted) or pa.types.is_large_list(wanted):
        return (pa.types.is_list(actual) or pa.types.is_large_list(actual)) and (
            pa.types.is_integer(actual.value_type) or pa.types.is_null(actual.value_type))
    if pa.types.is_string(wanted):
        return pa.types.is_string(actual) or pa.types.is_large_string(actual) or pa.types.is_null(actual)
    if pa.types.is_floating(wanted):  # arrivals: any number
        return pa.types.is_floating(actual) or pa.types.is_integer(actual)
    return pa.types.is_integer(actual) or pa.types.is_null(actual)


def _meta_int(path: Path, meta: dict[bytes, bytes], key: bytes) -> int:
    try:
        return int(meta[key])
    except (KeyError, ValueError):
        raise TraceError(f"{path}: file metadata {key.decode()!r} is missing or not an integer; "
                         "re-import the trace with `autotune traffic import`") from None


def read_parquet(path: Path) -> Trace:
    """Load and check a stored trace; every problem is a TraceError naming file, row, column."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(f"{path}: not a readable Parquet file ({exc}); it may be truncated: "
                         "re-import the trace with `autotune traffic import`") from None
    meta = table.schema.metadata or {}
    if KEY_VERSION not in meta:
        raise TraceError(f"{path}: a Parquet file without {KEY_VERSION.decode()!r} in its metadata "
                         "is not an autotune trace; import it with `autotune traffic import`")
    version = _meta_int(path, meta, KEY_VERSION)
    if version != SCHEMA_VERSION:
        raise TraceError(f"{path}: trace schema version {version}, but this autotune reads "
                         f"version {SCHEMA_VERSION}; re-import the trace with this version")
    block = _meta_int(path, meta, KEY_BLOCK)
    if not 1 <= block <= 1 << 20:
        raise TraceError(f"{path}: file metadata {KEY_BLOCK.decode()!r} is {block}; expected a "
                         "block size in tokens")
    wanted = {**REQUIRED, **dict(OPTIONAL.values())}
    for column, dtype in wanted.items():
        if column not in table.column_names:
            if column in REQUIRED:
                raise TraceError(f"{path}: column {column!r} (all rows): missing; the store "
                                 f"needs {', '.join(REQUIRED)}")
            continue
        actual = table.schema.field(column).type
        if not _fits(actual, dtype):
            raise TraceError(f"{path}: column {column!r} (all rows): type {actual}, expected "
                             f"{dtype}; re-import the trace")
    raw = RawTable(path)
    columns = {c: table.column(c).to_pylist() for c in table.column_names if c in wanted}
    raw.rows = list(range(1, table.num_rows + 1))
    raw.columns = {k: v for k, v in columns.items()}
    for i, ids in enumerate(raw.columns["hash_ids"]):
        if ids is None:
            raise TraceError(f"{path}: row {i + 1}, column 'hash_ids': null; expected a list "
                             "(maybe empty)")
    start = None
    if KEY_START in meta:
        try:
            start = float(meta[KEY_START])
        except ValueError:
            raise TraceError(f"{path}: file metadata {KEY_START.decode()!r} is not a number") from None
    trace = build_trace(raw, name=path.stem, digest=file_digest(path), order="strict",
                        absolute_time=False, hash_block_tokens=block)
    if start is None:
        return trace
    from dataclasses import replace

    return replace(trace, start_epoch_s=start)

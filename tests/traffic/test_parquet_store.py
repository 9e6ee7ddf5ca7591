"""The Parquet store: round trip, schema version, types and values checked on load, atomic writes."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autotune.errors import TraceError
from autotune.traffic import parquet_store
from autotune.traffic.formats import load_trace
from autotune.traffic.parquet_store import KEY_BLOCK, KEY_VERSION, read_parquet, write_parquet
from autotune.traffic.trace import Trace


def _trace() -> Trace:
    return Trace.from_rows("t", [
        {"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 5, "hash_ids": [1, 2],
         "hash_block_tokens": 32, "max_tokens": 64, "api": "chat", "session_id": "s1",
         "tenant": "ads", "priority": 1, "prompt": "hi"},
        {"arrival_s": 0.5, "prompt_tokens": 7, "output_tokens": 900, "api": "completion"},
        {"arrival_s": 0.5, "prompt_tokens": 40, "output_tokens": 3, "hash_ids": [1]},
    ])


def test_round_trip_keeps_every_column(tmp_path: Path) -> None:
    t = _trace()
    path = tmp_path / "t.parquet"
    write_parquet(t, path)
    back = load_trace(path)  # recognised by content
    assert back.to_rows() == t.to_rows()
    assert back.content_digest() == t.content_digest()
    assert back.max_tokens == (64, None, None) and back.apis == ("chat", "completion", None)
    assert back.hash_block_tokens == 32


def test_start_epoch_is_kept(tmp_path: Path) -> None:
    t = _trace().evolve(start_epoch_s=1_767_225_600.0)
    write_parquet(t, tmp_path / "t.parquet")
    assert read_parquet(tmp_path / "t.parquet").start_epoch_s == 1_767_225_600.0


def _write_raw(path: Path, columns: dict[str, pa.Array], meta: dict[bytes, bytes] | None) -> None:
    table = pa.table(columns)
    pq.write_table(table.replace_schema_metadata(meta), path)


GOOD_META = {KEY_VERSION: b"1", KEY_BLOCK: b"512"}


def _columns(**override: pa.Array) -> dict[str, pa.Array]:
    cols = {"arrival_s": pa.array([0.0, 1.0, 2.0]), "prompt_tokens": pa.array([5, 6, 7]),
            "output_tokens": pa.array([1, 2, 3]), "hash_ids": pa.array([[], [1], []], pa.list_(pa.int64()))}
    cols.update(override)
    return cols


@pytest.mark.parametrize("meta, columns, fragment", [
    (None, _columns(), "without 'autotune.trace.schema_version'"),
    ({KEY_VERSION: b"2", KEY_BLOCK: b"512"}, _columns(),
     "schema version 2, but this autotune reads version 1"),
    ({KEY_VERSION: b"x", KEY_BLOCK: b"512"}, _columns(),
     "'autotune.trace.schema_version' is missing or not an integer"),
    (GOOD_META, _columns(prompt_tokens=pa.array(["5", "6", "7"])),
     "column 'prompt_tokens' (all rows): type string"),
    (GOOD_META, {k: v for k, v in _columns().items() if k != "output_tokens"},
     "column 'output_tokens' (all rows): missing"),
    (GOOD_META, _columns(output_tokens=pa.array([1, -2, 3])),
     "row 2, column 'output_tokens': must be at least 1"),
    (GOOD_META, _columns(arrival_s=pa.array([0.0, 2.0, 1.0])),
     "row 3, column 'arrival_s': arrivals must not go back"),
    (GOOD_META, _columns(arrival_s=pa.array([0.0, float("nan"), 1.0])), "row 2, column 'arrival_s'"),
    (GOOD_META, _columns(prompt_tokens=pa.array([5, None, 7], pa.int64())),
     "row 2, column 'prompt_tokens'"),
    (GOOD_META, _columns(api=pa.array(["chat", "embed", None])),
     "row 2, column 'api': expected 'chat' or 'completion'"),
    (GOOD_META, _columns(prompt_tokens=pa.array([5, 1 << 40, 7])),
     "row 2, column 'prompt_tokens': 1099511627776 is more than"),
])
def test_bad_stores_are_refused_naming_file_row_and_column(
        tmp_path: Path, meta: dict[bytes, bytes] | None, columns: dict[str, pa.Array], fragment: str) -> None:
    path = tmp_path / "bad.parquet"
    _write_raw(path, columns, meta)
    with pytest.raises(TraceError, match=re.escape(fragment)) as info:
        read_parquet(path)
    assert str(path) in str(info.value)


def test_truncated_file_is_a_trace_error(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    write_parquet(_trace(), path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(TraceError, match="not a readable Parquet file"):
        load_trace(path)


def test_a_failed_write_leaves_no_file_and_keeps_the_old_one(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.parquet"
    write_parquet(_trace(), path)
    before = path.read_bytes()

    def half_then_fail(table: pa.Table, where: Path) -> None:
        Path(where).write_bytes(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(parquet_store.pq, "write_table", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        write_parquet(_trace().slice(0, 1), path)
    with pytest.raises(OSError):
        write_parquet(_trace(), tmp_path / "new.parquet")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]  # no temp files left

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from autotune.errors import StorageError
from autotune.storage.db import VERSION_TABLE, head_revision, open_database, upgrade


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_creates_our_tables_beside_optunas(database_url: str) -> None:
    before, after = upgrade(database_url)
    assert before is None and after == head_revision()
    tables = _tables(database_url)
    assert {"autotune_deployments", "autotune_campaigns", "autotune_trials",
            "autotune_publications", VERSION_TABLE} <= tables
    assert "studies" in tables and "trials" in tables  # Optuna's own
    open_database(database_url).dispose()
    assert upgrade(database_url) == (head_revision(), head_revision())  # idempotent


def test_sqlite_uses_wal(migrated_sqlite: str) -> None:
    engine = open_database(migrated_sqlite)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    engine.dispose()


def test_missing_sqlite_file_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "nothing.db"
    with pytest.raises(StorageError, match="no database at .*autotune db upgrade"):
        open_database(f"sqlite:///{path}")
    assert not path.exists()


def test_unmigrated_database_names_the_command(sqlite_url: str) -> None:
    engine = sa.create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE unrelated (x INTEGER)")
    engine.dispose()
    with pytest.raises(StorageError, match="revision none, not at head .*autotune db upgrade"):
        open_database(sqlite_url)
    assert _tables(sqlite_url) == {"unrelated"}


def test_unreachable_server_is_one_clear_error() -> None:
    with pytest.raises(StorageError, match="cannot reach the database at .*127.0.0.1:1"):
        open_database("postgresql+psycopg://nobody@127.0.0.1:1/none")


def test_garbage_url() -> None:
    with pytest.raises(StorageError, match="cannot parse database URL"):
        open_database("not a url")


@pytest.mark.integration
def test_postgres_upgrade_and_check(postgres_url: str) -> None:
    with pytest.raises(StorageError, match="not at head"):
        open_database(postgres_url)
    upgrade(postgres_url)
    open_database(postgres_url).dispose()
    assert "autotune_trials" in _tables(postgres_url)

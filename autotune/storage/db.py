"""Database access: engines, the migration check every command makes, and `db upgrade`.

One URL for everything: the project's tables (migrated by our Alembic history, version table
autotune_alembic_version) and Optuna's RDB storage (Optuna migrates its own tables).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from autotune.errors import StorageError

VERSION_TABLE = "autotune_alembic_version"


# The migration scripts, a package of their own so that the wheel carries them.
ALEMBIC_DIR = Path(__file__).resolve().parents[1] / "migrations"
UPGRADE_HINT = "run `autotune db upgrade`"


def _safe(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def _parse(url: str) -> URL:
    try:
        return make_url(url)
    except ArgumentError:
        raise StorageError(f"cannot parse database URL {url!r}; use e.g. sqlite:///autotune.db or "
                           "postgresql+psycopg://user@host:5432/db (AUTOTUNE_DATABASE_URL)") from None


def _sqlite_path(url: str) -> Path | None:
    u = _parse(url)
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:":
        return Path(u.database)
    return None


def _enable_wal(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _existing_file_only(_dialect, _record, cargs, cparams) -> None:  # type: ignore[no-untyped-def]
    # SQLite creates a missing file on connect; mode=rw opens an existing one or fails.
    if not cparams.get("uri"):
        cargs[0] = Path(cargs[0]).as_uri() + "?mode=rw"
        cparams["uri"] = True


def make_engine(url: str, *, create: bool = True) -> Engine:
    """An engine on `url`. create=False: a missing SQLite file is an error on connect, never
    created (a server must not leave empty database files behind for a mistyped URL)."""
    u = _parse(url)
    kwargs: dict[str, object] = {}
    if u.get_backend_name() == "postgresql":
        kwargs = {"pool_pre_ping": True, "connect_args": {"connect_timeout": 5}}
    try:
        engine = create_engine(u, **kwargs)
    except (ArgumentError, ImportError, SQLAlchemyError) as exc:
        raise StorageError(f"cannot use database URL {_safe(url)}: {exc}; "
                           "check AUTOTUNE_DATABASE_URL") from None
    if u.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _enable_wal)
        if not create and _sqlite_path(url) is not None:
            event.listen(engine, "do_connect", _existing_file_only)
    return engine


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(ALEMBIC_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.set_main_option("version_table", VERSION_TABLE)
    return cfg


def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head() or ""


def current_revision(engine: Engine) -> str | None:
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            return ctx.get_current_revision()
    except OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise StorageError(f"cannot reach the database at {_safe(str(engine.url))} ({reason}); "
                           "check AUTOTUNE_DATABASE_URL and that the server is up") from None


def open_database(url: str) -> Engine:
    """An engine on a reachable database at our head revision; else a StorageError that says
    which command fixes it. Writes nothing (a missing SQLite file is not created)."""
    path = _sqlite_path(url)
    if path is not None and not path.exists():
        raise StorageError(f"no database at {path}; {UPGRADE_HINT} to create it "
                           "(or set AUTOTUNE_DATABASE_URL)")
    engine = make_engine(url)
    current, head = current_revision(engine), head_revision()
    if current != head:
        engine.dispose()
        raise StorageError(f"the database at {_safe(url)} is at revision {current or 'none'}, "
                           f"not at head {head}; {UPGRADE_HINT}")
    return engine


def upgrade(url: str) -> tuple[str | None, str]:
    """Migrate our tables to head and create Optuna's; returns (before, after) revisions."""
    engine = make_engine(url)
    try:
        before = current_revision(engine)
        command.upgrade(alembic_config(url), "head")
        after = current_revision(engine) or ""
    finally:
        engine.dispose()
    from autotune.storage.studies import open_storage  # defers Optuna to the command

    open_storage(url)  # creates or migrates Optuna's own tables
    return before, after


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """One transaction: committed on success, rolled back on any error."""
    session = sessionmaker(engine, expire_on_commit=False)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()

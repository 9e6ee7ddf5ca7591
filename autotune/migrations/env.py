"""Alembic environment for autotune's tables only (Optuna migrates its own)."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import engine_from_config, pool

from autotune.storage.models import Base

config = context.config
url = os.environ.get("AUTOTUNE_DATABASE_URL") if config.config_file_name else None
if url:
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
VERSION_TABLE = config.get_main_option("version_table") or "autotune_alembic_version"


def include_object(obj, name, type_, reflected, compare_to):  # type: ignore[no-untyped-def]
    # Never touch Optuna's tables (or anything else sharing the database).
    if type_ == "table":
        return bool(name and name.startswith("autotune_"))
    return True


def run_migrations_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=Base.metadata,
                      version_table=VERSION_TABLE, include_object=include_object,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = engine_from_config(config.get_section(config.config_ini_section, {}),
                                prefix="sqlalchemy.", poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=Base.metadata,
                          version_table=VERSION_TABLE, include_object=include_object,
                          render_as_batch=connection.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()

"""What every command shares: the consoles, logging, the settings and the database.

Optuna and SQLAlchemy are imported where they are used, not here: `autotune --help` and
`--version` stay about 0.2 s instead of 0.9 s."""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from pydantic import ValidationError
from rich.console import Console

from autotune.errors import ConfigError
from autotune.settings import Settings, get_settings, misspelled_settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

console = Console()
if not console.is_terminal:  # logs and CI: wide enough for the trial tables
    console = Console(width=160)
err = Console(stderr=True)


def setup_logging(level: str) -> None:
    import optuna

    logging.basicConfig(level=getattr(logging, level.upper(), logging.WARNING), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    optuna.logging.set_verbosity(optuna.logging.WARNING)


_named_misspellings: set[str] = set()  # each said once per process


def load_settings() -> Settings:
    """The AUTOTUNE_ settings; a bad variable is one ConfigError naming it, a variable that
    nearly names a setting one warning line."""
    for line in misspelled_settings(os.environ):
        if line not in _named_misspellings:
            _named_misspellings.add(line)
            print(line, file=sys.stderr)
    try:
        return get_settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "AUTOTUNE_" + "__".join(str(part) for part in first["loc"]).upper()
        message = first["msg"].removeprefix("Value error, ")
        # A leaf's value helps; a whole section could hold the token, so it is never echoed.
        got = "" if isinstance(first["input"], dict | list) else f" (got {first['input']!r})"
        raise ConfigError(f"bad setting {where}: {message}{got}") from None


def open_db(url: str | None = None) -> tuple[Engine, str]:
    """The database engine for `url` (default: the settings' database_url) and the URL."""
    from autotune.storage.db import open_database

    url = url or load_settings().database_url
    return open_database(url), url

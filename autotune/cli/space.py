"""`autotune space schema`: the JSON Schema of a search-space file, for editors and CI."""

from __future__ import annotations

import sys

import typer

space_app = typer.Typer(no_args_is_help=True, help="Search-space files.")


@space_app.command("schema")
def schema() -> None:
    """Print the JSON Schema of a search-space file.

    The same as docs/reference/search-space.schema.json. Save it, and a space file whose first
    line is `# yaml-language-server: $schema=PATH` is checked by an editor as you type."""
    from autotune.search.spaces import space_schema_text

    sys.stdout.write(space_schema_text())

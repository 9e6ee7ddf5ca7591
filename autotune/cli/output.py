"""`--json` runs: stdout carries one JSON object, the result or an error, and nothing else.

While a `--json` command runs, sys.stdout and file descriptor 1 point at stderr, so rich's
tables, print() and the child processes (engines, Ray workers) all write there; the object is written to the
real stdout once the command has finished, after any database commit. An error is still the one
`autotune: error: ...` line on stderr, and on stdout `{"error": {"message", "exit_code",
"type"}}` with the same message and exit code.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stdout
from typing import Any

from rich.console import Console

_err = Console(stderr=True)


class _Session:
    active = False
    payload: Any = None


_session = _Session()


def requested(args: Sequence[str]) -> bool:
    """Whether the command line asks for --json (engine arguments after `--` do not count)."""
    head = list(args)
    if "--" in head:
        head = head[:head.index("--")]
    return "--json" in head


def clean(value: Any) -> Any:
    """`value` as strict JSON: NaN and infinities (a stored latency that was never measured)
    become null, as JSON has no such numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def dumps(value: Any) -> str:
    return json.dumps(clean(value), allow_nan=False)


def emit(value: Any) -> None:
    """The command's result: kept for the end of a --json session, printed at once outside one
    (a command called without `main`, e.g. by typer's test runner)."""
    if _session.active:
        _session.payload = value
    else:
        print(dumps(value))


def error(message: str, exit_code: int, kind: str) -> None:
    """An error as today (one line on stderr) and, in a --json session, as the JSON object."""
    _err.print(f"autotune: error: {message}", markup=False, highlight=False, soft_wrap=True)
    error_json(message, exit_code, kind)


def error_json(message: str, exit_code: int, kind: str) -> None:
    """The JSON error object of a --json session (the caller printed its own stderr line)."""
    if _session.active:
        _session.payload = error_object(message, exit_code, kind)


def error_object(message: str, exit_code: int, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "exit_code": exit_code, "type": kind}}


@contextmanager
def json_session() -> Iterator[None]:
    """Send stdout to stderr while the command runs, for Python (sys.stdout, which rich's
    consoles write to) and for child processes (fd 1); then write the one object to stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    _session.active, _session.payload = True, None
    try:
        os.dup2(2, 1)
        with redirect_stdout(sys.stderr):
            yield
    finally:
        try:
            sys.stdout.flush()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            _session.active = False
        if _session.payload is not None:
            sys.stdout.write(dumps(_session.payload) + "\n")
            sys.stdout.flush()
        _session.payload = None

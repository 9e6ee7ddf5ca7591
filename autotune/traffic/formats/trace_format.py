"""What registers a trace format: its name, what recognises it, its reader, its time unit and
notes (registry.py lists the registrations).

A format is recognised by content, never by file name: by the file's first bytes (MagicBytes),
by its first line read as a JSON object (JsonObject) or as a CSV header (CsvHeader); one format
(Otherwise) reads whatever no other recognises. A format's module imports nothing heavy at the
top, its reader importing what it needs when it runs: the CLI reads the registry for
`--format`'s help at every start, and the readers' tables import numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.traffic.trace import Trace

Notes = list[str]  # what a reader repaired or dropped, for the user to read


@dataclass(frozen=True)
class MagicBytes:
    """Files that open with these bytes."""

    prefix: bytes


@dataclass(frozen=True)
class JsonObject:
    """JSON lines whose first line is an object this test accepts."""

    accepts: Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class CsvHeader:
    """CSV files whose header has all these columns."""

    columns: tuple[str, ...]


@dataclass(frozen=True)
class Otherwise:
    """Whatever no other format recognises: its reader then names what is wrong."""


Signature = MagicBytes | JsonObject | CsvHeader | Otherwise


@dataclass(frozen=True)
class TraceFormat:
    name: str  # what --format takes and a registered trace records
    recognised_by: Signature
    read: Callable[[Path], tuple[Trace, Notes]]
    time: str  # the unit of its arrival times
    notes: str
    help: str = ""  # said after its name in --format's help
    # Reads only the rows of one model (--model); None where the format has no model column.
    read_one_model: Callable[[Path, str], tuple[Trace, Notes]] | None = None

"""Trace file formats, recognised by content (never by file name), and one entry point.

Each format is one registration (trace_format.TraceFormat) in a module of its own, saying how it
is recognised, how it is read, its time unit and notes; registry.py lists them and detect.py
tells them apart. Any CSV or JSONL can also be read through a column mapping (mapped.py,
`--map`), a format never guessed.

Repairs, the same everywhere: importers of external formats (all but jsonl and parquet) sort rows
stably by arrival; equal arrivals are kept; arrivals are shifted to start at 0. Everything else
that is wrong is a `TraceError` naming the file, the row and the column (rows as the file counts
them: the line of a CSV or JSONL file, the header being line 1; the record of a Parquet file,
from 1). A problem of the whole file names the file and says what is wrong with it: empty, not
readable as Parquet, no or another schema version, a column of the wrong type.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import SettingError, SettingText, TraceError
from autotune.traffic.formats.detect import detect_format
from autotune.traffic.formats.registry import FORMATS, by_name

if TYPE_CHECKING:
    from autotune.traffic.columns import TimeUnit
    from autotune.traffic.trace import Trace

# Nothing here imports numpy or pyarrow at the top (the readers and the mapping do, when they
# run): the CLI imports the registry below this package for --format's help at every start.


@dataclass(frozen=True)
class Imported:
    trace: Trace
    format: str
    notes: tuple[str, ...]  # repairs and drops, for the user to read


def import_file(path: Path, fmt: str = "auto", *, model: str | None = None,
                mapping: dict[str, str] | None = None, time_unit: TimeUnit = "s") -> Imported:
    """Read and check a trace file in the given format (auto: recognised by content)."""
    if not path.is_file():
        from autotune.traffic.trace import DEMO_TRACE

        raise TraceError(SettingText("trace file {path} does not exist; pass {trace} with a trace "
                                     "file (the bundled demo trace is {demo})", path=path,
                                     demo=DEMO_TRACE))
    if fmt not in FORMATS:
        raise SettingError("{format} {fmt!r} is unknown; use {formats}", fmt=fmt,
                           formats=", ".join(FORMATS))
    if mapping is not None:
        if fmt != "auto":
            raise SettingError("{map} reads any CSV or JSONL itself; leave {format} at auto")
        from autotune.traffic.formats.mapped import read_mapped

        trace, notes = read_mapped(path, mapping, time_unit)
        return Imported(trace, "mapped", tuple(notes))
    if fmt == "auto":
        fmt = detect_format(path)
    trace_format = by_name(fmt)
    if model is None:
        trace, notes = trace_format.read(path)
    elif trace_format.read_one_model is None:
        raise SettingError("{model} filters BurstGPT traces; this file is {fmt}", fmt=fmt)
    else:
        trace, notes = trace_format.read_one_model(path, model)
    return Imported(trace, fmt, tuple(notes))


def load_trace(path: str | Path) -> Trace:
    """Load and validate a trace in any format an importer reads, recognised by its content."""
    return read_trace(Path(path))


def read_trace(path: Path) -> Trace:
    return import_file(path).trace

"""Walking JSONL and CSV files row by row, every decoding problem a `TraceError` with its row."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune.errors import SettingText, TraceError
from autotune.traffic.columns import row_error

csv.field_size_limit(1 << 24)  # prompt text in a CSV cell can be long


def json_lines(path: Path, partial_tail: list[int] | None = None
               ) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number, object) for every non-empty line of a JSONL file; rows count from 1.

    With `partial_tail` (a list to fill), a last line that has no newline and is not complete
    JSON is skipped and its row appended there: what a writer killed mid-line leaves behind.
    Anywhere else such a line is an error, as is a last line that is bad but complete."""
    with path.open("rb") as f:
        for row, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                if partial_tail is not None and not raw.endswith(b"\n"):
                    partial_tail.append(row)  # cut inside a multi-byte character
                    return
                raise row_error(path, row, "*", "not UTF-8 text") from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                if partial_tail is not None and not raw.endswith(b"\n"):
                    partial_tail.append(row)
                    return
                raise row_error(path, row, "*", f"not a JSON object ({exc.msg})") from None
            except (ValueError, RecursionError) as exc:  # e.g. an integer of 5,000 digits
                raise row_error(path, row, "*", f"not a usable JSON object ({exc})") from None
            if not isinstance(rec, dict):
                raise row_error(path, row, "*", "not a JSON object")
            yield row, rec


def csv_rows(path: Path) -> tuple[list[str], Iterator[tuple[int, dict[str, str | None]]]]:
    """The header and an iterator of (row number, {column: cell}); the header is row 1. A row
    with fewer cells than the header has None for the missing ones."""
    f = path.open(newline="", encoding="utf-8")
    reader = csv.reader(f)
    try:
        header = [h.strip() for h in next(reader, [])]
    except (csv.Error, UnicodeDecodeError) as exc:
        f.close()
        raise row_error(path, 1, "*", f"not a CSV header ({exc})") from None

    def rows() -> Iterator[tuple[int, dict[str, str | None]]]:
        with f:
            while True:
                try:
                    cells = next(reader)
                except StopIteration:
                    return
                except UnicodeDecodeError:
                    raise row_error(path, reader.line_num + 1, "*", "not UTF-8 text") from None
                except csv.Error as exc:
                    raise row_error(path, reader.line_num, "*", f"not a CSV row ({exc})") from None
                if not cells or not any(c.strip() for c in cells):
                    continue
                if len(cells) > len(header):
                    raise row_error(path, reader.line_num, "*",
                                    f"{len(cells)} cells for {len(header)} columns")
                yield reader.line_num, {h: (cells[i].strip() if i < len(cells) else None)
                                        for i, h in enumerate(header)}

    return header, rows()


def missing_columns_error(path: Path, header: list[str], wanted: list[str]) -> TraceError:
    missing = [w for w in wanted if w not in header]
    return TraceError(SettingText("{path}: row 1, column {column!r}: missing from the header "
                                  "({header}); check the file or the {map} option", path=path,
                                  column=missing[0], header=", ".join(header) or "empty"))

"""The capture log's importer and a log cut off mid-line (the proxy killed while writing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import TraceError
from autotune.traffic.capture_format import CaptureRecord
from autotune.traffic.formats import import_file

LINES = [CaptureRecord(ts=1767225600.0 + i, api="chat", prompt_tokens=10 + i, output_tokens=5,
                       text="héllo wörld").to_json_line() for i in range(3)]


INSIDE_O = LINES[2].encode().index("ö".encode()) + 1  # between the two bytes of "ö"


@pytest.mark.parametrize("cut", [1, 20, INSIDE_O, -1])
def test_a_partial_last_line_is_skipped_with_a_note(tmp_path: Path, cut: int) -> None:
    last = LINES[2].encode()[:-1]  # the line without its newline
    path = tmp_path / "capture.jsonl"
    path.write_bytes("".join(LINES[:2]).encode() + last[:cut])
    imported = import_file(path)
    assert imported.format == "openai-log"
    assert imported.trace.prompt_tokens.tolist() == [10, 11]
    assert imported.notes == ("skipped a partial last line (row 3): the capture was cut off "
                              "while writing it",)


def test_a_last_line_missing_only_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    path.write_text("".join(LINES)[:-1])
    imported = import_file(path)
    assert imported.trace.prompt_tokens.tolist() == [10, 11, 12] and imported.notes == ()


def test_a_broken_line_before_the_end_is_still_an_error(tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    path.write_text(LINES[0] + LINES[1][:15] + "\n" + LINES[2])
    with pytest.raises(TraceError, match="row 2, column '\\*': not a JSON object"):
        import_file(path)


def test_a_broken_last_line_with_its_newline_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    path.write_text(LINES[0] + LINES[1][:15] + "\n")
    with pytest.raises(TraceError, match="row 2"):
        import_file(path)

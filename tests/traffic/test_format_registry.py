"""The trace format registry: --format's choices and detection read it, in its order, and
importing it (as the CLI does at every start) loads neither numpy nor pyarrow."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli.traffic import traffic_app
from autotune.errors import SettingError
from autotune.traffic.formats import detect, import_file
from autotune.traffic.formats.registry import FORMATS, TRACE_FORMATS
from autotune.traffic.formats.trace_format import JsonObject, Otherwise


def test_the_choices_are_auto_and_the_registered_formats_in_order() -> None:
    names = [f.name for f in TRACE_FORMATS]
    assert names == ["azure", "mooncake", "burstgpt", "openai-log", "jsonl", "parquet"]
    assert FORMATS == ("auto", *names)
    assert [f.name for f in TRACE_FORMATS if isinstance(f.recognised_by, Otherwise)] == ["jsonl"]
    help_text = " ".join(CliRunner().invoke(traffic_app, ["import", "--help"],
                                            env={"COLUMNS": "200"}).output.split())
    assert ("auto (by content), azure, mooncake, burstgpt, openai-log (the capture proxy's "
            "log), jsonl or parquet.") in help_text


def test_an_unknown_format_lists_the_registered_ones(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}\n')
    with pytest.raises(SettingError) as info:
        import_file(path, "csv")
    assert info.value.values["formats"] == ", ".join(FORMATS)


def test_detection_tries_one_kind_of_signature_in_the_registrys_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "trace"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 5, "output_length": 2}) + "\n")
    assert detect.detect_format(path) == "mooncake"
    mooncake = TRACE_FORMATS[FORMATS.index("mooncake") - 1]
    greedy = replace(mooncake, name="greedy", recognised_by=JsonObject(lambda rec: True))
    monkeypatch.setattr(detect, "TRACE_FORMATS", (greedy, *TRACE_FORMATS))
    assert detect.detect_format(path) == "greedy"
    monkeypatch.setattr(detect, "TRACE_FORMATS", (*TRACE_FORMATS, greedy))
    assert detect.detect_format(path) == "mooncake"


def test_importing_the_registry_loads_no_numpy_or_pyarrow() -> None:
    code = ("import sys, autotune.traffic.formats.registry; "
            "print(sorted(m for m in ('numpy', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

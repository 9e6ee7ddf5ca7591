"""Errors raised below the CLI name the setting (max_concurrency, out_dir); the CLI prints the
flag (--max-concurrency, --out), and the REST API and library callers see the setting."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from autotune.capture.options import build_options
from autotune.cli.main import main
from autotune.errors import SettingError
from autotune.measure.sweep import parse_concurrencies
from autotune.traffic.load import ClosedLoop
from autotune.traffic.shape import ShapeSpec
from autotune.traffic.trace import DEMO_TRACE


def _error(call: object) -> str:
    with pytest.raises(SettingError) as info:
        call()  # type: ignore[operator]
    text = str(info.value)
    assert "--" not in text, text
    return text


def test_library_messages_name_settings(tmp_path: Path) -> None:
    assert _error(lambda: parse_concurrencies("1,x")) == (
        "max_concurrency '1,x': expected comma-separated client counts, e.g. 1,4,16,64")
    assert _error(lambda: ShapeSpec(rate_scale=0).check()) == "rate_scale must be a positive number"
    assert _error(lambda: ShapeSpec(start_s=5, end_s=1).check()) == "end_s must be after start_s"
    assert _error(lambda: ClosedLoop(2, input_len=5)) == (
        "input_len and output_len go together: give both, or neither and trace for the trace's "
        "lengths")
    missing = tmp_path / "no-salt"
    assert _error(lambda: build_options(upstream="http://127.0.0.1:1", listen="127.0.0.1:0",
                                        out_dir=tmp_path, salt_file=missing)) == (
        f"salt_file {missing} does not exist; leave it out to generate a salt in the out_dir "
        "directory")


def _cli_error(capfd: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_the_cli_prints_flags(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-salt"
    assert _cli_error(capfd, "capture", "--upstream", "http://127.0.0.1:1", "--listen",
                      "127.0.0.1:0", "--out", str(tmp_path / "cap"), "--salt-file",
                      str(missing)) == (
        f"autotune: error: --salt-file {missing} does not exist; leave it out to generate a salt "
        "in the --out directory")
    assert _cli_error(capfd, "capture", "--upstream", "http://127.0.0.1:1", "--listen",
                      "127.0.0.1:0", "--out", str(tmp_path / "cap"), "--rotate-mb", "1",
                      "--rotate-s", "1") == (
        "autotune: error: --rotate-mb and --rotate-s exclude each other; give one")
    # start_s and end_s: settings whose flags are not their names in kebab case
    assert _cli_error(capfd, "traffic", "shape", str(DEMO_TRACE), "--out",
                      str(tmp_path / "x.parquet"), "--start", "5", "--end", "1") == (
        "autotune: error: --end must be after --start")


def test_a_value_with_braces_is_not_a_placeholder() -> None:
    assert _error(lambda: parse_concurrencies("{max_concurrency}")) == (
        "max_concurrency '{max_concurrency}': expected comma-separated client counts, "
        "e.g. 1,4,16,64")


def test_a_pickled_setting_error_keeps_its_settings() -> None:
    exc = SettingError("{max_concurrency} {text!r}: bad", text="{x}")
    again = pickle.loads(pickle.dumps(exc))
    assert (type(again), again.template, again.values, str(again)) == (
        SettingError, exc.template, exc.values, "max_concurrency '{x}': bad")

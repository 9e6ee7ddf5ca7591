"""The --json session: whatever a command writes goes to stderr, stdout gets one strict JSON
object at the end (the result, or the error that replaced it)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from autotune.cli import output


@pytest.mark.parametrize("args, wanted", [
    (["tune", "--json"], True),
    (["campaigns"], False),
    # Engine arguments after `--` belong to vLLM, not to autotune.
    (["check-config", "--gpus", "8", "--", "--json"], False),
    (["check-config", "--json", "--", "--block-size", "16"], True),
])
def test_requested(args: list[str], wanted: bool) -> None:
    assert output.requested(args) is wanted


def test_nan_and_infinity_become_null() -> None:
    value = {"a": math.nan, "b": [1.5, math.inf, {"c": -math.inf}], "d": "x"}
    assert json.loads(output.dumps(value)) == {"a": None, "b": [1.5, None, {"c": None}], "d": "x"}


def test_session_sends_everything_else_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    with output.json_session():
        print("a table line")
        os.write(1, b"a child process's line\n")  # fd 1 itself, as an engine would write
        output.emit({"result": 1})
    out, err = capfd.readouterr()
    assert out == '{"result": 1}\n'
    assert "a table line" in err and "a child process's line" in err
    print("after")  # stdout is stdout again
    assert capfd.readouterr().out == "after\n"


def test_an_error_replaces_the_result(capfd: pytest.CaptureFixture[str]) -> None:
    with output.json_session():
        output.emit({"result": 1})
        output.error("bad input; fix it", 2, "ConfigError")
    out, err = capfd.readouterr()
    assert json.loads(out) == {"error": {"message": "bad input; fix it", "exit_code": 2,
                                         "type": "ConfigError"}}
    assert err.strip() == "autotune: error: bad input; fix it"


def test_outside_a_session_the_result_prints_at_once(capfd: pytest.CaptureFixture[str]) -> None:
    output.emit({"x": [1, 2]})
    output.error("no such campaign", 2, "NotFoundError")  # the line only, no JSON
    out, err = capfd.readouterr()
    assert out == '{"x": [1, 2]}\n' and err.strip() == "autotune: error: no such campaign"


def test_main_in_json_mode_on_a_usage_error() -> None:
    """Through main(), in a fresh interpreter: the one error object, exit code 2."""
    code = ("import sys; from autotune.cli.main import main; "
            "sys.exit(main(['campaigns', '--jsno', '--json']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["type"] == "UsageError" and "--jsno" in error["message"]
    assert proc.stderr.strip() == f"autotune: error: {error['message']}"

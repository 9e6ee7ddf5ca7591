"""Bad multi-fidelity flags: one line naming the problem and the fix, exit code 2, nothing
written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_bad_input import FAST, _assert_one_line_error, _rows
from tests.conftest import run_cli

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier


@pytest.mark.parametrize("args, fragment", [
    (["--screen", "vllm", "--confirm", "vllm"],
     "--screen vllm is a real engine backend; screening is for a simulator (sim)"),
    (["--screen", "sim", "--confirm", "sim"], "--confirm sim is a simulator"),
    (["--screen", "gem5", "--confirm", "vllm"], "unknown backend 'gem5'; available:"),
    (["--screen", "sim", "--confirm", "trt"], "unknown backend 'trt'; available:"),
    (["--screen", "sim"], "--screen sim needs --confirm BACKEND"),
    (["--confirm", "vllm"], "--confirm and --screen-top are for a multi-fidelity campaign"),
    (["--screen-top", "2"], "--confirm and --screen-top are for a multi-fidelity campaign"),
    (["--screen", "sim", "--confirm", "vllm"], "--confirm vllm needs --model-path"),
    (["--screen", "sim", "--confirm", "vllm", "--screen-top", "0", "--model-path", "m"],
     "--screen-top must be at least 1"),
    (["--backend", "sim", "--screen", "sim", "--confirm", "vllm"],
     "--backend sim and --confirm vllm disagree"),
])
def test_bad_multifidelity_flags_write_nothing(tmp_path: Path, migrated_sqlite: str,
                                               args: list[str], fragment: str) -> None:
    before = _rows(migrated_sqlite)
    proc = run_cli("tune", *FAST, *args, env={"AUTOTUNE_DATABASE_URL": migrated_sqlite})
    _assert_one_line_error(proc, fragment)
    assert _rows(migrated_sqlite) == before

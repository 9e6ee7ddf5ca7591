"""`autotune sim kernels build`: bad input is one line, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("args, fragment", [
    (["--parallel", "TP8", "--parallel", "DP2TP4"], "parallel layout 'DP2TP4': expected"),
    (["--parallel", "TP8", "--precision", "int3"],
     "precision 'int3': expected dense[/experts] from bf16"),
])
def test_bad_input(tmp_path: Path, args: list[str], fragment: str) -> None:
    out = tmp_path / "tables"
    proc = run_cli("sim", "kernels", "build", "--gpu", "H200", "--model", "DeepSeek-V4-Flash",
                   "--out", str(out), *args)
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and fragment in lines[0], proc.stderr
    assert not out.exists()

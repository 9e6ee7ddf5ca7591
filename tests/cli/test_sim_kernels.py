"""`autotune sim kernels build`: bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.e2e
FP8 = "fp8_block/fp8_block"


@pytest.mark.parametrize("args, fragment", [
    (["--parallel", "TP8", "--parallel", "DP2TP4"], "parallel layout 'DP2TP4': expected"),
    (["--parallel", "TP8", "--precision", "int3"],
     "precision 'int3': expected dense[/experts] from bf16"),
    (["--parallel", "TP8", "--estimate-moe-from", "int4"],
     "--estimate-moe-from 'int4': expected one of w4a16_mxfp4"),
    (["--parallel", "TP8", "--estimate-moe-from", "w4a16_mxfp4", "--precision", FP8],
     "drop --precision fp8_block/fp8_block"),
    (["--parallel", "TP8", "--kv-cache-dtype", "int8"],
     "--kv-cache-dtype int8: tables are sampled at auto (the model's default) or fp8"),
    (["--parallel", "TP8", "--estimate-moe-from", "w4a16_mxfp4", "--kv-cache-dtype", "fp8"],
     "drop --kv-cache-dtype"),
])
def test_bad_input(tmp_path: Path, args: list[str], fragment: str) -> None:
    out = tmp_path / "tables"
    proc = run_cli("sim", "kernels", "build", "--gpu", "H200", "--model", "DeepSeek-V4-Flash",
                   "--out", str(out), *args)
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and fragment in lines[0], proc.stderr
    assert not out.exists()


def test_simulate_json_names_the_step_model() -> None:
    from autotune.traffic.trace import DEMO_TRACE

    runs = {}
    for name, args in (("default", []), ("roofline", ["--step-model", "roofline"]),
                       ("fp8", ["--step-precision", "fp8_block/fp8_block"])):
        proc = run_cli("simulate", "--trace", str(DEMO_TRACE), "--json", *args)
        assert proc.returncode == 0, proc.stderr
        runs[name] = json.loads(proc.stdout)
    # The default: the checkpoint's own (FP4-expert) table, which says it is partly estimated.
    assert runs["default"]["step_model"].startswith(
        "partly estimated table H200-141GB/DeepSeek-V4-Flash/TP8/fp8_block/fp4")
    assert runs["roofline"]["step_model"].startswith(
        "roofline; profile H200-141GB/DeepSeek-V4-Flash")
    assert runs["fp8"]["step_model"].startswith("measured table H200-141GB/DeepSeek-V4-Flash/TP8/")
    assert len({r["output_tok_s"] for r in runs.values()}) == 3

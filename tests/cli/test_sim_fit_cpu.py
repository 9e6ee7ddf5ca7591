"""`autotune sim fit-cpu`: bad input is one line naming its flag, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.cli.main import main


def _sweep(path: Path) -> Path:
    """A real engine's sweep record with decode steps at two batch sizes: enough to pass the
    record's own checks."""
    steps = [{"batch": b, "kv_tokens": 600.0 * b, "step_ms": 5.0 + b, "gaps": 50,
              "prompt_tokens": 0} for b in (1, 8)]
    path.write_text(json.dumps({
        "kind": "autotune.bench_sweep", "version": 1, "backend": "vllm", "model": "tiny-llama",
        "gpu": "cpu", "gpu_count": 1, "tensor_parallel_size": 1, "max_model_len": 4096,
        "engine_args": {"max_model_len": 4096}, "extra_engine_args": [],
        "load": {"input_len": None}, "runs": [{"max_concurrency": 1, "step_times": steps}]}))
    return path


@pytest.mark.parametrize("args, line", [
    (["{tmp}/missing.json"], "{tmp}/missing.json: cannot read a sweep's JSON ([Errno 2] No such "
                             "file or directory: '{tmp}/missing.json')"),
    (["{tmp}/sweep.json", "--profile", "{tmp}/nope.yaml"], "--profile {tmp}/nope.yaml: no such file"),
    (["{tmp}/sweep.json", "--out", "{tmp}"],
     "--out {tmp}: a directory; give a file name, e.g. {tmp}/GPU__MODEL__v2.yaml"),
])
def test_bad_input_is_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                               args: list[str], line: str) -> None:
    _sweep(tmp_path / "sweep.json")
    code = main(["sim", "fit-cpu", *(a.format(tmp=tmp_path) for a in args)])
    err = [x for x in capfd.readouterr().err.splitlines() if x.strip()]
    assert code == 2 and err == [f"autotune: error: {line.format(tmp=tmp_path)}"], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.json"]

"""The same real trial on CUDA: a vLLM engine on a GPU, replayed, with NVML telemetry.

Skipped where no GPU (or no CUDA build of vLLM) is present; `scripts/gpu_check.sh` runs it on a
GPU machine in a few minutes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.measure.metrics import summarize
from autotune.measure.tiny_model import make_tiny_model
from autotune.traffic.formats import load_trace
from autotune.workers.vllm.backend import VllmBackend
from tests.conftest import public_trace, vllm_processes

pytestmark = pytest.mark.gpu


def _cuda_engine_python() -> str:
    python = os.environ.get("AUTOTUNE_GPU_ENGINE_PYTHON", "python3")
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no NVIDIA GPU here")
    probe = subprocess.run([python, "-c", "import torch, vllm; assert torch.cuda.is_available()"],
                           capture_output=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"{python} has no CUDA build of vLLM (set AUTOTUNE_GPU_ENGINE_PYTHON)")
    return python


def test_real_trial_on_a_gpu(tmp_path: Path) -> None:
    python = _cuda_engine_python()
    model = make_tiny_model(tmp_path / "tiny")
    dep = DeploymentSpec(name="gpu-tiny", model="tiny-llama", gpu="H100-80GB", gpu_count=1,
                         tensor_parallel_size=1, max_model_len=2048)
    backend = VllmBackend(model_path=str(model), extra_args=["--load-format", "dummy"],
                          command=[python, "-m", "vllm.entrypoints.openai.api_server"],
                          log_dir=str(tmp_path))
    trace = load_trace(public_trace("azure_llm_2023_code.csv")).slice(0, 64)
    try:
        backend.start(EngineConfig(max_model_len=2048, max_num_seqs=32, block_size=16,
                                   gpu_memory_utilization=0.5), dep, label="gpu")
        backend.warmup(trace, 0)
        summary = summarize(backend.replay(trace, 8.0, 0))
        telemetry = backend.telemetry()
    finally:
        backend.stop()
    assert summary.completed == 64 and summary.error_rate == 0
    assert telemetry["available"] and telemetry["samples"] > 0
    assert 0 < telemetry["memory_used_peak_fraction"] < 0.95
    # The engine's own reservation (half the card) is not pressure.
    assert telemetry["memory_reserved_fraction"] == 0.5 and telemetry["watermark"] == "ok"
    assert vllm_processes() == []

"""The vllm backend against real vLLM engines (the CPU build, a tiny local model)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.errors import EngineStartError
from autotune.measure.metrics import summarize
from autotune.measure.tiny_model import make_tiny_model
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import Trace
from autotune.workers.vllm.backend import VllmBackend
from autotune.workers.vllm.metrics import KV_USAGE, kv_usage, scrape
from autotune.workers.vllm.process import port_is_free
from tests.conftest import engine_python, public_trace, vllm_processes

pytestmark = pytest.mark.integration
CPU = DeploymentSpec(name="cpu-tiny", model="tiny-llama", gpu="cpu", gpu_count=1,
                     tensor_parallel_size=1, max_model_len=2048)
BASE = EngineConfig(max_model_len=2048, block_size=32)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(autouse=True)
def nothing_left_behind() -> Iterator[None]:
    yield
    assert vllm_processes() == []


def backend(model_dir: Path, log_dir: Path, **options: object) -> VllmBackend:
    return VllmBackend(model_path=str(model_dir),
                       command=[engine_python(), "-m", "vllm.entrypoints.openai.api_server"],
                       extra_args=["--load-format", "dummy", "--enforce-eager"],
                       log_dir=str(log_dir), **options)  # type: ignore[arg-type]


def test_serves_and_replays_an_azure_slice_then_a_closed_loop(model_dir: Path,
                                                               tmp_path: Path) -> None:
    # One engine for both kinds of replay: its start is most of the test's time.
    from autotune.traffic.load import ClosedLoop

    requests = ClosedLoop(2, num_prompts=16, input_len=64, output_len=24).requests(None, 2048)
    closed = {}
    trace = load_trace(public_trace("azure_llm_2023_code.csv")).slice(0, 24)
    chat = Trace.from_rows("chat", [{"arrival_s": i * 0.1, "prompt_tokens": 8, "output_tokens": 12,
                                     "prompt": f"Tell me about block sizes, part {i}."}
                                    for i in range(6)])
    b = backend(model_dir, tmp_path)
    try:
        b.start(BASE.merged(max_num_seqs=16), CPU, label="replay")
        port = b._engine.port  # type: ignore[union-attr]
        b.warmup(trace, 0)
        # The sampler's one-gauge read agrees with the whole scrape (the engine is idle here).
        assert kv_usage(b.base_url) == scrape(b.base_url)[KV_USAGE]
        summary = summarize(b.replay(trace, 4.0, 0))
        chat_summary = summarize(b.replay(chat, 1.0, 0))  # the same engine, text on chat
        b.warmup(requests, 0)
        for n in (2, 4):
            closed[n] = b.replay_closed_loop(requests, n, 0)
    finally:
        b.stop()
    assert port_is_free(port)
    assert chat_summary.completed == 6
    assert chat_summary.output_tok_s * chat_summary.duration_s == pytest.approx(72)
    assert summary.completed == 24 and summary.error_rate == 0
    assert summary.output_tok_s * summary.duration_s == pytest.approx(
        int(trace.output_tokens.sum()))
    assert 0 < summary.ttft_p50_ms < summary.e2e_p99_ms
    # Recorded; how small it stays is benchmarks/replay_client.py's to measure, not a test's.
    assert summary.send_lag_p99_ms is not None and summary.send_lag_p99_ms >= 0
    assert "prefix_cache_hit_rate" in summary.engine_stats
    assert "kv_cache_usage_peak" in summary.engine_stats  # sampled during the replay
    assert "Application startup complete" in (tmp_path / "replay.log").read_text()
    # Closed loops keep at most n in flight and complete every request.
    for n, result in closed.items():
        assert not result.failed.any() and (result.output_tokens == 24).all()
        send, done = result.scheduled_s, result.scheduled_s + result.e2e_s
        assert (np.diff(send) >= 0).all()  # sent in order
        # At every send, the requests sent before it and not yet finished number at most n - 1.
        for i in range(len(send)):
            assert int(((send[:i] <= send[i]) & (done[:i] > send[i])).sum()) <= n - 1
        # The clients were kept busy: the first n went out together, before any finished.
        assert send[n - 1] < done.min()
        assert 0 < summarize(result).ttft_p50_ms < summarize(result).e2e_p50_ms


def test_invalid_arguments_are_classified(model_dir: Path, tmp_path: Path) -> None:
    b = backend(model_dir, tmp_path)
    with pytest.raises(EngineStartError) as info:
        b.start(BASE.merged(max_num_seqs=64, max_num_batched_tokens=8), CPU, label="bad")
    assert info.value.failure_class == "invalid_args"
    assert "max_num_batched_tokens" in str(info.value)


def test_kv_cache_without_memory_is_classified_as_oom(model_dir: Path, tmp_path: Path) -> None:
    b = backend(model_dir, tmp_path, env={"VLLM_CPU_KVCACHE_SPACE": "0"})
    with pytest.raises(EngineStartError) as info:
        b.start(BASE, CPU, label="oom")
    assert info.value.failure_class == "oom"


def test_start_timeout_is_classified_and_the_engine_is_gone(model_dir: Path, tmp_path: Path) -> None:
    b = backend(model_dir, tmp_path, startup_timeout_s=3)
    with pytest.raises(EngineStartError) as info:
        b.start(BASE, CPU, label="slow")
    assert info.value.failure_class == "start_timeout"


def test_no_engine_outlives_a_killed_tuner(model_dir: Path, tmp_path: Path) -> None:
    """SIGKILL the process that runs the trial: its real vLLM server (API server and engine core)
    must go with it."""
    import signal
    import subprocess
    import sys
    import time

    script = f"""
import sys
from pathlib import Path
from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.workers.vllm.backend import VllmBackend
from autotune.workers.vllm.process import port_is_free
b = VllmBackend(model_path={str(model_dir)!r}, log_dir={str(tmp_path)!r},
                command=[{engine_python()!r}, "-m", "vllm.entrypoints.openai.api_server"],
                extra_args=["--load-format", "dummy", "--enforce-eager"])
b.start(EngineConfig(max_model_len=2048, block_size=32),
        DeploymentSpec(name="k", model="tiny-llama", gpu="cpu", gpu_count=1,
                       tensor_parallel_size=1, max_model_len=2048), label="killed")
print("healthy", flush=True)
import time; time.sleep(600)
"""
    tuner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[3])
    try:
        assert tuner.stdout is not None and tuner.stdout.readline().strip() == "healthy"
        assert vllm_processes(), "the engine is running"
        tuner.send_signal(signal.SIGKILL)
        tuner.wait()
        deadline = time.monotonic() + 30
        while vllm_processes() and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        tuner.kill()
    # The autouse fixture asserts that no vLLM process is left.

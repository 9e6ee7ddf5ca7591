"""Real measurements for judging the simulator: CPU-build vLLM engines serving the tiny model.

Used by `benchmarks/sim_fidelity.py` and the calibration integration test, so both measure the
same way: one engine per config, warmed up and then run through the trace once unmeasured (the
CPU build specialises kernels per shape for a while), then the same trace at each multiplier.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from autotune.deployment import DeploymentSpec
from autotune.engine_config import EngineConfig
from autotune.metrics import summarize
from autotune.records import Measurement
from autotune.tiny_model import make_tiny_model
from autotune.traffic.trace import Trace
from workers.vllm.backend import VllmBackend

CPU = DeploymentSpec(name="fidelity", model="tiny-llama", gpu="cpu", gpu_count=1,
                     tensor_parallel_size=1, max_model_len=2048)
SCALES = (1.5, 4.0)
OBSERVED = ("output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms")


def fidelity_trace(requests: int = 40, seed: int = 7) -> Trace:
    """Chat-like: Poisson arrivals at 2 req/s, prompts of 32-768 tokens, 16-96 output tokens."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(0.5, requests))
    prompts, outputs = rng.integers(32, 768, requests), rng.integers(16, 96, requests)
    rows: list[dict[str, object]] = [
        {"arrival_s": float(t - arrivals[0]), "prompt_tokens": int(p), "output_tokens": int(o)}
        for t, p, o in zip(arrivals, prompts, outputs, strict=True)]
    return Trace.from_rows("fidelity", rows)


def measure_real(configs: Sequence[dict[str, object]], trace: Trace, engine_python: str,
                 work: Path, scales: Sequence[float] = SCALES) -> list[Measurement]:
    """One CPU engine per config (block size 32 unless given), the trace at each multiplier."""
    model = make_tiny_model(work / "model")
    found = []
    for i, values in enumerate(configs):
        config = EngineConfig(max_model_len=CPU.max_model_len, block_size=32).merged(**values)
        backend = VllmBackend(model_path=str(model),
                              command=[engine_python, "-m", "vllm.entrypoints.openai.api_server"],
                              extra_args=["--load-format", "dummy", "--enforce-eager"],
                              log_dir=str(work / "logs"))
        try:
            backend.start(config, CPU, label=f"fidelity{i}")
            backend.warmup(trace, 0)
            backend.replay(trace, scales[0], 1)  # discarded: the steady state is what is compared
            for scale in scales:
                s = summarize(backend.replay(trace, scale, 0))
                found.append(Measurement(config=config, deployment=CPU, trace=trace,
                                         rate_scale=scale, seed=0,
                                         observed={k: getattr(s, k) for k in OBSERVED},
                                         source=f"config {i} x{scale:g}"))
        finally:
            backend.stop()
    return found

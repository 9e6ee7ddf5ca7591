"""`autotune.workers.sim.fit_cpu`: the CPU step cost out of a real sweep's decode steps."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.errors import ConfigError
from autotune.workers.sim.fit_cpu import check_record, fit_cpu, start_model
from autotune.workers.sim.profile import BUNDLED, load_profile

CPU_PROFILE = load_profile(BUNDLED / "cpu.yaml")
GPU_PROFILE = load_profile(BUNDLED / "gpu.yaml")


def _record(model: str, gpu: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "autotune.bench_sweep", "version": 1, "backend": "vllm", "model": model,
            "gpu": gpu, "gpu_count": 1, "tensor_parallel_size": 1, "max_model_len": 4096,
            "engine_args": {"max_model_len": 4096}, "extra_engine_args": [],
            "load": {"input_len": None}, "runs": [{"max_concurrency": 1, "step_times": steps}]}


def _steps(record: dict[str, Any], profile: Any, cpu_s: Any, overlap: bool
           ) -> list[dict[str, Any]]:
    """Decode steps as an engine whose CPU part is cpu_s(batch) would show them."""
    perf, _ = start_model(record, profile, "roofline", None)
    assert perf.overlap_cpu is overlap
    out = []
    for batch in (1, 3, 8, 16, 64, 256):
        kv = batch * 600.0
        gpu, _ = perf.step_parts_s(batch, kv)
        step = max(gpu, cpu_s(batch)) if overlap else gpu + cpu_s(batch)
        out.append({"batch": batch, "kv_tokens": kv, "step_ms": step * 1000, "gaps": 50,
                    "prompt_tokens": 0})
    return out


def test_summed_steps_give_back_the_cpu_cost_they_were_made_with() -> None:
    """The CPU build adds its CPU time to each step: measured - GPU is the CPU part."""
    record = _record("tiny-llama", "cpu", [])
    record["runs"][0]["step_times"] = _steps(record, CPU_PROFILE,
                                             lambda b: 1.5e-3 + 4e-5 * b, overlap=False)
    fit = fit_cpu(record, CPU_PROFILE, step_model="roofline")
    c = fit.profile.coefficients
    assert c.cpu_step_s == pytest.approx(1.5e-3, rel=1e-6)
    assert c.cpu_seq_s == pytest.approx(4e-5, rel=1e-6)
    assert c.cpu_small_batch_seq_s == pytest.approx(0, abs=1e-9)
    assert fit.fitted == ("cpu_step_s", "cpu_seq_s", "cpu_small_batch_seq_s")
    assert fit.profile.coefficients.hbm_efficiency == CPU_PROFILE.coefficients.hbm_efficiency
    assert all(p.used for p in fit.points) and fit.rms_ms < 1e-6


def test_overlapped_steps_fit_only_where_the_cpu_was_the_longer() -> None:
    """With asynchronous scheduling a step lasts max(GPU, CPU): the GPU-bound batches only
    bound the CPU time and are left out, the CPU-bound ones give it."""
    record = _record("Llama-3.1-8B", "H100", [])
    true_cpu = lambda b: 7e-3 + 2e-5 * b  # noqa: E731
    record["runs"][0]["step_times"] = _steps(record, GPU_PROFILE, true_cpu, overlap=True)
    fit = fit_cpu(record, GPU_PROFILE, step_model="roofline")
    used = [p.batch for p in fit.points if p.used]
    assert 1 in used and 256 not in used  # an 8B's 256-sequence step outlasts 12 ms of CPU
    c = fit.profile.coefficients
    assert c.cpu_step_s == pytest.approx(7e-3, rel=1e-3)
    assert c.cpu_seq_s == pytest.approx(2e-5, rel=1e-2)
    assert c.cpu_small_batch_seq_s == pytest.approx(0, abs=1e-8)


def test_a_gpu_bound_sweep_is_refused_not_fitted() -> None:
    record = _record("Llama-3.1-8B", "H100", [])
    record["runs"][0]["step_times"] = _steps(record, GPU_PROFILE, lambda b: 1e-5, overlap=True)
    with pytest.raises(ConfigError, match="GPU-bound"):
        fit_cpu(record, GPU_PROFILE, step_model="roofline")


@pytest.mark.parametrize("change, fragment", [
    ({"kind": "something"}, "not an `autotune bench sweep` record"),
    ({"backend": "sim"}, "a simulated sweep"),
    ({"runs": [{"step_times": [{"batch": 4, "kv_tokens": 1.0, "step_ms": 2.0, "gaps": 30}]}]},
     "1 batch size(s)"),
])
def test_records_it_cannot_fit_are_one_clear_error(change: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        check_record({**_record("tiny-llama", "cpu", []), **change}, "sweep.json")

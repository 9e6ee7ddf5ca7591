"""vLLM's defaults for unset engine arguments (autotune/domain/vllm_defaults.py)."""

from __future__ import annotations

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.vllm_defaults import effective_values


def _dep(gpu: str) -> DeploymentSpec:
    return DeploymentSpec(name="d", model="Llama-3.1-8B", gpu=gpu, gpu_count=1,
                          tensor_parallel_size=1, max_model_len=8192)


def _capture(gpu: str, **asked: object) -> int:
    return int(effective_values(EngineConfig(**asked), _dep(gpu))["max_cudagraph_capture_size"])


def test_the_capture_ceiling_is_1024_on_blackwell_and_512_elsewhere() -> None:
    # vLLM's defaults: 1,024 sequences on both; 2 x 1,024 capped by the platform's ceiling.
    assert _capture("H200-141GB") == 512
    assert _capture("B200-180GB") == _capture("B300-288GB") == 1024
    assert _capture("B200-180GB", max_num_batched_tokens=768) == 768  # never above the budget
    assert _capture("B200-180GB", max_cudagraph_capture_size=256) == 256  # asked: as asked
    assert _capture("cpu") == 0 and _capture("H200-141GB", enforce_eager=True) == 0


def test_drafted_tokens_widen_the_default_capture_size() -> None:
    # A decode step verifies 1 + k tokens a sequence: 32 sequences x 4 x 2.
    ngram = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    assert _capture("H200-141GB", max_num_seqs=32) == 64
    assert _capture("H200-141GB", max_num_seqs=32, speculative_config=ngram) == 256

"""What the simulator makes of an engine config: vLLM's start-up checks, the features it has no
model of (refused, never ignored) and the rules' refusals, then the shape it models."""

from __future__ import annotations

from typing import Any

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.vllm_defaults import effective_values
from autotune.errors import EngineStartError
from autotune.search.spaces.violations import engine_refusals
from autotune.vocabulary import FailureClass
from autotune.workers.sim.perf import EngineShape, StartFailure


def _check_args(values: dict[str, Any], device: str) -> None:
    """The start-up checks vLLM itself makes, with the failure class a real start would get."""
    if values["max_num_batched_tokens"] < values["max_num_seqs"]:
        raise StartFailure("max_num_batched_tokens must be >= max_num_seqs", FailureClass.INVALID_ARGS)
    if not values["enable_chunked_prefill"] and (
            values["max_num_batched_tokens"] < values["max_model_len"]):
        raise StartFailure("without chunked prefill max_num_batched_tokens must be >= "
                           "max_model_len", FailureClass.INVALID_ARGS)
    multiple = 32 if device == "cpu" else 16
    if values["block_size"] % multiple:
        raise StartFailure(f"block_size must be a multiple of {multiple} on {device}",
                           FailureClass.INVALID_ARGS)
    if device == "cpu" and str(values["kv_cache_dtype"]).startswith("fp8"):
        raise StartFailure("the CPU backend has no fp8 KV cache", FailureClass.INVALID_ARGS)


def _check_parallel(values: dict[str, Any], deployment: DeploymentSpec) -> None:
    gpus = (values["tensor_parallel_size"] * values["pipeline_parallel_size"]
            * values["data_parallel_size"])
    if gpus > deployment.gpu_count:
        raise StartFailure(f"tensor x pipeline x data parallel size needs {gpus} GPUs; the "
                           f"deployment has {deployment.gpu_count}", FailureClass.INVALID_ARGS)
    if (values["data_parallel_size"] > 1 and deployment.model_info.num_experts
            and not values["enable_expert_parallel"]):
        # Without EP vLLM splits every expert over all DP x TP ranks: not modelled (DEP is).
        raise StartFailure("the simulator models data parallelism of an MoE model with expert "
                           "parallelism (DEP) only; add enable_expert_parallel", FailureClass.INVALID_ARGS)


def _check_modelled(values: dict[str, Any]) -> None:
    """Engine features the simulator has no model of: refused, never silently ignored."""
    if values["pipeline_parallel_size"] > 1:
        # Stages, micro-batches and their bubble are not modelled; treating PP as TP would
        # overstate it.
        raise StartFailure("the simulator does not model pipeline parallelism "
                           "(pipeline_parallel_size > 1); not simulated", FailureClass.INVALID_ARGS)
    if values.get("speculative_config"):
        raise StartFailure("the simulator does not model speculative decoding "
                           "(speculative_config); not simulated", FailureClass.INVALID_ARGS)


def _check_rules(config: EngineConfig, deployment: DeploymentSpec) -> None:
    """What vLLM refuses for this model and GPU (the common rules of severity error), refused
    here too: the simulator never measures a config a real engine would not start."""
    refused = engine_refusals(config, deployment)
    if refused:
        v = refused[0]
        raise StartFailure(f"{v.message} (rule {v.rule}; {v.source})", FailureClass.INVALID_ARGS)


def engine_shape(config: EngineConfig, deployment: DeploymentSpec) -> EngineShape:
    values = effective_values(config, deployment)
    try:
        _check_args(values, deployment.gpu_info.device)
        _check_modelled(values)
        _check_parallel(values, deployment)
        _check_rules(config, deployment)
    except StartFailure as exc:
        raise EngineStartError(f"simulated engine failed to start: {exc}",
                               exc.failure_class) from None
    return EngineShape(**{f: values[f] for f in EngineShape.__dataclass_fields__})

"""EngineConfig: the vLLM engine arguments of one trial, under vLLM's own names.

A field left as None means "vLLM's default" and is not passed at all, so the engine decides
(and the simulator resolves the same default). The tests feed `to_cli_args()` and `to_yaml()`
to vLLM's own argument parser, so a flag vLLM does not know never reaches an engine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from autotune.errors import ConfigError

# Arguments that older guides recommend but current vLLM (V1 engine) has removed: passing one
# makes the server exit at start, so they are refused here with the reason.
REMOVED_ARGS: dict[str, str] = {
    "preemption_mode": "V1 always preempts by recompute",
    "swap_space": "V1 has no CPU swap space (KV offloading is the nearest thing)",
    "max_num_partial_prefills": "the partial-prefill limits were removed",
    "max_long_partial_prefills": "the partial-prefill limits were removed",
    "num_scheduler_steps": "multi-step scheduling was removed",
    "disable_log_requests": "use --enable-log-requests / --no-enable-log-requests",
}


class SpeculativeConfig(BaseModel):
    """`--speculative-config`: the draft method and how many tokens it proposes per step.

    Only methods that need no separate draft model: `mtp` (the model's own multi-token-
    prediction layers; vLLM maps the per-model names such as `deepseek_mtp` to it) and `ngram`
    (prompt lookup on the CPU). vLLM takes more keys; a trial tunes only these.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Literal["mtp", "ngram"]
    num_speculative_tokens: int = Field(gt=0)
    prompt_lookup_max: int | None = Field(default=None, ge=1)  # ngram only
    prompt_lookup_min: int | None = Field(default=None, ge=1)  # ngram only


class EngineConfig(BaseModel):
    """Frozen vLLM engine arguments. Unknown names are refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_model_len: int | None = Field(default=None, gt=0)
    tensor_parallel_size: int | None = Field(default=None, gt=0)
    # Data-parallel ranks: engine replicas for a dense model; for an MoE model with expert
    # parallelism, attention replicated per rank and the experts sharded over all ranks
    # (DEP). GPUs used = tensor x data.
    data_parallel_size: int | None = Field(default=None, gt=0)
    # Experts sharded whole over the tensor x data parallel ranks instead of each expert split
    # over the tensor-parallel ranks (`--enable-expert-parallel`).
    enable_expert_parallel: bool | None = None
    max_num_seqs: int | None = Field(default=None, gt=0)
    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    block_size: int | None = Field(default=None, gt=0)
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0)
    # 0 = no cap: a prefill takes as much of the step's token budget as it can.
    long_prefill_token_threshold: int | None = Field(default=None, ge=0)
    # fp8_ds_mla: the DeepSeek sparse-MLA layout vLLM turns a DeepSeek-V4 "fp8" into.
    kv_cache_dtype: Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2",
                            "fp8_ds_mla"] | None = None
    enforce_eager: bool | None = None
    # GPUs used = tensor x pipeline x data parallel size.
    pipeline_parallel_size: int | None = Field(default=None, gt=0)
    # vLLM's None turns async scheduling on where nothing forbids it (GPUs); the CPU build
    # always turns it off.
    async_scheduling: bool | None = None
    # The largest decode batch (tokens) run as a CUDA graph; bigger ones run eagerly.
    max_cudagraph_capture_size: int | None = Field(default=None, gt=0)
    speculative_config: SpeculativeConfig | None = None

    @field_validator("gpu_memory_utilization")
    @classmethod
    def _round_fraction(cls, value: float | None) -> float | None:
        # Samplers step floats in binary (0.8799999999999999); engines and people read 0.88.
        return None if value is None else round(value, 4)

    @field_validator("speculative_config", mode="before")
    @classmethod
    def _spec_from_json(cls, value: Any) -> Any:
        # vLLM's own CLI form, a JSON object as text: how a search space's categorical
        # parameter carries a nested config (Optuna's choices are scalars).
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError:
                raise ValueError(f"not a JSON object: {value!r}") from None
        return value

    @model_validator(mode="after")
    def _async_with_spec_method(self) -> EngineConfig:
        # VllmConfig refuses an explicit --async-scheduling with the CPU n-gram drafter
        # ("async scheduling is only supported with EAGLE/MTP/Draft Model/NGram GPU ...").
        spec = self.speculative_config
        if self.async_scheduling and spec is not None and spec.method == "ngram":
            raise ValueError("vLLM refuses async_scheduling with the ngram speculative method")
        return self

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(cls.model_fields)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> EngineConfig:
        """Build from a plain mapping; a removed or unknown argument is a ConfigError."""
        for name in values:
            check_known_arg(name)
        try:
            return cls(**dict(values))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            message = str(first["msg"]).removeprefix("Value error, ")
            raise ConfigError(f"engine argument {where}: {message}" if where
                              else f"engine config: {message}") from None

    def explicit(self) -> dict[str, Any]:
        """The arguments that are set, in field order (None ones are vLLM's defaults); a
        nested config (speculative_config) as a plain dict of its set keys."""
        return self.model_dump(exclude_none=True)

    def key(self) -> str:
        """The set arguments as canonical text: equal for equal configs, and hashable where
        `explicit()` (a nested config is a dict) is not."""
        return json.dumps(self.explicit(), sort_keys=True)

    def merged(self, **overrides: Any) -> EngineConfig:
        return EngineConfig.from_mapping({**self.explicit(), **overrides})

    def to_cli_args(self) -> list[str]:
        """The exact `--flag value` list for `vllm serve` / the OpenAI api_server."""
        args: list[str] = []
        for name, value in self.explicit().items():
            flag = name.replace("_", "-")
            if isinstance(value, bool):
                # vLLM's booleans are BooleanOptionalAction: --x / --no-x.
                args.append(f"--{flag}" if value else f"--no-{flag}")
            elif isinstance(value, dict):
                # vLLM parses a config-valued flag with json.loads.
                args += [f"--{flag}", json.dumps(value, separators=(",", ":"))]
            else:
                args += [f"--{flag}", str(value)]
        return args

    def to_yaml(self, model: str | None = None) -> str:
        """A file for `vllm serve --config FILE`, naming `model` first where given.

        Keys are kebab-case, and a false boolean is written `no-key: true`: vLLM's
        FlexibleArgumentParser.load_config_file (vllm/utils/argparse_utils.py, 0.32 to 0.34)
        turns `key: false` into `--no-key` only when the parser reading the file has that
        option, and under `vllm serve --config` the file is read by the top-level `vllm`
        parser, which has none of the engine's: `key: false` would be silently dropped and the
        engine would run its default. `no-key: true` becomes `--no-key` under every parser.
        A nested mapping (speculative_config) stays a mapping: the loader turns it into JSON.
        `model:` lets `vllm serve --config FILE` run with no positional model: vLLM 0.34's
        FlexibleArgumentParser._pull_args_from_config (vllm/utils/argparse_utils.py) refuses
        "No model specified!" without either, and a positional model given too wins over it.
        """
        data: dict[str, Any] = {"model": model} if model else {}
        for name, value in self.explicit().items():
            flag = name.replace("_", "-")
            if value is False:
                data[f"no-{flag}"] = True
            else:
                data[flag] = value
        return yaml.safe_dump(data, sort_keys=False)


def check_known_arg(name: str) -> None:
    if name in REMOVED_ARGS:
        raise ConfigError(
            f"engine argument {name!r} no longer exists in vLLM ({REMOVED_ARGS[name]}); remove it"
        )
    if name not in EngineConfig.model_fields:
        known = ", ".join(EngineConfig.model_fields)
        raise ConfigError(f"unknown engine argument {name!r}; known arguments: {known}")

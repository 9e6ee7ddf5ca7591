"""What a deployment's model and GPU require of every config: the values the pins of rules.yaml
whose condition holds on its facts fix, and vLLM's defaults with them (the first baseline, and
the config the rules judge the deployment's parallel layouts on)."""

from __future__ import annotations

from functools import cache
from typing import Any

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.vllm_defaults import vllm_default_values
from autotune.search.spaces.load import load_pins_file
from autotune.search.spaces.rules import Pin, pinned_by


@cache
def _pins() -> tuple[Pin, ...]:
    return load_pins_file()


def pinned_values(dep: DeploymentSpec) -> dict[str, Any]:
    """The engine arguments the deployment's model and GPU require (the pins of rules.yaml
    whose condition holds): every baseline and trial runs with them."""
    return pinned_by(_pins(), dep.rule_context())


def vllm_defaults(dep: DeploymentSpec) -> EngineConfig:
    """What vLLM runs given only the deployment (and what its model requires)."""
    return EngineConfig(**{**vllm_default_values(dep), **pinned_values(dep)})

"""Search spaces as the core uses them: loaded, name-checked, bound to a deployment's hardware
and model, and rules applied to configs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from autotune.baselines import effective_values
from autotune.deployment import RULE_CONTEXT_NAMES, DeploymentSpec
from autotune.engine_config import REMOVED_ARGS, EngineConfig
from autotune.errors import SearchSpaceError
from search_spaces import (
    Param,
    Rule,
    SearchSpace,
    SpaceError,
    builtin_space_path,
    load_space_file,
)


def load_search_space(name_or_path: str) -> SearchSpace:
    """A built-in space by name or a YAML file, checked against vLLM's argument names."""
    try:
        space = load_space_file(builtin_space_path(name_or_path))
        for p in space.params:
            if p.name in REMOVED_ARGS:
                raise SpaceError(f"search space {space.name!r}: parameter {p.name!r} no longer "
                                 f"exists in vLLM ({REMOVED_ARGS[p.name]}); remove it")
        space.check_names(set(EngineConfig.field_names()), RULE_CONTEXT_NAMES)
    except SpaceError as exc:
        raise SearchSpaceError(f"{exc}; fix the space file") from None
    return space


def space_name_for(dep: DeploymentSpec, requested: str | None) -> str:
    """The space a campaign searches: the one asked for, else the built-in space of the
    deployment's traffic profile (`chat` or `batch`)."""
    return requested or dep.traffic_profile


def deployment_space(name_or_path: str, dep: DeploymentSpec) -> SearchSpace:
    """A space bound to one deployment: hardware- and model-derived bounds resolved."""
    space = load_search_space(name_or_path)
    try:
        return space.bind(dep.rule_context())
    except SpaceError as exc:
        raise SearchSpaceError(f"{exc}; fix the space file or the deployment") from None


def space_params(space: SearchSpace, config: EngineConfig, dep: DeploymentSpec) -> dict[str, Any]:
    """The space's parameter values for a config (what to enqueue for a baseline)."""
    values = effective_values(config, dep)
    for p in space.params:
        if isinstance(values.get(p.name), dict):  # a nested config: its choice is JSON text
            values[p.name] = next((c for c in p.choices if _json_equal(c, values[p.name])),
                                  values[p.name])
    try:
        return space.assignment(values)
    except SpaceError as exc:
        raise SearchSpaceError(str(exc)) from None


def _json_equal(choice: Any, value: dict[str, Any]) -> bool:
    if not isinstance(choice, str):
        return False
    try:
        return bool(json.loads(choice) == value)
    except json.JSONDecodeError:
        return False


# Engine arguments the simulator refuses to start with (workers/sim/backend.py): it has no
# model of them, so a space that searches them cannot be searched on it.
SIM_UNMODELLED = ("speculative_config", "pipeline_parallel_size")


def check_searchable(space: SearchSpace, backend: str) -> None:
    """Refuse a space whose parameters the search backend would refuse on every trial."""
    if backend != "sim":
        return
    found = [p.name for p in space.params
             if p.name in SIM_UNMODELLED and _may_be_active(space, p)]
    if found:
        raise SearchSpaceError(
            f"search space {space.name!r} searches {', '.join(found)}, which the simulator "
            "does not model; search it on real engines (--backend vllm), or choose a space "
            "without it")


def _may_be_active(space: SearchSpace, param: Param) -> bool:
    """False only where the deployment's facts alone switch the parameter off."""
    try:
        return space.is_active(param, {})
    except SpaceError:
        return True  # its condition names other parameters: it may be on


@dataclass(frozen=True)
class Violation:
    rule: str
    severity: str
    message: str


def violations(space: SearchSpace, config: EngineConfig, dep: DeploymentSpec) -> list[Violation]:
    """The rules a config breaks, evaluated on the values the engine would really use."""
    values = {**effective_values(config, dep), **dep.rule_context()}
    return [_violation(r) for r in space.rules if not r.holds(values)]


def _violation(rule: Rule) -> Violation:
    return Violation(rule.name, rule.severity, rule.message)

"""Search spaces as the core uses them: loaded, name-checked, bound to a deployment's hardware
and model, and rules applied to configs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.baselines import effective_values
from autotune.deployment import RULE_CONTEXT_NAMES, DeploymentSpec
from autotune.engine_config import REMOVED_ARGS, EngineConfig
from autotune.errors import SearchSpaceError
from search_spaces import Rule, SearchSpace, SpaceError, builtin_space_path, load_space_file


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
    try:
        return space.assignment(effective_values(config, dep))
    except SpaceError as exc:
        raise SearchSpaceError(str(exc)) from None


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

"""Search spaces bound to a deployment: loaded and checked against vLLM's argument names, bound
to the deployment's hardware and model, and a config's values read into a space and back."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from autotune.domain import parallelism
from autotune.domain.deployment import RULE_CONTEXT_NAMES, DeploymentSpec
from autotune.domain.engine_config import REMOVED_ARGS, EngineConfig
from autotune.domain.parallelism import Strategy
from autotune.domain.vllm_defaults import asked_values, effective_values
from autotune.errors import SearchSpaceError, SettingText
from autotune.search.spaces.file_schema import SpaceError
from autotune.search.spaces.load import builtin_space_path, load_space_file
from autotune.search.spaces.rules import pinned_by
from autotune.search.spaces.space import Param, SearchSpace
from autotune.search.spaces.violations import check_deployment, rules_lacking, strategies

# What a space may search: vLLM's engine arguments and the parallel strategy, which stands for
# three of them (autotune/domain/parallelism.py).
SEARCHABLE = {*EngineConfig.field_names(), parallelism.PARAM}


def load_search_space(name_or_path: str) -> SearchSpace:
    """A built-in space by name or a YAML file, checked against vLLM's argument names."""
    try:
        space = load_space_file(builtin_space_path(name_or_path))
        for p in space.params:
            if p.name in REMOVED_ARGS:
                raise SpaceError(f"search space {space.name!r}: parameter {p.name!r} no longer "
                                 f"exists in vLLM ({REMOVED_ARGS[p.name]}); remove it")
        space.check_names(SEARCHABLE, RULE_CONTEXT_NAMES)
        _check_families(space)
    except SpaceError as exc:
        raise SearchSpaceError(f"{exc}; fix the space file") from None
    return space


def space_name_for(dep: DeploymentSpec, requested: str | None) -> str:
    """The space a campaign searches: the one asked for, else the built-in space of the
    deployment's traffic profile (`chat` or `batch`)."""
    return requested or dep.traffic_profile


def _check_families(space: SearchSpace) -> None:
    if parallelism.PARAM not in space.param_names:
        return
    p = space.param(parallelism.PARAM)
    bad = [c for c in p.choices if c not in parallelism.FAMILIES]
    if p.type != "categorical" or bad:
        raise SpaceError(f"search space {space.name!r}: parameter {parallelism.PARAM!r} must be "
                         f"a categorical of strategy families ({', '.join(parallelism.FAMILIES)})"
                         + (f"; unknown: {', '.join(map(str, bad))}" if bad else ""))


def deployment_space(name_or_path: str, dep: DeploymentSpec) -> SearchSpace:
    """A space bound to one deployment: hardware- and model-derived bounds resolved, the
    values the model requires pinned, the values that change the model's numerics taken out
    where the deployment forbids them, and the parallel families turned into the layouts the
    deployment's GPUs and the model's shards allow."""
    space = load_search_space(name_or_path)
    try:
        bound = space.bind(dep.rule_context())
        if not dep.allow_accuracy_affecting:  # after bind: pinned values stay, the model's own
            bound = bound.keeping_numerics()
    except SpaceError as exc:
        raise SearchSpaceError(f"{exc}; fix the space file or the deployment") from None
    check_deployment(bound, dep)
    if parallelism.PARAM not in bound.param_names:
        return bound
    p = bound.param(parallelism.PARAM)
    allowed = [s.name for s in strategies(bound, dep, tuple(p.choices)).allowed]
    if len(allowed) <= 1 or not bound.is_active(p, {}):
        # One layout or none: nothing to search (the deployment's own is checked elsewhere).
        return replace(bound, params=tuple(q for q in bound.params if q is not p))
    return replace(bound, params=tuple(replace(q, choices=tuple(allowed)) if q is p else q
                                       for q in bound.params))


def space_summary(space: SearchSpace, dep: DeploymentSpec) -> list[str]:
    """What the deployment's model fixes and which layouts are searched, for people: the pins
    with their rule, the parallel layouts, and the model facts no rule knows."""
    lines = []
    if space.pinned:
        names = ", ".join(p.name for p in space.pins if pinned_by((p,), space.context))
        values = ", ".join(f"{k}={v}" for k, v in space.pinned.items())
        lines.append(f"Pinned for {dep.model_info.name} on {dep.gpu_info.name}: {values} "
                     f"(required by the model's kernels: {names}; not searched)")
    changing = {name: found for name, found in
                {**space.numerics_changing(), **space.left_out}.items()
                if name not in space.param_names or _may_be_active(space, space.param(name))}
    if changing:
        values = ", ".join(f"{name}={'/'.join(map(str, found))}"
                           for name, found in changing.items())
        lines.append(f"Accuracy-affecting values left out (the deployment forbids them): {values}"
                     if space.left_out else
                     f"Accuracy-affecting values searched (they change the model's numerics; "
                     f"--forbid-accuracy-affecting leaves them out): {values}")
    if parallelism.PARAM in space.param_names:
        lines.append("Parallel layouts searched: "
                     + ", ".join(space.param(parallelism.PARAM).choices))
    lines += [f"warning: {gap}" for gap in rules_lacking(space, dep)]
    return lines


def engine_args(params: dict[str, Any]) -> dict[str, Any]:
    """A space's parameter values as engine arguments (a strategy as its three arguments)."""
    out = dict(params)
    name = out.pop(parallelism.PARAM, None)
    if name is not None:
        out.update(Strategy.parse(str(name)).engine_args())
    return out


def config_for(space: SearchSpace, base: EngineConfig, params: dict[str, Any]) -> EngineConfig:
    """The config a trial runs: its base (a baseline's, or the deployment's arguments), the
    values the deployment's pins fix, and the sampled parameters."""
    return base.merged(**space.pinned, **engine_args(params))


def space_params(space: SearchSpace, config: EngineConfig, dep: DeploymentSpec) -> dict[str, Any]:
    """The space's parameter values for a config (what to enqueue for a baseline)."""
    values = _space_values(config, dep)
    for p in space.params:
        if isinstance(values.get(p.name), dict):  # a nested config: its choice is JSON text
            values[p.name] = next((c for c in p.choices if _json_equal(c, values[p.name])),
                                  values[p.name])
    try:
        return space.assignment(values)
    except SpaceError as exc:
        raise SearchSpaceError(str(exc)) from None


def hold_config(space: SearchSpace, config: EngineConfig, dep: DeploymentSpec) -> SearchSpace:
    """The space widened to hold a config's effective values (autotune.campaign.per_path starts a path's
    search from the whole trace's winner, found in another space)."""
    try:
        return space.holding(_space_values(config, dep))
    except SpaceError as exc:
        raise SearchSpaceError(str(exc)) from None


def _space_values(config: EngineConfig, dep: DeploymentSpec) -> dict[str, Any]:
    """A config's effective engine arguments, with the parallel layout they make; the block
    size and KV cache dtype as asked, which the trial sets (vLLM raises a hybrid model's block
    size past any a space offers, and reads "auto" as a checkpoint's FP8 KV cache)."""
    values = effective_values(config, dep)
    asked = asked_values(config, dep)
    values["block_size"], values["kv_cache_dtype"] = asked["block_size"], asked["kv_cache_dtype"]
    values[parallelism.PARAM] = Strategy.of(values).name
    return values


def _json_equal(choice: Any, value: dict[str, Any]) -> bool:
    if not isinstance(choice, str):
        return False
    try:
        return bool(json.loads(choice) == value)
    except json.JSONDecodeError:
        return False


# Engine arguments the simulator refuses to start with (autotune/workers/sim/shape.py): it has no
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
            SettingText("search space {space!r} searches {found}, which the simulator does not "
                        "model; search it on real engines ({backend} vllm), or choose a space "
                        "without it", space=space.name, found=", ".join(found)))


def _may_be_active(space: SearchSpace, param: Param) -> bool:
    """False only where the deployment's facts alone switch the parameter off."""
    try:
        return space.is_active(param, {})
    except SpaceError:
        return True  # its condition names other parameters: it may be on

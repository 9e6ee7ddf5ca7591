"""The rules applied: a config's broken rules (with the vLLM source of each) on the values the
engine really uses, the deployment's parallel layouts split into allowed and refused, and the
deployments no config can serve."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from autotune.domain import parallelism
from autotune.domain.deployment import RULE_CONTEXT_NAMES, DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.parallelism import Strategy
from autotune.domain.vllm_defaults import deployment_args, effective_values
from autotune.errors import ConfigError, SettingError
from autotune.search.spaces.load import load_rules_file
from autotune.search.spaces.pinned import vllm_defaults
from autotune.search.spaces.rules import Rule
from autotune.search.spaces.space import SearchSpace


@dataclass(frozen=True)
class Violation:
    rule: str
    severity: str
    message: str
    source: str = ""  # the vLLM file and function (or recipe) the rule encodes
    names: frozenset[str] = frozenset()  # the arguments and facts the rule reads


def violations(space: SearchSpace, config: EngineConfig, dep: DeploymentSpec) -> list[Violation]:
    """The rules a config breaks, evaluated on the values the engine would really use."""
    return _broken(space.rules, config, dep)


def _broken(rules: tuple[Rule, ...], config: EngineConfig, dep: DeploymentSpec) -> list[Violation]:
    # The deployment's facts, then the engine's values (its own max_model_len over the
    # deployment's, where a hand-written config sets another).
    values = {**dep.rule_context(), **effective_values(config, dep)}
    return [_violation(r, values) for r in rules if not r.holds(values)]


@cache
def _common_rules() -> tuple[Rule, ...]:
    return load_rules_file()


def common_rule_violations(config: EngineConfig, dep: DeploymentSpec) -> list[Violation]:
    """The rules of rules.yaml a config breaks, whatever space it came from."""
    return _broken(_common_rules(), config, dep)


def engine_refusals(config: EngineConfig, dep: DeploymentSpec) -> list[Violation]:
    """The common rules of severity error a config breaks: what vLLM itself refuses (or
    fails to start with) for this model and GPU."""
    return [v for v in common_rule_violations(config, dep) if v.severity == "error"]


def _violation(rule: Rule, values: dict[str, Any]) -> Violation:
    """A broken rule; its message's {name} fields filled with the config's and the
    deployment's values."""
    try:
        message = rule.message.format_map(values)
    except (KeyError, ValueError, IndexError):
        message = rule.message
    return Violation(rule.name, rule.severity, message, rule.source, frozenset(rule.names))


@dataclass(frozen=True)
class StrategyCheck:
    allowed: list[Strategy]
    refused: dict[str, list[Violation]]  # strategy name -> the rules it breaks


def strategies(space: SearchSpace, dep: DeploymentSpec,
               families: tuple[str, ...] = parallelism.FAMILIES) -> StrategyCheck:
    """The layouts of the deployment's GPUs, split into those its rules allow and those they
    refuse (with the rules on parallelism each breaks). Judged on vLLM's defaults with the
    deployment's pins: the parallelism rules name no other tuned argument."""
    allowed: list[Strategy] = []
    refused: dict[str, list[Violation]] = {}
    base = vllm_defaults(dep)
    for s in parallelism.candidates(dep.gpu_count, dep.model_info.num_experts > 0, families):
        broken = [v for v in violations(space, base.merged(**s.engine_args()), dep)
                  if v.severity == "error" and v.names & set(parallelism.ENGINE_ARGS)]
        if broken:
            refused[s.name] = broken
        else:
            allowed.append(s)
    return StrategyCheck(allowed, refused)


def _why(broken: list[Violation]) -> str:
    return "; ".join(f"{v.rule}: {v.message} ({v.source})" for v in broken)


def check_deployment(space: SearchSpace, dep: DeploymentSpec) -> None:
    """Refuse a deployment no config can serve: a rule on its facts alone (a model on a GPU
    generation without its kernels) or its own parallel layout (its baselines') refused,
    naming the layouts of its GPUs that the rules allow and how to choose one."""
    where = f"{dep.model_info.name} on {dep.gpu_count} x {dep.gpu_info.name}"
    facts_only = [v for v in violations(space, vllm_defaults(dep), dep)
                  if v.severity == "error" and v.names <= RULE_CONTEXT_NAMES]
    if facts_only:
        raise ConfigError(f"{where} cannot be served: {_why(facts_only)}")
    check = strategies(space, dep)
    own = Strategy.of(deployment_args(dep))
    if own.name not in check.refused:
        return
    if not check.allowed:
        raise ConfigError(
            f"no parallel layout of {dep.gpu_count} GPUs can serve {where}: "
            + " | ".join(f"{name}: {_why(v)}" for name, v in check.refused.items())
            + "; choose another GPU count")
    # Layout names and sizes are autotune's own (TP, TEP, DEP; integers): no braces in them.
    options = ", ".join(f"{s.name} ({{tensor_parallel_size}} {s.tensor_parallel_size})"
                        for s in check.allowed)
    raise SettingError("{where}: the layout {own} is refused ({why}); the rules allow " + options,
                       where=where, own=own.name, why=_why(check.refused[own.name]))


# Fact values that need no rule of their own (plain bf16 weights run everywhere).
_NEEDS_NO_RULE = {"bf16"}


def rules_lacking(space: SearchSpace, dep: DeploymentSpec) -> list[str]:
    """The model facts no rule names: its attention kind or weight formats whose kernels'
    limits (block sizes, KV dtypes, compute capability) are then unchecked."""
    text = " ".join(f"{r.require} {r.when or ''}" for r in space.rules)
    facts = dep.rule_context()
    return [f"no rule knows {name} {facts[name]!r} of {dep.model_info.name}: its kernels' "
            "limits are unchecked; a config vLLM refuses may be tried (and fail) on real engines"
            for name in ("attention_kind", "dense_quant", "expert_quant")
            if facts[name] not in _NEEDS_NO_RULE and f'"{facts[name]}"' not in text]

"""The check a user runs on a hand-written config, and the gate every published config passes:
the rules of rules.yaml (with vLLM's source of each) against the model and GPU, and the
values vLLM will use instead of what was asked or left unset."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune.domain import catalogue
from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import REMOVED_ARGS, EngineConfig, check_known_arg
from autotune.domain.vllm_defaults import resolved
from autotune.errors import ConfigError, EngineStartError, SettingError
from autotune.measure.backends import load_backend
from autotune.search.spaces import accuracy
from autotune.search.spaces.pinned import pinned_values
from autotune.search.spaces.violations import Violation, common_rule_violations
from autotune.vocabulary import FailureClass

# Keys of a `vllm serve --config` file that are not engine arguments the rules look at.
_NOT_ENGINE_ARGS = {"model"}



@dataclass(frozen=True)
class ConfigCheck:
    deployment: DeploymentSpec
    config: EngineConfig
    violations: list[Violation]
    effective: dict[str, Any]  # what vLLM runs for the arguments above
    overridden: dict[str, Any]  # asked -> what vLLM uses instead, where they differ
    unchecked: list[str]  # arguments the rules do not know (passed to vLLM as they are)
    # Asked values that change the model's numerics (autotune.search.spaces.accuracy): flagged, not refused.
    accuracy_affecting: list[accuracy.NumericsChange]

    @property
    def refused(self) -> list[Violation]:
        return [v for v in self.violations if v.severity == "error"]

    def to_json(self) -> dict[str, Any]:
        return {"model": self.deployment.model, "gpu": self.deployment.gpu,
                "gpus": self.deployment.gpu_count, "passes": not self.refused,
                "violations": [{"rule": v.rule, "severity": v.severity, "message": v.message,
                                "source": v.source} for v in self.violations],
                "effective": self.effective, "overridden": self.overridden,
                "unchecked": self.unchecked, "config": self.config.explicit(),
                "accuracy_affecting": [c.as_json() for c in self.accuracy_affecting]}


def _is_bool(name: str) -> bool:
    fields = EngineConfig.model_fields
    return name in fields and "bool" in str(fields[name].annotation)


def parse_cli_args(args: list[str]) -> tuple[dict[str, Any], list[str]]:
    """`--flag value`, `--flag=value`, `--flag` / `--no-flag` (booleans) as engine arguments;
    flags autotune does not model are returned apart, unchecked."""
    values: dict[str, Any] = {}
    unknown: list[str] = []
    fields = EngineConfig.model_fields

    i = 0
    while i < len(args):
        token = args[i]
        if not token.startswith("--"):
            raise ConfigError(f"engine arguments: expected a --flag, got {token!r}")
        flag, eq, inline = token[2:].partition("=")
        name = flag.replace("-", "_")
        if name in REMOVED_ARGS:
            check_known_arg(name)  # raises with the reason
        if name.startswith("no_") and _is_bool(name[3:]) and not eq:
            values[name[3:]] = False
            i += 1
            continue
        if _is_bool(name) and not eq:
            values[name] = True
            i += 1
            continue
        if eq:
            value = inline
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            value, i = args[i + 1], i + 1
        else:
            value = None
        i += 1
        if name not in fields:
            unknown.append(f"--{flag}")
            continue
        values[name] = yaml.safe_load(value) if value is not None else True
    return values, unknown


def read_config_file(path: Path) -> tuple[dict[str, Any], list[str]]:
    """A `vllm serve --config` YAML file (kebab- or snake-case keys)."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SettingError("{config_file} {path}: no such file", path=path) from None
    except yaml.YAMLError as exc:
        raise SettingError("{config_file} {path}: not valid YAML ({why})", path=path,
                           why=str(exc).splitlines()[0]) from None
    if not isinstance(data, dict):
        raise SettingError("{config_file} {path}: expected a mapping of engine arguments",
                           path=path)
    values: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name in _NOT_ENGINE_ARGS:
            continue
        if name in REMOVED_ARGS:
            check_known_arg(name)
        if name.startswith("no_") and _is_bool(name[3:]) and value is True:
            values[name[3:]] = False  # `no-key: true`, as to_yaml writes a false boolean
            continue
        if name not in EngineConfig.model_fields:
            unknown.append(str(key))
            continue
        values[name] = json.dumps(value) if isinstance(value, dict) else value
    return values, unknown


def check_config(values: dict[str, Any], *, model: str, gpu: str, gpus: int,
                 unchecked: list[str] | None = None) -> ConfigCheck:
    """The rules a config breaks on `gpus` x `gpu` serving `model`. The context length is the
    config's (vLLM's default: the model's own limit), the layout its TP x DP."""
    m = catalogue.model(model)
    # vLLM's own defaults for what the config leaves unset (one GPU, no EP), not a deployment's.
    layout = {"tensor_parallel_size": 1, "data_parallel_size": 1, "enable_expert_parallel": False,
              "max_model_len": m.max_context}
    config = EngineConfig.from_mapping({**layout, **values})
    dep = DeploymentSpec.build(name="check", model=m.name, gpu=gpu, gpu_count=gpus,
                               tensor_parallel_size=gpus, max_model_len=config.max_model_len)
    shown, overridden = resolved(config, dep)
    broken = common_rule_violations(config, dep)
    if not any(v.severity == "error" for v in broken):
        broken += _memory_violations(config, dep)
    # No space here: the built-in judgement; a value the model requires is not a change.
    numerics = accuracy.changes(config.explicit(), None, pinned_values(dep))
    return ConfigCheck(dep, config, broken, shown, overridden, unchecked or [], numerics)


def _memory_violations(config: EngineConfig, dep: DeploymentSpec) -> list[Violation]:
    """vLLM's start-up memory checks (weights, activations and graphs within
    gpu_memory_utilization; a KV cache that holds one max_model_len request), estimated with
    the simulator's memory model: a start that model says runs out of memory."""
    backend = load_backend("sim")
    try:
        backend.start(config, dep, label="check")
    except EngineStartError as exc:
        if exc.failure_class != FailureClass.OOM:
            return []  # the simulator's own limits (a feature it does not model) say nothing
        return [Violation("memory_holds_one_request", "error", str(exc).removeprefix(
            "simulated engine failed to start: ") + " (estimated by the simulator's memory model)",
            "vllm/v1/core/kv_cache_planning.py::check_enough_kv_cache_memory",
            frozenset({"gpu_memory_utilization", "max_model_len"}))]
    finally:
        backend.stop()
    return []


def render(check: ConfigCheck) -> list[str]:
    """The check as lines for a person."""
    d = check.deployment
    head = f"{d.model} on {d.gpu_count} x {d.gpu}: "
    lines = [head + ("passes every rule" if not check.violations else
                     f"{len(check.refused)} rule(s) vLLM would refuse, "
                     f"{len(check.violations) - len(check.refused)} known to be slow")]
    for v in check.violations:
        lines.append(f"  {'REFUSED' if v.severity == 'error' else 'slow'}  {v.rule}: {v.message}")
        lines.append(f"      source: {v.source}")
    for name, value in check.overridden.items():
        lines.append(f"  vLLM uses {name}={value} (asked {check.config.explicit()[name]})")
    lines.append("  vLLM runs: " + " ".join(f"{k}={v}" for k, v in check.effective.items()))
    if check.accuracy_affecting:
        lines.append("  changes numerics: " + "; ".join(c.text() for c in check.accuracy_affecting))
    if check.unchecked:
        lines.append("  not checked (no rule knows them): " + " ".join(map(shlex.quote,
                                                                          check.unchecked)))
    return lines

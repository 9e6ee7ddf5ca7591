"""The YAML schema of a search space and its translation into Optuna distributions.

A space file:

    name: default
    description: ...
    parameters:
      max_num_seqs: {type: int, low: 8, high: 1024, log: true}
      block_size: {type: categorical, choices: [16, 32, 64]}
      enable_prefix_caching: {type: bool}
      gpu_memory_utilization: {type: float, low: 0.8, high: 0.96, step: 0.01}
    rules:            # optional, added to the common rules in rules.yaml
      - {name: ..., require: "...", message: "...", severity: error|slow}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from search_spaces._rules import Rule, RuleError

SPACES_DIR = Path(__file__).parent / "spaces"
RULES_FILE = SPACES_DIR / "rules.yaml"
_TYPES = ("int", "float", "categorical", "bool")


class SpaceError(ValueError):
    """A malformed search-space or rules file."""


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()

    def distribution(self) -> BaseDistribution:
        if self.type == "int":
            return IntDistribution(int(self.low), int(self.high), log=self.log,  # type: ignore[arg-type]
                                   step=int(self.step or 1))
        if self.type == "float":
            return FloatDistribution(float(self.low), float(self.high),  # type: ignore[arg-type]
                                     log=self.log, step=self.step)
        if self.type == "bool":
            return CategoricalDistribution((True, False))
        return CategoricalDistribution(self.choices)

    def grid(self) -> tuple[Any, ...]:
        """The finite set of values a grid search visits (ints and floats: their steps)."""
        if self.type == "bool":
            return (True, False)
        if self.type == "categorical":
            return self.choices
        step = self.step or 1
        count = round((float(self.high) - float(self.low)) / step) + 1  # type: ignore[arg-type]
        values = [float(self.low) + i * step for i in range(count)]  # type: ignore[arg-type]
        return tuple(int(v) if self.type == "int" else round(v, 6) for v in values)


@dataclass(frozen=True)
class SearchSpace:
    name: str
    description: str
    params: tuple[Param, ...]
    rules: tuple[Rule, ...]

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def distributions(self) -> dict[str, BaseDistribution]:
        return {p.name: p.distribution() for p in self.params}

    def check_names(self, known_params: set[str], context_names: set[str]) -> None:
        """Refuse a parameter vLLM does not have, or a rule naming an unknown value."""
        for p in self.params:
            if p.name not in known_params:
                raise SpaceError(
                    f"search space {self.name!r}: unknown parameter {p.name!r}; known parameters: "
                    f"{', '.join(sorted(known_params))}"
                )
        for rule in self.rules:
            try:
                rule.check_names(known_params | context_names)
            except RuleError as exc:
                raise SpaceError(f"search space {self.name!r}: {exc}") from None


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SpaceError(f"search space file {path} does not exist; give a path or a built-in "
                         f"name ({', '.join(builtin_names())})") from None
    except yaml.YAMLError as exc:
        raise SpaceError(f"{path} is not valid YAML: {exc}".replace("\n", " ")) from None


def _parse_param(path: Path, name: str, spec: Any) -> Param:
    where = f"{path}: parameter {name!r}"
    if not isinstance(spec, dict) or spec.get("type") not in _TYPES:
        raise SpaceError(f"{where}: needs 'type' set to one of {', '.join(_TYPES)}")
    kind = spec["type"]
    extra = set(spec) - {"type", "low", "high", "step", "log", "choices"}
    if extra:
        raise SpaceError(f"{where}: unknown key(s) {', '.join(sorted(extra))}")
    if kind in ("int", "float"):
        if "low" not in spec or "high" not in spec or spec["low"] > spec["high"]:
            raise SpaceError(f"{where}: needs numeric 'low' <= 'high'")
        if spec.get("log") and spec.get("step") is not None:
            raise SpaceError(f"{where}: 'log' and 'step' cannot be combined (Optuna refuses it)")
        return Param(name, kind, spec["low"], spec["high"], spec.get("step"), bool(spec.get("log")))
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise SpaceError(f"{where}: needs a non-empty 'choices' list")
        return Param(name, kind, choices=tuple(choices))
    return Param(name, kind)


def _parse_rules(path: Path, items: Any) -> tuple[Rule, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise SpaceError(f"{path}: 'rules' must be a list")
    rules = []
    for item in items:
        if not isinstance(item, dict) or not {"name", "require", "message"} <= set(item):
            raise SpaceError(f"{path}: every rule needs 'name', 'require' and 'message'")
        try:
            rules.append(Rule(item["name"], str(item["require"]), item["message"],
                              item.get("severity", "error")))
        except RuleError as exc:
            raise SpaceError(f"{path}: {exc}") from None
    return tuple(rules)


def load_rules_file(path: Path = RULES_FILE) -> tuple[Rule, ...]:
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise SpaceError(f"{path}: expected a mapping with a 'rules' list")
    return _parse_rules(path, data.get("rules"))


def load_space_file(path: Path, common_rules: tuple[Rule, ...] | None = None) -> SearchSpace:
    """Read a space file; its rules are added to the common rules (rules.yaml by default)."""
    data = _read_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("parameters"), dict):
        raise SpaceError(f"{path}: expected a mapping with a 'parameters' mapping")
    extra = set(data) - {"name", "description", "parameters", "rules"}
    if extra:
        raise SpaceError(f"{path}: unknown key(s) {', '.join(sorted(extra))}")
    params = tuple(_parse_param(path, n, s) for n, s in data["parameters"].items())
    if common_rules is None:
        common_rules = load_rules_file()
    rules = common_rules + _parse_rules(path, data.get("rules"))
    return SearchSpace(str(data.get("name", path.stem)), str(data.get("description", "")),
                       params, rules)


def builtin_names() -> list[str]:
    return sorted(p.stem for p in SPACES_DIR.glob("*.yaml") if p.stem != "rules")


def builtin_space_path(name_or_path: str) -> Path:
    """A built-in space by name ("default"), or a path to a YAML file."""
    candidate = SPACES_DIR / f"{name_or_path}.yaml"
    if name_or_path in builtin_names():
        return candidate
    return Path(name_or_path)

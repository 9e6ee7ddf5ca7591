"""Reading space files and rules.yaml: a built-in space by name or a file (with the space it
extends), validated by file_schema.py and turned into the `Param`s, `Rule`s and `Pin`s the search
uses, their expressions parsed on the way."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from autotune.search.spaces.expressions import Expr, RuleError
from autotune.search.spaces.file_schema import (
    ParamSpec,
    PinSpec,
    RulesFile,
    RuleSpec,
    SpaceError,
    SpaceFile,
    validated,
)
from autotune.search.spaces.rules import Pin, Rule
from autotune.search.spaces.space import Param, SearchSpace

# The built-in spaces (their file names are their names) and the common rules and pins.
BUILTIN_DIR = Path(__file__).parent / "builtin"
RULES_FILE = BUILTIN_DIR / "rules.yaml"


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SpaceError(f"search space file {path} does not exist; give a path or a built-in "
                         f"name ({', '.join(builtin_names())})") from None
    except yaml.YAMLError as exc:
        raise SpaceError(f"{path} is not valid YAML: {exc}".replace("\n", " ")) from None


def _expr(path: Path, what: str, source: str | None) -> Expr | None:
    try:
        return None if source is None else Expr(source, what)
    except RuleError as exc:
        raise SpaceError(f"{path}: {exc}") from None


def _param(path: Path, name: str, spec: ParamSpec) -> Param:
    """A validated parameter as the search uses it, its expressions parsed."""
    where = f"parameter {name!r}"
    param = Param(name, spec.type, when=_expr(path, f"{where} when", spec.when),
                  min_expr=_expr(path, f"{where} min", spec.min),
                  max_expr=_expr(path, f"{where} max", spec.max))
    # Only the keys of its type: a range's choices or a categorical's bounds are ignored.
    if spec.type in ("int", "float"):
        param = replace(param, low=spec.low, high=spec.high, step=spec.step, log=spec.log)
    elif spec.type == "categorical":
        param = replace(param, choices=tuple(spec.choices or ()))
    marking = spec.affects_accuracy
    if marking is None:
        return param
    if marking is True:  # every value but null or false
        return replace(param, affects_accuracy=tuple(
            v for v in spec.values() if v is not None and v is not False))
    return replace(param, affects_accuracy=tuple(marking or ()))


def _rules(path: Path, specs: list[RuleSpec] | None) -> tuple[Rule, ...]:
    try:
        return tuple(Rule(r.name, r.require, r.message, r.severity, r.when, r.source or "",
                          str(path)) for r in specs or ())
    except RuleError as exc:
        raise SpaceError(f"{path}: {exc}") from None


def _pins(path: Path, specs: list[PinSpec] | None) -> tuple[Pin, ...]:
    try:
        return tuple(Pin(p.name, p.when, dict(p.set), p.message, p.source or "", str(path))
                     for p in specs or ())
    except RuleError as exc:
        raise SpaceError(f"{path}: {exc}") from None


def load_rules_file(path: Path = RULES_FILE) -> tuple[Rule, ...]:
    return _load_rules_and_pins(path)[0]


def load_pins_file(path: Path = RULES_FILE) -> tuple[Pin, ...]:
    return _load_rules_and_pins(path)[1]


def _load_rules_and_pins(path: Path) -> tuple[tuple[Rule, ...], tuple[Pin, ...]]:
    data = validated(RulesFile, _read_yaml(path), path)
    return _rules(path, data.rules), _pins(path, data.pins)


def load_space_file(path: Path, common_rules: tuple[Rule, ...] | None = None,
                    _extending: frozenset[Path] = frozenset()) -> SearchSpace:
    """Read a space file; its rules are added to the common rules (rules.yaml by default),
    after those of the space it extends, if any."""
    data = validated(SpaceFile, _read_yaml(path), path)
    own = {n: _param(path, n, s) for n, s in data.parameters.items()}
    if common_rules is None:
        common_rules = load_rules_file()
    pins = load_pins_file()
    if data.extends is None:
        params, rules = tuple(own.values()), common_rules
    else:
        base = _load_base(path, data.extends, common_rules, _extending)
        params = tuple(own.pop(p.name, p) for p in base.params) + tuple(own.values())
        rules = base.rules
    rules = rules + _rules(path, data.rules)
    return SearchSpace(path.stem if data.name is None else data.name, data.description or "",
                       params, rules, data.profile, pins=pins)


def _load_base(path: Path, name: str, common_rules: tuple[Rule, ...],
               extending: frozenset[Path]) -> SearchSpace:
    """The space `path` extends: a built-in name, else a file relative to `path`."""
    base = BUILTIN_DIR / f"{name}.yaml" if name in builtin_names() else path.parent / name
    chain = extending | {path.resolve()}
    if base.resolve() in chain:
        raise SpaceError(f"{path}: 'extends: {name}' leads back to itself")
    if not base.is_file():
        raise SpaceError(f"{path}: 'extends: {name}' is neither a built-in space "
                         f"({', '.join(builtin_names())}) nor a file next to it")
    return load_space_file(base, common_rules, chain)


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml") if p.stem != "rules")


def builtin_space_path(name_or_path: str) -> Path:
    """A built-in space by name ("default"), or a path to a YAML file."""
    candidate = BUILTIN_DIR / f"{name_or_path}.yaml"
    if name_or_path in builtin_names():
        return candidate
    return Path(name_or_path)

"""Search spaces as the search uses them (`Param`, `SearchSpace`: Optuna distributions, grids,
conditions, bounds bound to a deployment), read from YAML files (load.py) that file_schema.py
validates.

A space file:

    name: chat
    description: ...
    profile: chat     # optional: the deployment traffic profile this space is the default for
    parameters:
      max_num_seqs: {type: categorical, choices: [32, 64, 128, 256], max: "max_model_len // 8"}
      block_size: {type: categorical, choices: [16, 32, 64]}
      enable_chunked_prefill: {type: bool}
      long_prefill_token_threshold:
        {type: categorical, choices: [0, 512, 2048], when: enable_chunked_prefill}
      gpu_memory_utilization: {type: float, low: 0.8, high: 0.96, step: 0.01}
    rules:            # optional, added to the common rules in rules.yaml
      - {name: ..., require: "...", message: "...", severity: error|slow}
    extends: chat     # optional: a built-in space or a file (relative to this one) whose
                      # parameters and rules come first; a parameter named again replaces its
                      # base's definition in place. The profile is not inherited.

A parameter may say which of its values change the model's numerics (`affects_accuracy`: a
list of them, `true` for every value but null / false, `false` for none); where it says
nothing, the built-in judgement of numerics.py applies (fp8 KV caches, speculative decoding).
A deployment may forbid those values (`SearchSpace.keeping_numerics`).

- `when` (an expression over earlier parameters and deployment facts): the parameter exists
  only when it holds; otherwise it is never suggested and the engine uses its default. Optuna
  handles the changing set of parameters define-by-run (`SearchSpace.suggest`).
- `min` / `max` (expressions over deployment facts such as `gpu_memory_gib`, `gpu_count`,
  `max_model_len`): bounds derived from the hardware and the model, resolved by
  `SearchSpace.bind(context)` before a study starts. They clamp `low`/`high` of numbers and
  filter the `choices` of categoricals.
Expressions use the rule grammar (expressions.py), never `eval`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from autotune.search.spaces.expressions import Expr, RuleError
from autotune.search.spaces.file_schema import SpaceError
from autotune.search.spaces.numerics import builtin_changes, decoded, same_value
from autotune.search.spaces.roles import ROLES, ParamRole
from autotune.search.spaces.rules import Pin, Rule, pinned_by

MAX_PLAIN_INT_GRID = 64  # an int range without step or log wider than this has no sensible grid


class Suggester(Protocol):
    """What `SearchSpace.suggest` needs of an Optuna trial (optuna.trial.Trial has it)."""

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1,
                    log: bool = False) -> int: ...

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float: ...

    def suggest_categorical(self, name: str, choices: Any) -> Any: ...


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()
    when: Expr | None = None
    min_expr: Expr | None = None
    max_expr: Expr | None = None
    # The values that change the model's numerics, as the space marks them; None: unmarked
    # (the built-in judgement applies).
    affects_accuracy: tuple[Any, ...] | None = None

    @property
    def role(self) -> ParamRole | None:
        """What the parameter is to the samplers (roles.py): the engine argument's, by name."""
        return ROLES.get(self.name)

    def changes_numerics(self, value: Any) -> bool:
        """Whether this value changes the model's numerics: the space's marking, else the
        built-in judgement for the engine argument."""
        if self.affects_accuracy is None:
            return builtin_changes(self.name, decoded(value))
        return any(same_value(marked, value) for marked in self.affects_accuracy)

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

    def contains(self, value: Any) -> bool:
        if self.type in ("bool", "categorical"):
            return value in (self.grid() if self.type == "bool" else self.choices)
        return float(self.low) <= value <= float(self.high)  # type: ignore[arg-type]

    def suggest(self, trial: Suggester) -> Any:
        if self.type == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high),  # type: ignore[arg-type]
                                     step=int(self.step or 1), log=self.log)
        if self.type == "float":
            return trial.suggest_float(self.name, float(self.low), float(self.high),  # type: ignore[arg-type]
                                       step=self.step, log=self.log)
        if self.type == "bool":
            return trial.suggest_categorical(self.name, (True, False))
        return trial.suggest_categorical(self.name, self.choices)

    def grid(self) -> tuple[Any, ...]:
        """The finite set of values a grid search visits: categoricals their choices, numbers
        their steps; a log-scaled int without a step the powers of two in range (and both
        ends)."""
        if self.type == "bool":
            return (True, False)
        if self.type == "categorical":
            return self.choices
        low, high = float(self.low), float(self.high)  # type: ignore[arg-type]
        if self.type == "int" and self.step is None and self.log:
            powers = {2**k for k in range(64) if low <= 2**k <= high}
            return tuple(sorted(powers | {int(low), int(high)}))
        if self.step is None and (self.type == "float" or high - low + 1 > MAX_PLAIN_INT_GRID):
            raise SpaceError(f"parameter {self.name!r} has no grid: give it a 'step' (or, for "
                             "an int, 'log: true')")
        step = self.step or 1
        count = round((high - low) / step) + 1
        values = [low + i * step for i in range(count)]
        return tuple(int(v) if self.type == "int" else round(v, 6) for v in values)

    def bind(self, context: Mapping[str, Any]) -> Param:
        """This parameter with its `min`/`max` resolved against deployment facts."""
        if self.min_expr is None and self.max_expr is None:
            return self
        lo = self.min_expr.value(context) if self.min_expr else None
        hi = self.max_expr.value(context) if self.max_expr else None
        where = f"parameter {self.name!r} (min {lo}, max {hi} for this deployment)"
        if self.type == "categorical":
            kept = tuple(c for c in self.choices
                         if (lo is None or c >= lo) and (hi is None or c <= hi))
            if not kept:
                raise SpaceError(f"{where}: none of the choices {list(self.choices)} is left")
            return replace(self, choices=kept, min_expr=None, max_expr=None)
        low = self.low if lo is None else max(float(self.low), lo)  # type: ignore[arg-type]
        high = self.high if hi is None else min(float(self.high), hi)  # type: ignore[arg-type]
        if low > high:  # type: ignore[operator]
            raise SpaceError(f"{where}: the range {self.low}..{self.high} leaves nothing")
        if self.type == "int":
            low, high = int(low), int(high)  # type: ignore[arg-type]
        return replace(self, low=low, high=high, min_expr=None, max_expr=None)


@dataclass(frozen=True)
class SearchSpace:
    name: str
    description: str
    params: tuple[Param, ...]
    rules: tuple[Rule, ...]
    profile: str | None = None
    # Deployment facts the space was bound to (conditions may name them); empty until bind().
    context: Mapping[str, Any] = field(default_factory=dict, compare=False)
    pins: tuple[Pin, ...] = ()
    # Values the deployment's pins fix (their parameters are no longer searched); set by bind().
    pinned: Mapping[str, Any] = field(default_factory=dict, compare=False)
    # Values taken out because they change the model's numerics; set by keeping_numerics().
    left_out: Mapping[str, tuple[Any, ...]] = field(default_factory=dict, compare=False)

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise SpaceError(f"search space {self.name!r} has no parameter {name!r}")

    def with_role(self, role: ParamRole) -> Param | None:
        """The parameter with this role, None where the space has none."""
        return next((p for p in self.params if p.role is role), None)

    def distributions(self) -> dict[str, BaseDistribution]:
        """Every parameter's distribution, conditional ones included."""
        return {p.name: p.distribution() for p in self.params}

    def bind(self, context: Mapping[str, Any]) -> SearchSpace:
        """The space for one deployment: hardware-derived bounds resolved, facts kept for the
        parameters' conditions, and the parameters its pins fix taken out."""
        try:
            pinned = pinned_by(self.pins, context)
            params = tuple(p.bind(context) for p in self.params if p.name not in pinned)
        except RuleError as exc:
            raise SpaceError(f"search space {self.name!r}: {exc}") from None
        except SpaceError as exc:
            raise SpaceError(f"search space {self.name!r}: {exc}") from None
        return replace(self, params=params, context=dict(context), pinned=pinned)

    def numerics_changing(self) -> dict[str, tuple[Any, ...]]:
        """The values of each parameter that change the model's numerics (none: absent)."""
        out = {}
        for p in self.params:
            if p.type in ("categorical", "bool"):
                found = tuple(c for c in p.grid() if p.changes_numerics(c))
                if found:
                    out[p.name] = found
        return out

    def keeping_numerics(self) -> SearchSpace:
        """The space without the values that change the model's numerics, for a deployment
        that forbids them; they are recorded in `left_out`. A parameter left with no value is
        a SpaceError."""
        changing = self.numerics_changing()
        params = []
        for p in self.params:
            if p.name not in changing:
                params.append(p)
                continue
            kept = tuple(c for c in p.grid() if c not in changing[p.name])
            if not kept:
                raise SpaceError(f"search space {self.name!r}: every value of {p.name!r} "
                                 "changes the model's numerics, which the deployment forbids; "
                                 "offer one that keeps them (e.g. the engine's default)")
            params.append(replace(p, type="categorical", choices=kept))
        return replace(self, params=tuple(params), left_out=changing)

    def restricted(self, names: tuple[str, ...]) -> SearchSpace:
        """The same space and rules with only the named parameters (the others at defaults)."""
        missing = [n for n in names if n not in self.param_names]
        if missing:
            raise SpaceError(f"search space {self.name!r} has no parameter(s) "
                             f"{', '.join(missing)}")
        kept = tuple(p for p in self.params if p.name in names)
        return replace(self, params=tuple(replace(p, when=None) for p in kept))

    def is_active(self, param: Param, values: Mapping[str, Any]) -> bool:
        if param.when is None:
            return True
        try:
            return bool(param.when.value({**self.context, **values}))
        except RuleError as exc:
            raise SpaceError(f"search space {self.name!r}: {exc}") from None

    def suggest(self, trial: Suggester) -> dict[str, Any]:
        """Define-by-run: suggest each parameter whose condition holds, in file order."""
        values: dict[str, Any] = {}
        for p in self.params:
            if self.is_active(p, values):
                values[p.name] = p.suggest(trial)
        return values

    def assignment(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The parameters a config sets, read from its (effective) values: what to enqueue for
        it. A value outside its parameter's range is a SpaceError."""
        chosen: dict[str, Any] = {}
        for p in self.params:
            if not self.is_active(p, chosen):
                continue
            value = values[p.name]
            if not p.contains(value):
                raise SpaceError(f"search space {self.name!r} does not contain {p.name}="
                                 f"{value!r}; widen that parameter's range")
            chosen[p.name] = value
        return chosen

    def holding(self, values: Mapping[str, Any]) -> SearchSpace:
        """The space widened just enough to hold these values of its active parameters (a
        missing choice added in order, a range stretched): a reference config the campaign must
        be able to run as one of its trials."""
        params: list[Param] = []
        chosen: dict[str, Any] = {}
        for p in self.params:
            if not self.is_active(p, chosen) or p.name not in values:
                params.append(p)
                continue
            value = chosen[p.name] = values[p.name]
            params.append(p if p.contains(value) else _widened(p, value))
        return replace(self, params=tuple(params))

    def grid_points(self) -> Iterator[dict[str, Any]]:
        """Every assignment of grid values, conditions honoured (a parameter whose condition
        fails is absent, not multiplied in)."""

        def walk(i: int, values: dict[str, Any]) -> Iterator[dict[str, Any]]:
            if i == len(self.params):
                yield dict(values)
                return
            p = self.params[i]
            if not self.is_active(p, values):
                yield from walk(i + 1, values)
                return
            for v in p.grid():
                values[p.name] = v
                yield from walk(i + 1, values)
            del values[p.name]

        return walk(0, {})

    def check_names(self, known_params: set[str], context_names: set[str]) -> None:
        """Refuse a parameter vLLM does not have, or an expression naming an unknown value.
        A condition may name deployment facts and the parameters before it."""
        earlier: set[str] = set()
        for p in self.params:
            if p.name not in known_params:
                raise SpaceError(
                    f"search space {self.name!r}: unknown parameter {p.name!r}; known parameters: "
                    f"{', '.join(sorted(known_params))}"
                )
            for expr, allowed in ((p.when, context_names | earlier),
                                  (p.min_expr, context_names), (p.max_expr, context_names)):
                unknown = sorted(expr.names - allowed) if expr else []
                if unknown:
                    raise SpaceError(
                        f"search space {self.name!r}: {expr.what} names {', '.join(unknown)}; "  # type: ignore[union-attr]
                        f"it may name deployment facts ({', '.join(sorted(context_names))})"
                        + (" and the parameters before it" if expr is p.when else ""))
            earlier.add(p.name)
        for rule in self.rules:
            try:
                rule.check_names(known_params | context_names)
            except RuleError as exc:
                raise SpaceError(f"search space {self.name!r}: {exc}") from None
        for pin in self.pins:
            where = f"{pin.origin}: pin {pin.name!r}"
            unknown = sorted(pin.names - context_names)
            if unknown:
                raise SpaceError(f"{where}: 'when' names {', '.join(unknown)}; it may name "
                                 f"deployment facts ({', '.join(sorted(context_names))})")
            bad = sorted(set(pin.values) - known_params)
            if bad:
                raise SpaceError(f"{where}: sets unknown parameter(s) {', '.join(bad)}")


def is_ordinal(choices: Sequence[Any]) -> bool:
    """Numbers listed in ascending order, which the samplers treat as ordered (booleans and
    strings are plain categories)."""
    numbers = all(isinstance(c, int | float) and not isinstance(c, bool) for c in choices)
    return numbers and list(choices) == sorted(choices)


def _widened(p: Param, value: Any) -> Param:
    if p.type == "categorical":
        choices = (*p.choices, value)
        numeric = all(isinstance(c, int | float) and not isinstance(c, bool) for c in choices)
        return replace(p, choices=tuple(sorted(choices)) if numeric else choices)
    steps = None if p.step is None else (value - float(p.low)) / p.step  # type: ignore[arg-type]
    off_step = steps is not None and abs(steps - round(steps)) > 1e-9
    if p.type not in ("int", "float") or off_step:
        raise SpaceError(f"parameter {p.name!r} cannot hold {value!r}: it is off its steps")
    return replace(p, low=min(p.low, value), high=max(p.high, value))  # type: ignore[type-var]

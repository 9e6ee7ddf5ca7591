"""Interaction rules and pins, as rules.yaml and the space files declare them.

A rule's `require` expression must hold for a config to be allowed (where its `when` holds);
a pin fixes parameters where its `when` holds on a deployment's facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.search.spaces.expressions import Expr, RuleError


def _checked(expr: Expr, values: Mapping[str, Any], what: str) -> Any:
    """An expression's value, its failures a RuleError naming the rule or pin."""
    try:
        return expr.evaluate(values)
    except KeyError as exc:
        raise RuleError(f"{what}: no value for {exc.args[0]!r}") from None
    except (TypeError, ZeroDivisionError) as exc:
        raise RuleError(f"{what}: {exc}") from None


@dataclass(frozen=True)
class Rule:
    """One interaction rule. severity "error": known to fail; "slow": known to be slow.

    `when` (optional): the rule applies only where it holds (a model or GPU fact, say);
    `source`: where the behaviour it encodes lives (a vLLM file and function, or a recipe);
    `origin`: the file it was read from, for error messages.
    """

    name: str
    require: str
    message: str
    severity: str = "error"
    when: str | None = None
    source: str = ""
    origin: str = ""
    _require: Expr = field(init=False, repr=False, compare=False)
    _when: Expr | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.severity not in ("error", "slow"):
            raise RuleError(f"rule {self.name!r}: severity must be 'error' or 'slow'")
        object.__setattr__(self, "_require", Expr(self.require, f"rule {self.name!r}"))
        object.__setattr__(self, "_when", None if self.when is None
                           else Expr(self.when, f"rule {self.name!r} when"))

    @property
    def names(self) -> set[str]:
        return self._require.names | (self._when.names if self._when is not None else set())

    def check_names(self, known: set[str]) -> None:
        unknown = sorted(self.names - known)
        if unknown:
            where = f"{self.origin}: " if self.origin else ""
            raise RuleError(
                f"{where}rule {self.name!r} references unknown name(s) {', '.join(unknown)}; "
                f"known names: {', '.join(sorted(known))}"
            )

    def applies(self, values: Mapping[str, Any]) -> bool:
        return self._when is None or bool(_checked(self._when, values, f"rule {self.name!r}"))

    def holds(self, values: Mapping[str, Any]) -> bool:
        return not self.applies(values) or bool(
            _checked(self._require, values, f"rule {self.name!r}"))


@dataclass(frozen=True)
class Pin:
    """Values a model or GPU requires: where `when` holds on the deployment's facts, the
    parameters are fixed to `values` for baselines and trials and leave the search space."""

    name: str
    when: str
    values: Mapping[str, Any]
    message: str
    source: str = ""
    origin: str = ""
    _when: Expr = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.values:
            raise RuleError(f"pin {self.name!r}: 'set' must name at least one parameter")
        object.__setattr__(self, "_when", Expr(self.when, f"pin {self.name!r} when"))

    @property
    def names(self) -> set[str]:
        return self._when.names

    def applies(self, facts: Mapping[str, Any]) -> bool:
        return bool(_checked(self._when, facts, f"pin {self.name!r}"))


def pinned_by(pins: tuple[Pin, ...], facts: Mapping[str, Any]) -> dict[str, Any]:
    """The values the pins whose condition holds on these facts fix. A pin naming a fact the
    mapping lacks (a partial context, as schema tests bind) fixes nothing."""
    values: dict[str, Any] = {}
    for pin in pins:
        if pin.names <= set(facts) and pin.applies(facts):
            values.update(pin.values)
    return values

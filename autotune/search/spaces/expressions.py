"""The rule grammar: expressions over engine arguments and deployment facts, never `eval`'d.

The grammar is a small subset of Python expressions: `and or not`, comparisons
(`== != < <= > >= in not in`), `+ - * / // %`, unary minus, `A if C else B`, the calls
`min(...)` and `max(...)`, names, numbers, strings, booleans and tuples/lists of constants
(for `in`).

simpleeval evaluates an expression, given only the grammar's operators and calls. Parsing and a
walk over the tree stay here: they refuse what lies beyond the grammar when a file is read,
naming the expression, where simpleeval would refuse a node only once a config reaches it (and
allows attributes, subscripts and `**`, which the grammar does not); and the walk lists the
names an expression reads, which a space checks against the known ones when it loads.

`Expr` is one such expression: search-space bounds and conditions use its value, and rules and
pins (rules.py) hold one that must hold.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from simpleeval import NameNotDefined, SimpleEval

_OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Not: operator.not_,
    ast.USub: operator.neg,
}
_CALLS: dict[str, Callable[..., Any]] = {"min": min, "max": max}
_NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Compare, ast.BinOp,
          ast.Name, ast.Load, ast.Constant, ast.Tuple, ast.List, ast.IfExp, ast.Call, *_OPERATORS)


class RuleError(ValueError):
    """A rule that cannot be parsed, names an unknown value, or fails to evaluate."""


def _check_grammar(node: ast.AST, source: str) -> None:
    for n in ast.walk(node):
        if not isinstance(n, _NODES):
            raise RuleError(f"{source!r}: {type(n).__name__} is not allowed in a rule")
        if isinstance(n, ast.Call) and (not isinstance(n.func, ast.Name)
                                        or n.func.id not in _CALLS or n.keywords or not n.args):
            raise RuleError(f"{source!r}: calls other than min(...) and max(...) are not allowed")


def _names(node: ast.AST) -> set[str]:
    called = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and id(n) not in called}


def _parse(source: str, what: str) -> ast.Expression:
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise RuleError(f"{what}: cannot parse {source!r}: {exc.msg}") from None
    try:
        _check_grammar(tree, source)
    except RuleError as exc:
        raise RuleError(f"{what}: {exc}") from None
    return tree


class _Evaluator(SimpleEval):
    """simpleeval with the grammar's operators and calls, reading as the grammar always has:
    `and` / `or` give True or False rather than an operand, a list is a tuple."""

    def __init__(self, names: Mapping[str, Any]) -> None:
        super().__init__(operators=_OPERATORS, functions=_CALLS, names=names)
        self.nodes[ast.Tuple] = self.nodes[ast.List] = self._eval_sequence

    def _eval_boolop(self, node: ast.BoolOp) -> bool:
        if isinstance(node.op, ast.And):
            return all(self._eval(v) for v in node.values)
        return any(self._eval(v) for v in node.values)

    def _eval_sequence(self, node: ast.Tuple | ast.List) -> tuple[Any, ...]:
        return tuple(self._eval(e) for e in node.elts)


@dataclass(frozen=True)
class Expr:
    """An expression in the rule grammar, parsed and checked when made (a RuleError naming
    `what` otherwise)."""

    source: str
    what: str = "expression"  # names it in error messages, e.g. "parameter 'x' max"
    _tree: ast.Expression = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_tree", _parse(self.source, self.what))

    @property
    def names(self) -> set[str]:
        """The names it reads (min and max are functions, not names)."""
        return _names(self._tree)

    def evaluate(self, values: Mapping[str, Any]) -> Any:
        """Its value on these names: a KeyError for a name without one, Python's own errors for
        an operation that fails (rules and pins name themselves in theirs)."""
        try:
            return _Evaluator(values).eval(self.source, previously_parsed=self._tree.body)
        except NameNotDefined as exc:
            raise KeyError(exc.name) from None

    def value(self, values: Mapping[str, Any]) -> Any:
        """Its value on these names; a missing name or a failing operation is a RuleError."""
        try:
            return self.evaluate(values)
        except KeyError as exc:
            raise RuleError(f"{self.what}: no value for {exc.args[0]!r}") from None
        except (TypeError, ZeroDivisionError, ValueError) as exc:
            raise RuleError(f"{self.what}: {exc}") from None

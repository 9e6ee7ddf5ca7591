"""The rule grammar: expressions over engine arguments and deployment facts, checked without
`eval`.

The grammar is a small subset of Python expressions, parsed with `ast` and interpreted here node
by node: `and or not`, comparisons (`== != < <= > >= in not in`), `+ - * / // %`, unary minus,
`A if C else B`, the calls `min(...)` and `max(...)`, names, numbers, strings, booleans and
tuples/lists of constants (for `in`).

`Expr` is one such expression: search-space bounds and conditions use its value, and rules and
pins (rules.py) hold one that must hold.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_CALLS: dict[str, Callable[..., Any]] = {"min": min, "max": max}


class RuleError(ValueError):
    """A rule that cannot be parsed, names an unknown value, or fails to evaluate."""


def _check_grammar(node: ast.AST, source: str) -> None:
    allowed = (
        ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub,
        ast.Compare, ast.BinOp, ast.Name, ast.Load, ast.Constant, ast.Tuple, ast.List,
        ast.IfExp, ast.Call, *_COMPARE, *_BINARY,
    )
    for n in ast.walk(node):
        if not isinstance(n, allowed):
            raise RuleError(f"{source!r}: {type(n).__name__} is not allowed in a rule")
        if isinstance(n, ast.Call) and (not isinstance(n.func, ast.Name)
                                        or n.func.id not in _CALLS or n.keywords or not n.args):
            raise RuleError(f"{source!r}: calls other than min(...) and max(...) are not allowed")


def _names(node: ast.AST) -> set[str]:
    called = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and id(n) not in called}


def _evaluate(node: ast.AST, values: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, values)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_evaluate(e, values) for e in node.elts)
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_evaluate(v, values) for v in node.values)
        return any(_evaluate(v, values) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        operand = _evaluate(node.operand, values)
        return (not operand) if isinstance(node.op, ast.Not) else -operand
    if isinstance(node, ast.IfExp):
        branch = node.body if _evaluate(node.test, values) else node.orelse
        return _evaluate(branch, values)
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)  # checked by _check_grammar
        return _CALLS[node.func.id](*(_evaluate(a, values) for a in node.args))
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_evaluate(node.left, values), _evaluate(node.right, values))
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, values)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _evaluate(comparator, values)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    raise RuleError(f"cannot evaluate {type(node).__name__}")  # excluded by _check_grammar


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
        return _evaluate(self._tree, values)

    def value(self, values: Mapping[str, Any]) -> Any:
        """Its value on these names; a missing name or a failing operation is a RuleError."""
        try:
            return self.evaluate(values)
        except KeyError as exc:
            raise RuleError(f"{self.what}: no value for {exc.args[0]!r}") from None
        except (TypeError, ZeroDivisionError, ValueError) as exc:
            raise RuleError(f"{self.what}: {exc}") from None

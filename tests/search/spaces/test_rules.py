from __future__ import annotations

import pytest

from autotune.search.spaces import Rule, RuleError


def rule(expr: str) -> Rule:
    return Rule("r", expr, "message")


@pytest.mark.parametrize("expr, values, expected", [
    ("a >= b", {"a": 4, "b": 4}, True),
    ("a >= b", {"a": 3, "b": 4}, False),
    ("flag or a >= 100", {"flag": False, "a": 99}, False),
    ("not (a == 16 and b >= 128)", {"a": 16, "b": 128}, False),
    ("not (a == 16 and b >= 128)", {"a": 32, "b": 128}, True),
    ("a % 32 == 0", {"a": 96}, True),
    ("device != 'cpu' or a % 32 == 0", {"device": "gpu", "a": 16}, True),
    ("a in (16, 32, 64)", {"a": 48}, False),
    ("1 <= a < 10", {"a": 10}, False),
    ("a * 2 - 1 > b // 2", {"a": 3, "b": 8}, True),
    ("-a < 0", {"a": 1}, True),
])
def test_evaluates_the_grammar(expr: str, values: dict, expected: bool) -> None:
    assert rule(expr).holds(values) is expected


@pytest.mark.parametrize("expr", [
    "__import__('os').system('true')",  # calls
    "a.real > 0",  # attribute access
    "[x for x in a]",  # comprehensions
    "(lambda: 1)()",
    "abs(a) > 1",  # only min and max may be called
    "min(a, key=b) > 1",
    "a[0] > 1",
])
def test_refuses_anything_beyond_the_grammar(expr: str) -> None:
    with pytest.raises(RuleError, match="not allowed"):
        rule(expr)


def test_bounds_grammar_conditional_and_min_max() -> None:
    from autotune.search.spaces.expressions import Expr

    e = Expr("min(1024, max_model_len // 8) if gpu_memory_gib >= 70 else 256")
    assert e.value({"max_model_len": 4096, "gpu_memory_gib": 140}) == 512
    assert e.value({"max_model_len": 4096, "gpu_memory_gib": 40}) == 256
    assert e.names == {"max_model_len", "gpu_memory_gib"}  # min is a function, not a value


def test_syntax_error_names_the_rule() -> None:
    with pytest.raises(RuleError, match="rule 'r': cannot parse"):
        rule("a >=")


def test_unknown_names_are_reported() -> None:
    with pytest.raises(RuleError, match="unknown name.*max_seqs"):
        rule("max_seqs > 1").check_names({"max_num_seqs"})


def test_missing_value_and_type_errors_are_rule_errors() -> None:
    with pytest.raises(RuleError, match="no value for 'a'"):
        rule("a > 1").holds({})
    with pytest.raises(RuleError, match="rule 'r'"):
        rule("a % 0 == 1").holds({"a": 1})


def test_bad_severity() -> None:
    with pytest.raises(RuleError, match="severity"):
        Rule("r", "a", "m", severity="fatal")

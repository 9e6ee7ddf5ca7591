from __future__ import annotations

from pathlib import Path

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from autotune.search.spaces import (
    ParamRole,
    SpaceError,
    builtin_space_path,
    load_rules_file,
    load_space_file,
)


def test_default_space_has_the_first_parameters_and_common_rules() -> None:
    space = load_space_file(builtin_space_path("default"))
    assert set(space.param_names) == {"max_num_seqs", "max_num_batched_tokens", "block_size",
                                      "enable_chunked_prefill", "gpu_memory_utilization",
                                      "enable_prefix_caching"}
    d = space.distributions()
    assert isinstance(d["max_num_seqs"], IntDistribution) and d["max_num_seqs"].log
    assert isinstance(d["gpu_memory_utilization"], FloatDistribution)
    assert d["enable_chunked_prefill"] == CategoricalDistribution((True, False))
    assert {r.name for r in load_rules_file()} <= {r.name for r in space.rules}


def test_parameters_have_their_engine_arguments_roles(tmp_path: Path) -> None:
    """The line sweep finds the layout, step budget, count and prefill cap by role, in a
    built-in space or a user's file alike; other arguments have none."""
    chat = load_space_file(builtin_space_path("chat"), common_rules=())
    assert {role: chat.with_role(role).name for role in ParamRole} == {  # type: ignore[union-attr]
        ParamRole.LAYOUT: "parallelism", ParamRole.STEP_BUDGET: "max_num_batched_tokens",
        ParamRole.CONCURRENCY: "max_num_seqs",
        ParamRole.PREFILL_CAP: "long_prefill_token_threshold"}
    path = tmp_path / "s.yaml"
    path.write_text("parameters:\n  max_num_seqs: {type: int, low: 8, high: 64}\n"
                    "  block_size: {type: categorical, choices: [16, 32]}\n")
    own = load_space_file(path, common_rules=())
    assert own.param("max_num_seqs").role is ParamRole.CONCURRENCY
    assert own.param("block_size").role is None
    assert own.with_role(ParamRole.LAYOUT) is None


def test_grid_of_a_stepped_float() -> None:
    space = load_space_file(builtin_space_path("default"))
    grid = next(p for p in space.params if p.name == "gpu_memory_utilization").grid()
    assert grid[0] == 0.7 and grid[-1] == 0.97 and len(grid) == 28


@pytest.mark.parametrize("text, fragment", [
    ("parameters: 3", "expected a mapping with a 'parameters'"),
    ("parameters:\n  a: {type: weird}", "needs 'type'"),
    ("parameters:\n  a: {type: int, low: 5, high: 1}", "low' <= 'high'"),
    ("parameters:\n  a: {type: int, low: 1, high: 9, log: true, step: 2}", "cannot be combined"),
    ("parameters:\n  a: {type: categorical, choices: []}", "non-empty 'choices'"),
    ("parameters:\n  a: {type: bool, colour: red}", "unknown key"),
    ("parameters: {}\nextra: 1", "unknown key"),
    ("parameters: {}\nrules: [{name: x}]", "needs 'name', 'require' and 'message'"),
    ("parameters: {}\nrules: [{name: x, require: 'a >', message: m}]", "cannot parse"),
    ("parameters: [", "not valid YAML"),
    ("extends: nowhere\nparameters: {}", "neither a built-in space"),
    ("extends: space.yaml\nparameters: {}", "leads back to itself"),  # the file itself
])
def test_malformed_space_files(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(SpaceError, match=fragment):
        load_space_file(path, common_rules=())


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpaceError, match="does not exist"):
        load_space_file(tmp_path / "nope.yaml")


def test_extends_keeps_the_base_order_replaces_in_place_and_adds_rules(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(
        "profile: chat\nparameters:\n  a: {type: bool}\n  b: {type: categorical, choices: [1, 2]}\n"
        "rules: [{name: base-rule, require: 'a or not a', message: m}]\n")
    (tmp_path / "child.yaml").write_text(
        "extends: base.yaml\nparameters:\n  c: {type: bool}\n  b: {type: categorical, choices: [3]}\n"
        "rules: [{name: child-rule, require: 'c or not c', message: m}]\n")
    space = load_space_file(tmp_path / "child.yaml", common_rules=())
    assert space.param_names == ("a", "b", "c")
    assert space.param("b").choices == (3,)
    assert [r.name for r in space.rules] == ["base-rule", "child-rule"]
    assert space.profile is None  # a derived space is nobody's default


def test_extends_a_builtin_by_name_with_the_common_rules_once(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text("extends: chat\nparameters:\n  x: {type: bool}\n")
    chat = load_space_file(builtin_space_path("chat"))
    mine = load_space_file(tmp_path / "mine.yaml")
    assert mine.param_names == (*chat.param_names, "x")
    assert [r.name for r in mine.rules] == [r.name for r in chat.rules]

from __future__ import annotations

from pathlib import Path

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from search_spaces import SpaceError, builtin_space_path, load_rules_file, load_space_file


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
])
def test_malformed_space_files(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(SpaceError, match=fragment):
        load_space_file(path, common_rules=())


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpaceError, match="does not exist"):
        load_space_file(tmp_path / "nope.yaml")

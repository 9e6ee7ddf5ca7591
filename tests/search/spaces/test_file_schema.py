"""The space file's pydantic models: every bundled file validates, the published JSON Schema is
current (and agrees with the loader), and a bad file is one line naming it and the parameter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from autotune.cli.main import main
from autotune.search.spaces import SpaceError, SpaceFile, load_space_file, space_schema_text
from autotune.search.spaces.file_schema import RulesFile
from autotune.search.spaces.load import BUILTIN_DIR, RULES_FILE, builtin_names, builtin_space_path

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "docs" / "reference" / "search-space.schema.json"


@pytest.mark.parametrize("name", builtin_names())
def test_every_bundled_space_validates(name: str) -> None:
    data = yaml.safe_load(builtin_space_path(name).read_text())
    spec = SpaceFile.model_validate(data)
    assert list(spec.parameters) == list(data["parameters"])  # file order is suggestion order


def test_the_common_rules_file_validates() -> None:
    rules = RulesFile.model_validate(yaml.safe_load(RULES_FILE.read_text()))
    assert rules.rules and rules.pins


def test_the_committed_schema_is_the_models() -> None:
    assert COMMITTED.read_text() == space_schema_text(), (
        "docs/reference/search-space.schema.json is stale: run "
        "`autotune space schema > docs/reference/search-space.schema.json`")


def test_the_cli_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["space", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == SpaceFile.model_json_schema()


def test_the_published_schema_agrees_with_the_loader() -> None:
    """What an editor checks against: it takes every bundled space and refuses what autotune
    refuses."""
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads(space_schema_text()))
    for path in BUILTIN_DIR.glob("*.yaml"):
        if path != RULES_FILE:
            assert not list(validator.iter_errors(yaml.safe_load(path.read_text()))), path
    for case, bad in BAD.items():
        if case != "low above high":  # a comparison of two values: JSON Schema cannot say it
            assert list(validator.iter_errors(yaml.safe_load(bad))), bad


BAD = {
    "unknown key": "parameters:\n  block_size: {type: categorical, choices: [16], colour: red}",
    "wrong type": "parameters:\n  max_num_seqs: {type: int, low: eight, high: 64}",
    "low above high": "parameters:\n  max_num_seqs: {type: int, low: 64, high: 8}",
    "no step": "parameters:\n  max_num_seqs: {type: int, low: 8, high: 64, step: 0}",
    "empty choices": "parameters:\n  block_size: {type: categorical, choices: []}",
    "no type": "parameters:\n  block_size: {choices: [16, 32]}",
    "categorical without choices": "parameters:\n  block_size: {type: categorical}",
}
WANTED = {
    "unknown key": "parameter 'block_size': unknown key(s) colour",
    "wrong type": "parameter 'max_num_seqs': 'low': must be a number (got 'eight')",
    "low above high": "parameter 'max_num_seqs': needs numeric 'low' <= 'high'",
    "no step": "parameter 'max_num_seqs': 'step' must be positive, not 0",
    "empty choices": "parameter 'block_size': needs a non-empty 'choices' list",
    "no type": "parameter 'block_size': needs 'type' set to one of int, float, categorical, bool",
    "categorical without choices": "parameter 'block_size': needs a non-empty 'choices' list",
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_file_is_one_line_naming_the_file_and_parameter(tmp_path: Path, case: str) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(BAD[case])
    with pytest.raises(SpaceError) as exc:
        load_space_file(path, common_rules=())
    assert str(exc.value) == f"{path}: {WANTED[case]}"


@pytest.mark.parametrize("text, wanted", [
    ("parameters: {}\nrules: [{name: r, require: x, message: m, severity: often}]",
     "rule 'r': 'severity': input should be 'error' or 'slow' (got 'often')"),
    ("parameters: {}\nrules: [{require: x}]", "rule #1: needs 'name', 'require' and 'message'"),
    ("parameters: {}\nrules: {name: r}", "'rules': input should be a valid list"),
    ("parameters:\n  a: {type: bool, log: perhaps}",
     "parameter 'a': 'log': input should be a valid boolean, unable to interpret input "
     "(got 'perhaps')"),
    ("parameters:\n  a: {type: bool, when: 'x >'}",
     "parameter 'a' when: cannot parse 'x >': invalid syntax"),
])
def test_rules_and_keys_name_where_they_are(tmp_path: Path, text: str, wanted: str) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(SpaceError) as exc:
        load_space_file(path, common_rules=())
    assert str(exc.value) == f"{path}: {wanted}"


def test_yaml_numbers_stay_what_they_are(tmp_path: Path) -> None:
    """An int parameter's bounds stay ints, a bare number is an expression, a numeric name
    is its text: as the hand-written reader had them."""
    path = tmp_path / "n.yaml"
    path.write_text("name: 2024\nparameters:\n  max_num_seqs: {type: int, low: 8, high: 64, "
                    "max: 32}\n  gpu_memory_utilization: {type: float, low: 0.8, high: 0.9}\n")
    space = load_space_file(path, common_rules=())
    seqs = space.param("max_num_seqs")
    assert space.name == "2024" and type(seqs.low) is int and type(seqs.high) is int
    assert seqs.max_expr is not None and seqs.max_expr.source == "32"
    assert space.bind({}).param("max_num_seqs").high == 32


def test_a_parameter_keeps_only_the_keys_of_its_type(tmp_path: Path) -> None:
    """Allowed but ignored, as the hand-written reader had them: a categorical's bounds, a
    range's choices."""
    path = tmp_path / "x.yaml"
    path.write_text("parameters:\n  block_size: {type: categorical, choices: [16, 32], low: 1, "
                    "high: 9}\n  max_num_seqs: {type: int, low: 8, high: 64, choices: [8]}\n")
    space = load_space_file(path, common_rules=())
    assert space.param("block_size").low is None and space.param("block_size").high is None
    assert space.param("max_num_seqs").choices == ()

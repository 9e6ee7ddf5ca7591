"""Which values of a space change the model's numerics: the spaces' `affects_accuracy` marks,
the built-in judgement where a parameter has none, and the space without them."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.search.spaces import SpaceError, builtin_space_path, load_space_file

SPEC_1 = '{"method": "mtp", "num_speculative_tokens": 1}'


def _space(tmp_path: Path, params: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "s.yaml"
    path.write_text("parameters:\n" + params)
    return load_space_file(path, common_rules=())


def test_the_builtin_spaces_mark_fp8_kv_and_every_drafting_choice() -> None:
    chat = load_space_file(builtin_space_path("chat"), common_rules=())
    assert chat.param("kv_cache_dtype").affects_accuracy == ("fp8",)
    assert chat.numerics_changing() == {"kv_cache_dtype": ("fp8",)}
    spec = load_space_file(builtin_space_path("chat-speculative"), common_rules=())
    drafts = spec.numerics_changing()["speculative_config"]
    assert len(drafts) == 3 and None not in drafts and SPEC_1 in drafts
    assert load_space_file(builtin_space_path("default"), common_rules=()).numerics_changing() == {}


def test_a_marking_is_read_as_a_list_true_or_false(tmp_path: Path) -> None:
    space = _space(tmp_path, (
        "  kv_cache_dtype: {type: categorical, choices: [auto, fp8, fp8_e5m2], "
        "affects_accuracy: [fp8_e5m2]}\n"
        "  enforce_eager: {type: bool, affects_accuracy: true}\n"
        "  speculative_config: {type: categorical, choices: [null, '" + SPEC_1 + "'], "
        "affects_accuracy: false}\n"))
    # The space's own marks win over the built-in judgement (which would flag fp8 and SPEC_1).
    assert space.numerics_changing() == {"kv_cache_dtype": ("fp8_e5m2",),
                                         "enforce_eager": (True,)}
    assert space.param("speculative_config").affects_accuracy == ()


def test_an_unmarked_parameter_gets_the_builtin_judgement(tmp_path: Path) -> None:
    space = _space(tmp_path, (
        "  kv_cache_dtype: {type: categorical, choices: [auto, bfloat16, fp8]}\n"
        "  speculative_config: {type: categorical, choices: [null, '" + SPEC_1 + "']}\n"
        "  block_size: {type: categorical, choices: [16, 32]}\n"))
    assert space.numerics_changing() == {"kv_cache_dtype": ("fp8",),
                                         "speculative_config": (SPEC_1,)}
    # A config's value (a nested config is a mapping there, JSON text in the space) too.
    assert space.param("speculative_config").changes_numerics(
        {"method": "mtp", "num_speculative_tokens": 1})


def test_keeping_numerics_takes_the_marked_values_out(tmp_path: Path) -> None:
    space = _space(tmp_path, (
        "  kv_cache_dtype: {type: categorical, choices: [auto, fp8]}\n"
        "  enforce_eager: {type: bool, affects_accuracy: [true]}\n"
        "  block_size: {type: categorical, choices: [16, 32]}\n"))
    kept = space.keeping_numerics()
    assert kept.param("kv_cache_dtype").choices == ("auto",)
    assert kept.param("enforce_eager").grid() == (False,)
    assert kept.param("block_size") == space.param("block_size")
    assert kept.left_out == {"kv_cache_dtype": ("fp8",), "enforce_eager": (True,)}
    assert kept.numerics_changing() == {}


def test_a_parameter_with_nothing_left_is_refused(tmp_path: Path) -> None:
    space = _space(tmp_path, "  kv_cache_dtype: {type: categorical, choices: [fp8]}\n")
    with pytest.raises(SpaceError, match="every value of 'kv_cache_dtype' changes"):
        space.keeping_numerics()


@pytest.mark.parametrize("spec, fragment", [
    ("{type: categorical, choices: [auto, fp8], affects_accuracy: [fp16]}",
     "'affects_accuracy' names 'fp16', which is not among its values"),
    ("{type: float, low: 0.1, high: 0.9, affects_accuracy: true}",
     "'affects_accuracy' is for categorical and bool parameters"),
    ("{type: categorical, choices: [auto, fp8], affects_accuracy: fp8}",
     "must be a list of the parameter's values, true or false"),
])
def test_a_bad_marking_names_the_file_and_parameter(tmp_path: Path, spec: str,
                                                    fragment: str) -> None:
    with pytest.raises(SpaceError) as exc:
        _space(tmp_path, f"  kv_cache_dtype: {spec}\n")
    message = str(exc.value)
    assert message.startswith(f"{tmp_path / 's.yaml'}: parameter 'kv_cache_dtype'")
    assert fragment in message and "\n" not in message

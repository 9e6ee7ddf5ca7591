"""Conditional parameters, deployment-derived bounds and grids in the space schema."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.search.spaces import SpaceError, load_space_file

SPACE = """
parameters:
  enable_chunked_prefill: {type: bool}
  long_prefill_token_threshold: {type: categorical, choices: [0, 512, 4096, 16384],
                                 when: enable_chunked_prefill, max: "max_model_len // 2"}
  max_num_seqs: {type: int, low: 8, high: 1024, log: true, max: "1024 if gpu_memory_gib >= 70 else 256"}
  kv_cache_dtype: {type: categorical, choices: [auto, fp8], when: 'device == "gpu"'}
"""
GPU = {"device": "gpu", "gpu_memory_gib": 140.4, "max_model_len": 16384}
SMALL = {"device": "cpu", "gpu_memory_gib": 16.0, "max_model_len": 4096}


def _space(tmp_path: Path, text: str = SPACE):  # type: ignore[no-untyped-def]
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return load_space_file(path, common_rules=())


def test_a_conditional_parameter_is_suggested_only_when_its_feature_is_on(tmp_path: Path) -> None:
    space = _space(tmp_path).bind(GPU)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen_on = seen_off = 0
    for _ in range(30):
        trial = study.ask()
        values = space.suggest(trial)
        assert ("long_prefill_token_threshold" in values) is values["enable_chunked_prefill"]
        assert set(trial.params) == set(values)  # Optuna saw exactly these parameters
        study.tell(trial, 1.0)
        seen_on += values["enable_chunked_prefill"]
        seen_off += not values["enable_chunked_prefill"]
    assert seen_on and seen_off


def test_bounds_follow_the_deployment(tmp_path: Path) -> None:
    big, small = _space(tmp_path).bind(GPU), _space(tmp_path).bind(SMALL)
    assert big.param("max_num_seqs").high == 1024 and small.param("max_num_seqs").high == 256
    assert big.param("long_prefill_token_threshold").choices == (0, 512, 4096)
    assert small.param("long_prefill_token_threshold").choices == (0, 512)
    # A deployment fact can switch a parameter off entirely.
    trial = optuna.create_study().ask()
    assert "kv_cache_dtype" not in small.suggest(trial)


def test_grid_points_honour_conditions(tmp_path: Path) -> None:
    space = _space(tmp_path).bind(GPU)
    points = list(space.grid_points())
    seqs = len(space.param("max_num_seqs").grid())
    assert space.param("max_num_seqs").grid() == (8, 16, 32, 64, 128, 256, 512, 1024)
    # chunked on: 3 thresholds; off: none; times seqs, times 2 KV dtypes.
    assert len(points) == (3 + 1) * seqs * 2
    assert all("long_prefill_token_threshold" not in p for p in points
               if not p["enable_chunked_prefill"])


def test_assignment_reads_only_active_parameters(tmp_path: Path) -> None:
    space = _space(tmp_path).bind(GPU)
    values = {"enable_chunked_prefill": False, "long_prefill_token_threshold": 0,
              "max_num_seqs": 64, "kv_cache_dtype": "auto"}
    assert space.assignment(values) == {"enable_chunked_prefill": False, "max_num_seqs": 64,
                                        "kv_cache_dtype": "auto"}
    with pytest.raises(SpaceError, match="does not contain max_num_seqs=2048"):
        space.assignment({**values, "max_num_seqs": 2048})


@pytest.mark.parametrize("text, fragment", [
    ("parameters:\n  a: {type: bool, when: b}\n  b: {type: bool}\n", "names b"),
    ("parameters:\n  a: {type: int, low: 1, high: 8, max: 'open(1)'}\n", "not allowed"),
    ("parameters:\n  a: {type: bool, max: 3}\n", "a bool has no"),
])
def test_bad_conditions_and_bounds_are_refused(tmp_path: Path, text: str, fragment: str) -> None:
    space = None
    with pytest.raises(SpaceError, match=fragment):
        space = _space(tmp_path, text)
        space.check_names({"a", "b"}, set(GPU))


def test_bounds_that_leave_nothing_are_refused(tmp_path: Path) -> None:
    space = _space(tmp_path, "parameters:\n  a: {type: categorical, choices: [4096], "
                             "max: 'max_model_len // 8'}\n")
    with pytest.raises(SpaceError, match="none of the choices"):
        space.bind(SMALL)

from __future__ import annotations

import pytest

from autotune.domain.parallelism import Strategy, candidates


@pytest.mark.parametrize("name, tp, dp, ep", [
    ("TP8", 8, 1, False), ("TP8+EP", 8, 1, True), ("DP8+EP", 1, 8, True),
    ("DP4xTP2+EP", 2, 4, True), ("DP2xTP4", 4, 2, False), ("dp4xtp2+ep", 2, 4, True),
])
def test_names_parse_to_vllms_three_arguments_and_back(name: str, tp: int, dp: int,
                                                        ep: bool) -> None:
    s = Strategy.parse(name)
    assert s.engine_args() == {"tensor_parallel_size": tp, "data_parallel_size": dp,
                               "enable_expert_parallel": ep}
    assert Strategy.parse(s.name) == s and s.gpus == tp * dp
    assert Strategy.of(s.engine_args()) == s


def test_a_bad_name_says_what_a_strategy_looks_like() -> None:
    with pytest.raises(ValueError, match="examples: TP8"):
        Strategy.parse("EP8")


def test_candidates_use_every_gpu() -> None:
    moe = [s.name for s in candidates(8, moe=True)]
    assert moe == ["TP8", "TP8+EP", "DP2xTP4+EP", "DP4xTP2+EP", "DP8+EP"]
    assert [s.name for s in candidates(8, moe=False)] == ["TP8", "DP2xTP4", "DP4xTP2", "DP8"]
    assert [s.name for s in candidates(3, moe=True, families=("dep",))] == ["DP3+EP"]
    assert [s.name for s in candidates(1, moe=True)] == ["TP1"]  # EP on one GPU does nothing
    assert all(s.gpus == 8 for s in candidates(8, moe=True))

"""A trial whose parallel layout needs more GPUs than the Ray cluster has fails at once as a
config failure; Ray itself would leave its actor pending forever. No Ray is started: only the
cluster's resource count is asked for, and answered here."""

from __future__ import annotations

import pytest

from autotune.domain.deployment import DEMO
from autotune.domain.engine_config import EngineConfig
from autotune.measure.trial_spec import TrialSpec
from autotune.workers import ray_executor
from autotune.workers.ray_executor import RayExecutor


def test_a_trial_needing_more_gpus_than_the_cluster_fails_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_executor.ray, "cluster_resources", lambda: {"GPU": 8.0})
    spec = TrialSpec("s", 3, EngineConfig(tensor_parallel_size=8, pipeline_parallel_size=2),
                     DEMO, None, None, "sim")
    executor = RayExecutor()
    executor.submit(spec)
    [outcome] = executor.wait()
    assert outcome.trial_number == 3 and outcome.failure_class == "invalid_args"
    assert outcome.failure_message == ("the config needs 16 GPUs (tensor x pipeline x data "
                                       "parallel size); the Ray cluster has 8")
    assert executor.wait() == []

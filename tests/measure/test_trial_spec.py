"""What one trial measures (autotune.measure.trial_spec)."""

from __future__ import annotations

from autotune.domain.deployment import DEMO
from autotune.domain.engine_config import EngineConfig
from autotune.measure.trial_spec import TrialSpec


def test_a_trial_occupies_tensor_x_pipeline_x_data_parallel_gpus() -> None:
    def gpus(**args: int) -> int:
        return TrialSpec("s", 0, EngineConfig(**args), DEMO, None, None, "sim").gpus

    assert gpus() == DEMO.tensor_parallel_size  # the deployment's layout
    assert gpus(tensor_parallel_size=2, pipeline_parallel_size=2, data_parallel_size=2) == 8
    assert gpus(tensor_parallel_size=4, pipeline_parallel_size=2) == 8

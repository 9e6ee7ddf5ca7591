"""What one trial measures: a config on a deployment, replaying a trace under an SLO.

It lives in measure, not domain, because it holds a Trace (autotune.traffic), a layer above
domain; every user of it (measure, campaign, workers) sits above traffic."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import CapacitySearch
from autotune.domain.slo import SLO
from autotune.traffic.trace import Trace


@dataclass(frozen=True)
class TrialSpec:
    study_name: str
    trial_number: int
    config: EngineConfig
    deployment: DeploymentSpec
    trace: Trace
    slo: SLO
    backend: str
    seed: int = 0
    search: CapacitySearch = field(default_factory=CapacitySearch)
    backend_options: dict[str, Any] = field(default_factory=dict)  # plain data for the backend

    @property
    def gpus(self) -> int:
        """GPUs the trial's engine occupies: tensor x pipeline x data parallel size as its
        config sets them (tensor: else the deployment's; the others: else vLLM's 1)."""
        c = self.config
        return ((c.tensor_parallel_size or self.deployment.tensor_parallel_size)
                * (c.pipeline_parallel_size or 1) * (c.data_parallel_size or 1))

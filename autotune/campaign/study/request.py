"""What a campaign asks for: its deployment, trace, SLO, search, budget and phases."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.campaign import budget as budgets
from autotune.campaign import multifidelity as mf
from autotune.campaign.confirm import ConfirmPlan
from autotune.domain.deployment import DeploymentSpec
from autotune.domain.records import CapacitySearch
from autotune.domain.slo import SLO
from autotune.search.samplers import DEFAULT_SAMPLER
from autotune.traffic.trace import Trace


@dataclass(frozen=True)
class Reference:
    """A config enqueued before the baselines with its exact arguments: the incumbent, or a
    warm start from an earlier campaign. `tag` names it uniquely within the campaign."""

    tag: str
    role: str
    config: dict[str, Any]  # EngineConfig.explicit()


@dataclass(frozen=True)
class CampaignRequest:
    deployment: DeploymentSpec
    campaign: str
    slo: SLO
    trace: Trace
    trace_ref: str
    backend: str = "sim"
    executor: str = "inline"
    parallel: int = 1
    search_space: str = "default"
    sampler: str = DEFAULT_SAMPLER
    max_trials: int = 30
    seed: int = 0
    search: CapacitySearch = field(default_factory=CapacitySearch)
    backend_options: dict[str, Any] = field(default_factory=dict)
    budget: budgets.Budget = field(default_factory=budgets.Budget)
    confirm: ConfirmPlan | None = None  # None: publish the best single measurement
    references: tuple[Reference, ...] = ()
    period: str | None = None  # the quarter of a `quarterly` campaign
    # Multi-fidelity: the search runs on screen.backend, then its best configs on `backend`.
    screen: mf.Screening | None = None
    # Measured beside the confirmation, outside the search (autotune.campaign.study.confirmation).
    compare: tuple[Reference, ...] = ()
    # Set on the Optuna study (e.g. a path campaign's path and parent, autotune.campaign.per_path).
    study_attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def study_name(self) -> str:
        return f"{self.deployment.name}:{self.campaign}"

    @property
    def search_backend(self) -> str:
        """The backend the sampler's proposals are measured on."""
        return self.screen.backend if self.screen else self.backend

    def options_of(self, backend: str) -> dict[str, Any]:
        return self.screen.options if self.screen and backend == self.screen.backend \
            else self.backend_options

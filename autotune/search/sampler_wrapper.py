"""A sampler around another, and the configs a study's trials hold, which autotune's wrappers
(samplers.py, line_sweep.py) read to propose configs no trial holds yet."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

# A trial in these states holds its config: measured, being measured, or queued to be.
TAKEN_STATES = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)
Key = tuple[tuple[str, Any], ...]


def key_of(params: Mapping[str, Any]) -> Key:
    """A config's parameters as a set member: what tells two trials' configs apart."""
    return tuple(sorted(params.items()))


class SamplerWrapper(BaseSampler):
    """A sampler around another (`inner`) that hands it every call it does not change."""

    def __init__(self, inner: BaseSampler) -> None:
        self._inner = inner

    @property
    def inner(self) -> BaseSampler:
        return self._inner

    def infer_relative_search_space(self, study: Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self._inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self._inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._inner.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._inner.before_trial(study, trial)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._inner.reseed_rng()

"""Samplers by name, for `autotune tune --sampler`.

- `tpe` (default): Optuna's multivariate TPE with grouped (conditional) parameters, after a line
  sweep from the best reference (`LineSweep`, line_sweep.py). It reads the constraints every
  trial reports (`trial.set_constraint`), so crashes, start failures, SLO misses and rule
  breakers steer it away; a constant liar keeps parallel asks apart. Numeric choices are ordered
  (`OrdinalParzenEstimator`): a good `max_num_seqs` 512 makes 256 and 1024 likelier too,
  where Optuna's categorical kernel knows only "512" and "not 512".
- `gp`: Optuna's GPSampler (a Gaussian process with constrained expected improvement), for small
  budgets, after the same line sweep. It reads the same constraints. It needs PyTorch and
  SciPy, optional dependencies (`pip install 'autotune[gp]'`): the tuner itself does not, and a
  plain `torch` install pulls a multi-gigabyte CUDA build onto machines that only run the tuner.
- `random`: uniform over the space; ignores constraints (a baseline).
- Both model-based samplers propose distinct configs (`DistinctProposals`): over a discrete
  space they converge on their current best and propose it again and again, and every repeat
  costs an ask and adds a duplicate point to their model. A repeated proposal is re-drawn a
  few times and otherwise replaced by an unmeasured neighbour (one parameter one step away),
  which is local search around what the model thinks best.
- Both model-based samplers start with a line sweep (`LineSweep`) instead of random draws: a
  coordinate search from the best config measured so far (at first the best reference: vLLM's
  defaults, vLLM's recipe, the guide's heuristic, last quarter's winner), one argument at a
  time, the parallel layout, step budget and sequence count first; the sequence count before
  the layout where the best reference's TPOT ceiling bound it with enough requests in flight
  for a smaller count to cut its batch (`line_sweep.count_reach`). Random start-up draws turn
  off half the optimisations vLLM enables by default, so few land where the knobs that matter
  can be judged.
- `grid`: vLLM's auto-tune script: a grid over `max_num_seqs` x `max_num_batched_tokens` (the
  space's grid values of those two, see `Param.grid`), every other argument at the baseline's
  value (vLLM's defaults for proposals). Points are visited in a seeded random order rather
  than the script's nested loops, which is kinder to the grid when the budget ends before it
  does; points with `max_num_batched_tokens < max_num_seqs` are rejected by the rules, free.
"""

from __future__ import annotations

import importlib.util
import random
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import BaseSampler, GridSampler
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator, _ParzenEstimatorParameters
from optuna.samplers._tpe.probability_distributions import (
    _BatchedCategoricalDistributions,
    _BatchedDistributions,
)
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import ConfigError, SettingError
from autotune.search.line_sweep import LineSweep
from autotune.search.sampler_wrapper import TAKEN_STATES, Key, SamplerWrapper, key_of
from autotune.search.spaces import SearchSpace, is_ordinal

SAMPLERS = ("tpe", "gp", "random", "grid")
DEFAULT_SAMPLER = "tpe"
GRID_PARAMS = ("max_num_seqs", "max_num_batched_tokens")
# Trials sampled independently (references included) before the model-based samplers model
# anything, where the line sweep has no feasible config to start from; chosen on
# benchmarks/search_efficiency.py (see docs/benchmarks/search-efficiency.md).
STARTUP_TRIALS = 6
# How far a measured choice's kernel reaches along an ordered list of choices, in list
# positions: at 1 most of its weight stays on the choice and its two neighbours. Chosen on
# benchmarks/search_efficiency.py (see docs/benchmarks/search-efficiency.md).
ORDINAL_BANDWIDTH = 1.0
REDRAWS = 3  # fresh draws from the model before a repeated proposal is replaced by a neighbour
MAX_NEIGHBOURS = 5000  # configs looked at for a free neighbour before a repeat is let through


@dataclass(frozen=True)
class SamplerPlan:
    """A sampler and the space it proposes from (the grid sampler's is the grid's two axes)."""

    name: str
    sampler: BaseSampler
    space: SearchSpace


class _AskTellGridSampler(GridSampler):
    """GridSampler that does not call `study.stop()` when the grid is exhausted: that only
    works inside `study.optimize`, and the controller keeps its own budget."""

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        return None


class OrdinalParzenEstimator(_ParzenEstimator):
    """TPE's density estimator, with a kernel over ordered numeric choices that spreads each
    observation's weight to the neighbouring choices (a Gaussian in list positions), as
    Optuna 4's `categorical_distance_func` did before Optuna 5 removed it. Engine arguments
    are mostly numbers offered as a few choices (powers of two) where capacity moves smoothly
    with position: with the plain categorical kernel, 20-40 trials are too few to learn that.

    Plugged in through TPESampler's `_parzen_estimator_cls`, the extension point Optuna's
    sampler keeps for this; tests/search/test_samplers.py fails if an Optuna release moves it.
    """

    def _calculate_categorical_distributions(
            self, observations: np.ndarray, param_name: str,
            search_space: CategoricalDistribution,
            parameters: _ParzenEstimatorParameters) -> _BatchedDistributions:
        choices = search_space.choices
        if len(observations) == 0 or not is_ordinal(choices):
            return super()._calculate_categorical_distributions(
                observations, param_name, search_space, parameters)
        observed = observations.astype(int)
        positions = np.arange(len(choices))
        kernels = np.exp(-0.5 * ((positions[None, :] - observed[:, None])
                                 / ORDINAL_BANDWIDTH) ** 2)
        kernels /= kernels.sum(axis=1, keepdims=True)
        n_kernels = len(observed) + 1  # and the prior, uniform over the choices
        weights = np.full((n_kernels, len(choices)), parameters.prior_weight / n_kernels)
        weights[:len(observed)] += kernels
        weights /= weights.sum(axis=1, keepdims=True)
        return _BatchedCategoricalDistributions(weights)


class DistinctProposals(SamplerWrapper):
    """A model-based sampler that proposes configs no trial holds yet (see the module notes).

    Only the relative (model-based) proposal is checked: during the independent start-up
    trials repeats are rare and cheap. A config is its active parameters (a conditional one
    counts only where its condition holds), compared with the parameters of every trial that
    is measured, running or queued, so parallel asks stay apart too."""

    def __init__(self, inner: BaseSampler, space: SearchSpace, *, seed: int) -> None:
        super().__init__(inner)
        self._space = space
        self._rng = random.Random(seed)

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        params = self._inner.sample_relative(study, trial, search_space)
        if not params:
            return params
        taken = {key_of(t.params) for t in study.get_trials(deepcopy=False, states=TAKEN_STATES)}
        for _ in range(REDRAWS):
            if self._key(params) not in taken:
                return params
            params = self._inner.sample_relative(study, trial, search_space)
        if self._key(params) not in taken:
            return params
        return self._neighbour(params, search_space, taken) or params  # the space is spent

    def reseed_rng(self) -> None:
        self._inner.reseed_rng()
        self._rng.seed()

    def _key(self, params: dict[str, Any]) -> Key | None:
        """The config these parameters make (active ones only); None if one is missing."""
        chosen: dict[str, Any] = {}
        for p in self._space.params:
            if self._space.is_active(p, chosen):
                if p.name not in params:
                    return None  # sampled later, independently: cannot tell
                chosen[p.name] = params[p.name]
        return key_of(chosen)

    def _neighbour(self, params: dict[str, Any], search_space: dict[str, BaseDistribution],
                   taken: set[Key]) -> dict[str, Any] | None:
        """The nearest config no trial holds: breadth-first over one-parameter steps, at
        random within each distance, up to MAX_NEIGHBOURS candidates looked at."""
        shell, visited = [params], {self._key(params)}
        while shell and len(visited) < MAX_NEIGHBOURS:
            moves = [{**base, name: value} for base in shell
                     for name, dist in search_space.items() if name in base
                     for value in _steps(dist, base[name])]
            self._rng.shuffle(moves)
            shell = []
            for candidate in moves:
                key = self._key(candidate)
                if key is None or key in visited:
                    continue
                if key not in taken:
                    return candidate
                visited.add(key)
                shell.append(candidate)
        return None


def _steps(dist: BaseDistribution, value: Any) -> list[Any]:
    """The values one step from `value`: the next choices in the listed order (spaces list
    numbers in ascending order), or one step (a tenth of the range without one) either way."""
    if isinstance(dist, CategoricalDistribution):
        i = dist.choices.index(value)
        return [dist.choices[j] for j in (i - 1, i + 1) if 0 <= j < len(dist.choices)]
    if isinstance(dist, IntDistribution | FloatDistribution):
        if dist.log:
            factor = (dist.high / dist.low) ** 0.1
            out = [value / factor, value * factor]
        else:
            step = dist.step or (dist.high - dist.low) / 10
            out = [value - step, value + step]
        out = [v for v in out if dist.low <= v <= dist.high]
        # Back onto the distribution's grid: Optuna drops a relative value it does not contain.
        return [round(v) if isinstance(dist, IntDistribution) else round(v, 9) for v in out]
    return []


def step_decimals(step: float) -> int:
    """The decimal places a step is written with: 0.01 -> 2, 0.05 -> 2, 0.5 -> 1, 2.0 -> 0."""
    exponent = Decimal(repr(float(step))).normalize().as_tuple().exponent
    return max(0, -int(exponent))


class RoundToStep(SamplerWrapper):
    """A sampler whose values of a stepped float are written as their step is (0.87, not
    0.8700000000000001). Optuna's samplers put such a value at `low + k * step` in binary
    floating point, and it is stored, shown in the dashboard and passed to vLLM as it came.
    The rounded value is the same point of the grid (Optuna's FloatDistribution._contains
    allows 1e-8 off a step), so the samplers learn the same."""

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        params = self._inner.sample_relative(study, trial, search_space)
        return {name: _rounded(search_space.get(name), value) for name, value in params.items()}

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return _rounded(param_distribution, self._inner.sample_independent(
            study, trial, param_name, param_distribution))


def _rounded(dist: BaseDistribution | None, value: Any) -> Any:
    if isinstance(dist, FloatDistribution) and dist.step is not None:
        return round(float(value), step_decimals(dist.step))
    return value


def grid_space(space: SearchSpace) -> SearchSpace:
    """The `grid` sampler's space: the search space reduced to GRID_PARAMS."""
    missing = [n for n in GRID_PARAMS if n not in space.param_names]
    if missing:
        raise SettingError("{sampler} grid searches {params}; search space {space!r} lacks "
                           "{missing}", params=" x ".join(GRID_PARAMS), space=space.name,
                           missing=", ".join(missing))
    return space.restricted(GRID_PARAMS)


def make_sampler(name: str, space: SearchSpace, *, seed: int, parallel: int = 1) -> SamplerPlan:
    """The named sampler over a (bound) space. Unknown names are a ConfigError."""
    if name == "tpe":
        with warnings.catch_warnings():  # `group` (conditional parameters) is "experimental"
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            tpe = optuna.samplers.TPESampler(
                seed=seed, multivariate=True, group=True, constant_liar=parallel > 1,
                n_startup_trials=STARTUP_TRIALS)
        tpe._parzen_estimator_cls = OrdinalParzenEstimator
        return SamplerPlan(name, RoundToStep(LineSweep(DistinctProposals(tpe, space, seed=seed),
                                                       space, seed=seed)), space)
    if name == "gp":
        # Both are imported lazily by Optuna, only once the GP models something: check now.
        missing = [m for m in ("torch", "scipy") if importlib.util.find_spec(m) is None]
        if missing:
            raise SettingError("{sampler} gp needs {missing} (Optuna's GPSampler runs on "
                               "them): pip install 'autotune[gp]' (torch==2.13.0, a CPU wheel, "
                               "and scipy), or choose {sampler} tpe",
                               missing=" and ".join(missing))
        gp = optuna.samplers.GPSampler(seed=seed, n_startup_trials=STARTUP_TRIALS)
        return SamplerPlan(name, RoundToStep(LineSweep(DistinctProposals(gp, space, seed=seed),
                                                       space, seed=seed)), space)
    if name == "random":
        return SamplerPlan(name, RoundToStep(optuna.samplers.RandomSampler(seed=seed)), space)
    if name == "grid":
        grid = grid_space(space)
        axes = {p.name: list(p.grid()) for p in grid.params}
        return SamplerPlan(name, _AskTellGridSampler(axes, seed=seed), grid)  # type: ignore[arg-type]
    raise ConfigError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")

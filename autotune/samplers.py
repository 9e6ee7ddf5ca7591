"""Samplers by name, for `autotune tune --sampler`.

- `tpe` (default): Optuna's multivariate TPE with grouped (conditional) parameters. It reads the
  constraints every trial reports (`trial.set_constraint`), so crashes, start failures, SLO
  misses and rule breakers steer it away; a constant liar keeps parallel asks apart.
- `gp`: Optuna's GPSampler (a Gaussian process with constrained expected improvement), for small
  budgets. It reads the same constraints. It needs PyTorch, an optional dependency
  (`pip install 'autotune[gp]'`): the tuner itself does not, and a plain `torch` install pulls
  a multi-gigabyte CUDA build onto machines that only run the tuner.
- `random`: uniform over the space; ignores constraints (a baseline).
- `grid`: vLLM's auto-tune script: a grid over `max_num_seqs` x `max_num_batched_tokens` (the
  space's grid values of those two, see `Param.grid`), every other argument at the baseline's
  value (vLLM's defaults for proposals). Points are visited in a seeded random order rather
  than the script's nested loops, which is kinder to the grid when the budget ends before it
  does; points with `max_num_batched_tokens < max_num_seqs` are rejected by the rules, free.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import optuna
from optuna.samplers import BaseSampler, GridSampler
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import ConfigError
from search_spaces import SearchSpace

SAMPLERS = ("tpe", "gp", "random", "grid")
DEFAULT_SAMPLER = "tpe"
GRID_PARAMS = ("max_num_seqs", "max_num_batched_tokens")
# Trials sampled independently (baselines included) before the model-based samplers model
# anything: with budgets of 20-40 trials, about a fifth of the budget.
STARTUP_TRIALS = 8


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


def grid_space(space: SearchSpace) -> SearchSpace:
    """The `grid` sampler's space: the search space reduced to GRID_PARAMS."""
    missing = [n for n in GRID_PARAMS if n not in space.param_names]
    if missing:
        raise ConfigError(f"--sampler grid searches {' x '.join(GRID_PARAMS)}; search space "
                          f"{space.name!r} lacks {', '.join(missing)}")
    return space.restricted(GRID_PARAMS)


def make_sampler(name: str, space: SearchSpace, *, seed: int, parallel: int = 1) -> SamplerPlan:
    """The named sampler over a (bound) space. Unknown names are a ConfigError."""
    if name == "tpe":
        with warnings.catch_warnings():  # `group` (conditional parameters) is "experimental"
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            tpe = optuna.samplers.TPESampler(
                seed=seed, multivariate=True, group=True, constant_liar=parallel > 1,
                n_startup_trials=STARTUP_TRIALS)
        return SamplerPlan(name, tpe, space)
    if name == "gp":
        if importlib.util.find_spec("torch") is None:
            raise ConfigError("--sampler gp needs PyTorch (Optuna's GPSampler runs on it): "
                              "pip install 'autotune[gp]' (torch==2.13.0, a CPU wheel), or "
                              "choose --sampler tpe")
        return SamplerPlan(name, optuna.samplers.GPSampler(
            seed=seed, n_startup_trials=STARTUP_TRIALS), space)
    if name == "random":
        return SamplerPlan(name, optuna.samplers.RandomSampler(seed=seed), space)
    if name == "grid":
        grid = grid_space(space)
        axes = {p.name: list(p.grid()) for p in grid.params}
        return SamplerPlan(name, _AskTellGridSampler(axes, seed=seed), grid)  # type: ignore[arg-type]
    raise ConfigError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")

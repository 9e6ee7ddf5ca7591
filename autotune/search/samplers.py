"""Samplers by name, for `autotune tune --sampler`.

- `tpe` (default): Optuna's multivariate TPE with grouped (conditional) parameters, after a line
  sweep from the best reference (`LineSweep`, below). It reads the constraints every trial
  reports (`trial.set_constraint`), so crashes, start failures, SLO misses and rule breakers
  steer it away; a constant liar keeps parallel asks apart. Numeric choices are ordered
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
  for a smaller count to cut its batch (`LineSweep._reach`). Random start-up draws turn off
  half the optimisations vLLM enables by default, so few land where the knobs that matter
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

from autotune.domain import optuna_keys as keys
from autotune.domain.parallelism import PARAM as PARALLELISM
from autotune.domain.parallelism import Strategy
from autotune.errors import ConfigError, SettingError
from autotune.search.objective import is_feasible
from autotune.search.spaces import SearchSpace

SAMPLERS = ("tpe", "gp", "random", "grid")
DEFAULT_SAMPLER = "tpe"
GRID_PARAMS = ("max_num_seqs", "max_num_batched_tokens")
# Trials sampled independently (references included) before the model-based samplers model
# anything, where the line sweep has no feasible config to start from. On
# benchmarks/search_efficiency.py with the ordinal kernel and random start-up (seeds 0-19), 2, 3,
# 4 and 6 all reached 98% of the chat-like optimum by trial 30 in 17-18 of 20 seeds.
STARTUP_TRIALS = 6
# The line sweep's first axes, those that moved capacity most on benchmarks/search_efficiency.py:
# the parallel layout (the whole engine changes with it), then the two knobs vLLM's auto-tune
# script grids over, the step budget first. The sequence count goes first where it can relieve
# the ceiling that bound the best reference (LineSweep._reach).
SWEEP_AXES = (PARALLELISM, "max_num_batched_tokens", "max_num_seqs")
# A smaller sequence count trades TTFT for TPOT (the requests it turns away queue): the sweep
# moves it first only where every ceiling but the decode-latency one that bound was at most
# this share used at capacity (LineSweep._reach). On benchmarks/search_efficiency.py the
# chat-like traces' references used 7-18% of TTFT's; the guide's heuristic on one
# document-like trace used TPOT's and TTFT's both to the full, and there the count changed
# nothing.
COUNT_TRADE_HEADROOM = 0.5
# The sweep proposes while fewer trials than this are complete (references and rule breakers
# included), then the model takes over; it stops earlier where no step of any layout's best
# config is left to try. On benchmarks/search_efficiency.py the runner-up layouts' searches,
# which come after the incumbent's, reached the optimum of seed 1's document-like trace at
# trial 30, past a cap of 30.
SWEEP_TRIALS = 40
# A range (int or float) is swept over this many evenly spaced points, ends included.
SWEEP_POINTS = 5
# A measured step within this share of the best does not end a line: the walk goes on past it.
SWEEP_TOLERANCE = 0.01
# How far a measured choice's kernel reaches along an ordered list of choices (in list
# positions): at 1, about 40% of a kernel's weight stays on its choice, a quarter goes to each
# neighbour and 5% to each choice two away. On benchmarks/search_efficiency.py (held-out seeds
# 20-59) 37 of 40 seeds reached 98% of the chat-like optimum by trial 30 at 1 (2 and 0.5 were
# no better), against 9 of 20 with Optuna's categorical kernel.
ORDINAL_BANDWIDTH = 1.0
REDRAWS = 3  # fresh draws from the model before a repeated proposal is replaced by a neighbour
MAX_NEIGHBOURS = 5000  # configs looked at for a free neighbour before a repeat is let through
# A trial in these states holds its config: measured, being measured, or queued to be.
_TAKEN_STATES = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)
Key = tuple[tuple[str, Any], ...]


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


def is_ordinal(choices: Sequence[Any]) -> bool:
    """Numbers listed in ascending order (booleans and strings are plain categories)."""
    numbers = all(isinstance(c, int | float) and not isinstance(c, bool) for c in choices)
    return numbers and list(choices) == sorted(choices)


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


class _Wrapper(BaseSampler):
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


class DistinctProposals(_Wrapper):
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
        taken = {tuple(sorted(t.params.items()))
                 for t in study.get_trials(deepcopy=False, states=_TAKEN_STATES)}
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
        return tuple(sorted(chosen.items()))

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


class LineSweep(_Wrapper):
    """The model-based samplers' start-up: a coordinate search from the best feasible config
    measured so far. The axes are SWEEP_AXES (the sequence count moved to the front where it
    can relieve what bound the best reference: `_reach`), then the space's other parameters
    in a seeded order. On each axis the incumbent's next values (`_line`) are tried until every one is
    measured; a better one becomes the incumbent and the line goes on from it. Then the next
    axis, round all of them again for as long as the incumbent changes; then the same from
    the best config of each other parallel layout, its layout held.

    It keeps no state of its own: the incumbent, the configs already held (measured, running
    or queued) and the axis each sweep trial moved (a system attribute) are read from the
    study, so a resumed campaign continues the sweep and parallel asks get distinct configs.
    Enqueued trials (references, re-queued ones) are left as they are. Without a feasible
    config, or once the sweep is done or SWEEP_TRIALS trials are complete, the inner sampler
    proposes, with its own start-up."""

    def __init__(self, inner: BaseSampler, space: SearchSpace, *, seed: int,
                 max_trials: int = SWEEP_TRIALS) -> None:
        super().__init__(inner)
        self._space, self._max_trials = space, max_trials
        rest = [n for n in space.param_names if n not in SWEEP_AXES]
        random.Random(seed).shuffle(rest)
        self._axes = [n for n in SWEEP_AXES if n in space.param_names] + rest
        self._plans: dict[int, dict[str, Any]] = {}  # trial number -> the config it runs

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._inner.before_trial(study, trial)
        plan = self._plan(study, trial)
        if plan is not None:
            self._plans[trial.number] = plan

    def _plan(self, study: Study, trial: FrozenTrial) -> dict[str, Any] | None:
        """The config this trial runs (marking the axis it moves), or None: not a sweep trial."""
        if "fixed_params" in trial.system_attrs:
            return None
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        best = _incumbent(complete)
        if best is None or len(complete) >= self._max_trials:
            return None
        held = study.get_trials(deepcopy=False, states=_TAKEN_STATES)
        taken = {tuple(sorted(t.params.items())) for t in held}
        # Asked but not yet suggested: their parameters are not in the study yet.
        taken |= {tuple(sorted(p.items())) for p in self._plans.values()}
        measured = {tuple(sorted(t.params.items())): _value(t) for t in complete}
        moved = [t.system_attrs[keys.SWEEP_AXIS] for t in held
                 if keys.SWEEP_AXIS in t.system_attrs]
        reach = self._reach(complete)
        axes = self._axes_for(reach)
        start = axes.index(moved[-1]) if moved and moved[-1] in axes else 0
        # Round the axes from the last one moved, as often as the incumbent changes. Where no
        # axis has an unmeasured step that the walk reaches, the search goes on from the best
        # config of each other parallel layout in turn (its layout held): each layout is its
        # own engine with its own best batch shape, and a runner-up layout judged at the
        # incumbent's arguments may beat it at its own.
        for base in _layout_bests(complete, best):
            floor = (1 - SWEEP_TOLERANCE) * _value(base)
            for name in axes[start:] + axes[:start]:
                if name not in base.params or (name == PARALLELISM and base is not best):
                    continue  # inactive there, or the layout a runner-up is searched within
                for params in self._line(base.params, name, measured, floor, reach):
                    if tuple(sorted(params.items())) not in taken:
                        study._storage.set_trial_system_attr(trial._trial_id, keys.SWEEP_AXIS,
                                                             name)
                        return params
        return None

    def _reach(self, complete: Sequence[FrozenTrial]) -> float | None:
        """The requests in flight the engine reached at capacity (all DP ranks), where the
        best reference (the best trial the sweep did not propose) shows that a smaller
        sequence count can relieve what bound it; else None.

        That is the case where a decode-latency ceiling (TPOT or ITL) was used more than any
        other, every other ceiling was at most COUNT_TRADE_HEADROOM used, and the engine held
        more requests per DP rank than twice the smallest count the space offers, so that
        some count cuts its batch at least in half: fewer running sequences make each step
        shorter and queue the rest (vllm/v1/core/sched/scheduler.py, Scheduler.schedule
        admits at most max_num_seqs running requests), spending TTFT's headroom on TPOT. A
        count above the requests the engine reached changes nothing, so the count that can
        matter is near that peak. On benchmarks/search_efficiency.py's chat-like traces
        (TPOT-bound, 200-300 requests in flight at vLLM's defaults) the count moved capacity
        by half; on the document-like ones (prefill-stalled, under 75 in flight) not at all."""
        reference = _incumbent([t for t in complete if keys.SWEEP_AXIS not in t.system_attrs])
        seqs = "max_num_seqs"
        if reference is None or seqs not in self._space.param_names:
            return None
        use = reference.user_attrs.get(keys.SLO_USE) or {}
        peak = reference.user_attrs.get(keys.PEAK_IN_FLIGHT)
        if not use or peak is None:
            return None
        bound = max(use, key=lambda k: use[k])
        if not bound.startswith(("tpot", "itl")) or any(
                v > COUNT_TRADE_HEADROOM for k, v in use.items() if k != bound):
            return None
        dist = self._space.param(seqs).distribution()
        counts = (dist.choices if isinstance(dist, CategoricalDistribution)
                  else [dist.low])  # type: ignore[attr-defined]
        smallest = min(float(c) for c in counts if isinstance(c, int | float))
        ranks = (Strategy.parse(str(reference.params[PARALLELISM])).data_parallel_size
                 if PARALLELISM in reference.params else 1)
        return float(peak) if float(peak) / ranks >= 2 * smallest else None

    def _axes_for(self, reach: float | None) -> list[str]:
        """The sweep's axis order: SWEEP_AXES (the layout first), or the sequence count first
        where it can relieve the ceiling that bound the best reference (`_reach`)."""
        seqs = "max_num_seqs"
        if reach is None:
            return self._axes
        first = [seqs, *(a for a in SWEEP_AXES if a != seqs)]
        return [a for a in first if a in self._axes] + [a for a in self._axes if a not in first]

    def _line(self, base: dict[str, Any], name: str, measured: dict[Key, float],
              floor: float, reach: float | None = None) -> list[dict[str, Any]]:
        """The configs a line search along `name` tries next from `base`: on an ordered axis,
        in each direction, the first unmeasured value past the measured ones that are within
        SWEEP_TOLERANCE of the best (a plateau is walked across rather than ending the line:
        above the load a trace offers, more sequences change nothing until they are too
        many); on an unordered axis, every other choice."""
        dist = self._space.param(name).distribution()
        values = _line_values(dist, base[name])
        moves = [self._active(self._move(base, name, v, reach)) for v in values]
        if name == PARALLELISM:
            # Every layout at its first cap before any layout at its second: a layout's first
            # judgement is its fairest (`_with_prefill_caps`), and with 3 caps each, 4 layouts
            # judged cap by cap took 10 trials to reach the last one.
            variants = [self._with_prefill_caps(move, measured) for move in moves]
            width = max((len(v) for v in variants), default=0)
            ordered = [v[i] for i in range(width) for v in variants if i < len(v)]
            return [m for m in ordered if not self._judged(m, measured)]
        if not _ordered(dist):
            return moves
        i = values.index(base[name])
        out = []
        for step in (1, -1):
            j = i + step
            while 0 <= j < len(values):
                value = measured.get(tuple(sorted(moves[j].items())))
                if value is None:
                    out.append(moves[j])
                    break
                if value < floor:
                    break
                j += step
        return out

    @staticmethod
    def _judged(move: dict[str, Any], measured: dict[Key, float]) -> bool:
        """Whether a layout move's layout was measured with the move's other arguments, its
        prefill cap aside where its ranks do not step in lockstep (there each cap is a
        judgement of its own). Without it a better cap on one lockstep layout would send the
        sweep back to every other layout."""
        coupled = set() if _lockstep(move[PARALLELISM]) else {"long_prefill_token_threshold"}
        rest = {k: v for k, v in move.items() if k not in coupled}
        return any(all(dict(key).get(k) == v for k, v in rest.items()) for key in measured)

    def _with_prefill_caps(self, move: dict[str, Any],
                           measured: dict[Key, float]) -> list[dict[str, Any]]:
        """A move to a layout whose DP ranks step in lockstep (an MoE model's DP ranks:
        vllm/v1/engine/core.py, run_engine_core starts DPEngineCoreProc for them) with each
        long-prefill cap the space offers, the tightest first and none (0) last: there one
        rank's long prefill holds every rank's decode for the whole step, so the layout is
        only judged fairly with its prefills chunked. Judged at the caller's cap alone, DP8+EP
        was the worst layout on benchmarks/search_efficiency.py's document-like trace and,
        capped at 512 tokens, the best by a third."""
        cap = "long_prefill_token_threshold"
        if not _lockstep(move[PARALLELISM]) or cap not in move:
            return [move]
        # Once a layout was judged with each cap, it is judged again only at its best one.
        caps = _line_values(self._space.param(cap).distribution(), move[cap])
        layout = [(value, dict(key)) for key, value in measured.items()
                  if dict(key).get(PARALLELISM) == move[PARALLELISM] and cap in dict(key)]
        if {m[cap] for _, m in layout} >= set(caps):
            return [self._active({**move, cap: max(layout, key=lambda m: m[0])[1][cap]})]
        tightest_first = sorted((v for v in caps if v), key=float) + [v for v in caps if not v]
        return [self._active({**move, cap: v}) for v in tightest_first]

    def _move(self, base: dict[str, Any], name: str, value: Any,
              reach: float | None = None) -> dict[str, Any]:
        """`base` with `name` set to `value`. A move to another parallel layout keeps the
        deployment's sequence count: `max_num_seqs` is per engine core, and each DP rank is
        one (vllm/v1/core/sched/scheduler.py, Scheduler.__init__: max_num_running_reqs =
        scheduler_config.max_num_seqs, built once per rank's EngineCore), so TP8 at 1024
        compares with DP8 at 128, not at 1024 each (8,192 in all). Where the count binds
        (`reach`: the requests in flight the best reference reached), the move takes the
        smallest count that holds the reached requests spread over the layout's ranks
        instead: a layout judged at a count its engine never reaches is judged in the regime
        where the count cannot help it."""
        params = {**base, name: value}
        seqs = "max_num_seqs"
        if name != PARALLELISM or seqs not in base or seqs not in self._space.param_names:
            return params
        ranks_after = Strategy.parse(str(value)).data_parallel_size
        candidates = [v for v in _line_values(self._space.param(seqs).distribution(),
                                              base[seqs])
                      if isinstance(v, int | float) and v > 0]
        if not candidates:
            return params
        if reach is not None:
            target = reach / ranks_after
            params[seqs] = min((v for v in candidates if v >= target),
                               default=max(candidates))
            return params
        ranks_before = Strategy.parse(str(base[name])).data_parallel_size
        target = float(base[seqs]) * ranks_before / ranks_after
        params[seqs] = min(candidates, key=lambda v: abs(np.log(v / target)))
        return params

    def _active(self, values: dict[str, Any]) -> dict[str, Any]:
        """The parameters active with these values; one a move switches on (a threshold whose
        feature was off) takes its first choice or its low end."""
        params: dict[str, Any] = {}
        for p in self._space.params:
            if self._space.is_active(p, params):
                dist = p.distribution()
                first = dist.choices[0] if isinstance(dist, CategoricalDistribution) else dist.low  # type: ignore[attr-defined]
                params[p.name] = values.get(p.name, first)
        return params

    def infer_relative_search_space(self, study: Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if trial.number in self._plans:
            return {}
        return self._inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if trial.number in self._plans:
            return {}
        return self._inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        plan = self._plans.get(trial.number)
        if plan is not None and param_name in plan:
            return plan[param_name]
        return self._inner.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._plans.pop(trial.number, None)
        self._inner.after_trial(study, trial, state, values)


def _incumbent(complete: Sequence[FrozenTrial]) -> FrozenTrial | None:
    """The best feasible complete trial (infeasible ones are told 0 with a violated constraint)."""
    feasible = [t for t in complete
                if t.value is not None and t.value > 0 and is_feasible(t.constraints)]
    return max(feasible, key=lambda t: t.value, default=None)  # type: ignore[arg-type,return-value]


def _layout_bests(complete: Sequence[FrozenTrial], best: FrozenTrial) -> list[FrozenTrial]:
    """The incumbent, then the best feasible config of each other parallel layout, best
    first (only the incumbent where the space has no layout to choose)."""
    if PARALLELISM not in best.params:
        return [best]
    by_layout: dict[Any, FrozenTrial] = {best.params[PARALLELISM]: best}
    for t in sorted(complete, key=_value, reverse=True):
        if _value(t) > 0 and PARALLELISM in t.params:
            by_layout.setdefault(t.params[PARALLELISM], t)
    return [best] + sorted((t for t in by_layout.values() if t is not best), key=_value,
                           reverse=True)


def _lockstep(layout: Any) -> bool:
    """Whether a layout's DP ranks step in lockstep: an MoE model's (expert parallelism is
    only offered for one) with more than one DP rank."""
    strategy = Strategy.parse(str(layout))
    return strategy.data_parallel_size > 1 and strategy.expert_parallel


def _value(trial: FrozenTrial) -> float:
    """A complete trial's capacity, 0 where it was infeasible."""
    return float(trial.value or 0.0) if is_feasible(trial.constraints) else 0.0


def _ordered(dist: BaseDistribution) -> bool:
    return (isinstance(dist, IntDistribution | FloatDistribution)
            or (isinstance(dist, CategoricalDistribution) and is_ordinal(dist.choices)))


def _line_values(dist: BaseDistribution, value: Any) -> list[Any]:
    """The values a line search visits along one axis, `value` among them: the choices in
    their listed order, or SWEEP_POINTS evenly spaced points (log-spaced on a log range) of a
    range, ends included."""
    if isinstance(dist, CategoricalDistribution):
        choices = list(dist.choices)
        return choices if value in choices else [value, *choices]
    if isinstance(dist, IntDistribution | FloatDistribution):
        shares = [k / (SWEEP_POINTS - 1) for k in range(SWEEP_POINTS)]
        points = {_on_grid(dist, dist.low * (dist.high / dist.low) ** f if dist.log
                           else dist.low + (dist.high - dist.low) * f) for f in shares}
        return sorted(points | {value})
    return [value]


def _on_grid(dist: IntDistribution | FloatDistribution, value: float) -> float:
    """`value` rounded onto the distribution's steps (Optuna rejects a value off them)."""
    step = dist.step or (1 if isinstance(dist, IntDistribution) else None)
    if step:
        value = dist.low + round((value - dist.low) / step) * step
    return round(value) if isinstance(dist, IntDistribution) else round(min(value, dist.high), 9)


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


class RoundToStep(_Wrapper):
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

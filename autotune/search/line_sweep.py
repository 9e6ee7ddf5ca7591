"""The model-based samplers' start-up: a line sweep, a coordinate search from the best feasible
config measured so far, one parameter at a time.

The sweep knows the parameters that matter by their role in the space (search/spaces/roles.py):
the parallel layout, the step budget, the sequence count and the long-prefill cap. Its parts:
`LineSweep`, the sampler that hands a trial its planned config; `_next_move`, the first config
no trial holds along the axes from each layout's best; `_Axes`, their order; `count_reach`, when
the sequence count goes first; `_Lines`, the configs a line along one axis tries next (a
layout's moves keeping the requests in flight and judged at each long-prefill cap).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from autotune.domain import optuna_keys as keys
from autotune.domain.parallelism import Strategy
from autotune.search.objective import is_feasible
from autotune.search.sampler_wrapper import TAKEN_STATES, Key, SamplerWrapper, key_of
from autotune.search.spaces import ParamRole, SearchSpace, is_ordinal

# The line sweep's first axes, those that moved capacity most on benchmarks/search_efficiency.py:
# the parallel layout (the whole engine changes with it), then the two knobs vLLM's auto-tune
# script grids over, the step budget first. The sequence count goes first where it can relieve
# the ceiling that bound the best reference (count_reach).
SWEEP_ROLES = (ParamRole.LAYOUT, ParamRole.STEP_BUDGET, ParamRole.CONCURRENCY)
# A smaller sequence count trades TTFT for TPOT (the requests it turns away queue): the sweep
# moves it first only where every ceiling but the decode-latency one that bound was at most
# this share used at capacity (count_reach; see docs/benchmarks/search-efficiency.md).
COUNT_TRADE_HEADROOM = 0.5
# The sweep proposes while fewer trials than this are complete (references and rule breakers
# included), then the model takes over; it stops earlier where no step of any layout's best
# config is left to try. Room for the runner-up layouts' searches, which come last (see
# docs/benchmarks/search-efficiency.md).
SWEEP_TRIALS = 40
# A range (int or float) is swept over this many evenly spaced points, ends included.
SWEEP_POINTS = 5
# A measured step within this share of the best does not end a line: the walk goes on past it.
SWEEP_TOLERANCE = 0.01


class LineSweep(SamplerWrapper):
    """The model-based samplers' start-up: a coordinate search from the best feasible config
    measured so far. The axes are the parameters of SWEEP_ROLES (the sequence count moved to
    the front where it can relieve what bound the best reference: `count_reach`), then the
    space's other parameters in a seeded order. On each axis the incumbent's next values
    (`_Lines`) are tried until every one is measured; a better one becomes the incumbent and
    the line goes on from it. Then the next axis, round all of them again for as long as the
    incumbent changes; then the same from the best config of each other parallel layout, its
    layout held.

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
        self._axes, self._lines = _Axes(space, seed), _Lines(space)
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
        held = study.get_trials(deepcopy=False, states=TAKEN_STATES)
        # Asked but not yet suggested: their parameters are not in the study yet.
        taken = {key_of(t.params) for t in held} | {key_of(p) for p in self._plans.values()}
        moved = [t.system_attrs[keys.SWEEP_AXIS] for t in held
                 if keys.SWEEP_AXIS in t.system_attrs]
        reach = count_reach(complete, self._space)
        axes = self._axes.order(reach)
        start = axes.index(moved[-1]) if moved and moved[-1] in axes else 0
        found = _next_move(self._lines, complete, best, axes[start:] + axes[:start], taken, reach)
        if found is None:
            return None
        axis, params = found
        study._storage.set_trial_system_attr(trial._trial_id, keys.SWEEP_AXIS, axis)
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


def _next_move(lines: _Lines, complete: Sequence[FrozenTrial], best: FrozenTrial,
               axes: list[str], taken: Collection[Key],
               reach: float | None) -> tuple[str, dict[str, Any]] | None:
    """The axis and config of the sweep's next trial: the first config no trial holds along
    the axes (in the order given: round from the last one moved, as often as the incumbent
    changes), from the incumbent, then from the best config of each other parallel layout in
    turn (its layout held): each layout is its own engine with its own best batch shape, and a
    runner-up layout judged at the incumbent's arguments may beat it at its own. None: no axis
    has an unmeasured step that the walk reaches."""
    measured = {key_of(t.params): _value(t) for t in complete}
    for base in _layout_bests(complete, best, lines.layout):
        floor = (1 - SWEEP_TOLERANCE) * _value(base)
        for name in axes:
            if name not in base.params or (name == lines.layout and base is not best):
                continue  # inactive there, or the layout a runner-up is searched within
            for params in lines.next(base.params, name, measured, floor, reach):
                if key_of(params) not in taken:
                    return name, params
    return None


class _Axes:
    """The sweep's axis order: the parameters of SWEEP_ROLES (the layout first), then the
    space's others in a seeded order; the sequence count first where it can relieve the
    ceiling that bound the best reference (`count_reach`)."""

    def __init__(self, space: SearchSpace, seed: int) -> None:
        first = [p.name for p in map(space.with_role, SWEEP_ROLES) if p is not None]
        rest = [n for n in space.param_names if n not in first]
        random.Random(seed).shuffle(rest)
        self._order = first + rest
        count = space.with_role(ParamRole.CONCURRENCY)
        self._count = None if count is None else count.name

    def order(self, reach: float | None) -> list[str]:
        if reach is None or self._count is None:
            return self._order
        return [self._count, *(a for a in self._order if a != self._count)]


def count_reach(complete: Sequence[FrozenTrial], space: SearchSpace) -> float | None:
    """The requests in flight the engine reached at capacity (all DP ranks), where the best
    reference (the best trial the sweep did not propose) shows that a smaller sequence count
    can relieve what bound it; else None.

    That is the case where a decode-latency ceiling (TPOT or ITL) was used more than any
    other, every other ceiling was at most COUNT_TRADE_HEADROOM used, and the engine held
    more requests per DP rank than twice the smallest count the space offers, so that
    some count cuts its batch at least in half: fewer running sequences make each step
    shorter and queue the rest (vllm/v1/core/sched/scheduler.py, Scheduler.schedule
    admits at most max_num_seqs running requests), spending TTFT's headroom on TPOT. A
    count above the requests the engine reached changes nothing, so the count that can
    matter is near that peak (docs/benchmarks/search-efficiency.md: where it moved capacity
    and where it did not)."""
    reference = _incumbent([t for t in complete if keys.SWEEP_AXIS not in t.system_attrs])
    count = space.with_role(ParamRole.CONCURRENCY)
    if reference is None or count is None:
        return None
    use = reference.user_attrs.get(keys.SLO_USE) or {}
    peak = reference.user_attrs.get(keys.PEAK_IN_FLIGHT)
    if not use or peak is None or not _decode_bound(use):
        return None
    dist = count.distribution()
    counts = (dist.choices if isinstance(dist, CategoricalDistribution)
              else [dist.low])  # type: ignore[attr-defined]
    smallest = min(float(c) for c in counts if isinstance(c, int | float))
    layout = space.with_role(ParamRole.LAYOUT)
    ranks = (Strategy.parse(str(reference.params[layout.name])).data_parallel_size
             if layout is not None and layout.name in reference.params else 1)
    return float(peak) if float(peak) / ranks >= 2 * smallest else None


def _decode_bound(use: Mapping[str, float]) -> bool:
    """Whether a decode-latency ceiling (TPOT or ITL) was used most, and every other at most
    COUNT_TRADE_HEADROOM: the case where fewer running sequences can trade TTFT for TPOT."""
    bound = max(use, key=lambda k: use[k])
    return bound.startswith(("tpot", "itl")) and not any(
        v > COUNT_TRADE_HEADROOM for k, v in use.items() if k != bound)


class _Lines:
    """The configs a line search along one axis tries next, from a base config, in a space
    whose layout, sequence count and long-prefill cap are found by role."""

    def __init__(self, space: SearchSpace) -> None:
        self._space = space
        names = {role: p.name for role in ParamRole if (p := space.with_role(role)) is not None}
        self.layout = names.get(ParamRole.LAYOUT)
        self._count = names.get(ParamRole.CONCURRENCY)
        self._cap = names.get(ParamRole.PREFILL_CAP)

    def next(self, base: dict[str, Any], name: str, measured: dict[Key, float],
             floor: float, reach: float | None = None) -> list[dict[str, Any]]:
        """On an ordered axis, in each direction, the first unmeasured value past the measured
        ones that are within SWEEP_TOLERANCE of the best (a plateau is walked across rather
        than ending the line: above the load a trace offers, more sequences change nothing
        until they are too many); on an unordered axis, every other choice; on the layout,
        every other layout (`_layout_moves`)."""
        dist = self._space.param(name).distribution()
        values = _line_values(dist, base[name])
        moves = [self._active(self._move(base, name, v, reach)) for v in values]
        if name == self.layout:
            return self._layout_moves(moves, measured)
        if not _ordered(dist):
            return moves
        return _walk(moves, values.index(base[name]), measured, floor)

    def _layout_moves(self, moves: list[dict[str, Any]],
                      measured: dict[Key, float]) -> list[dict[str, Any]]:
        """Every layout at its first cap before any layout at its second: a layout's first
        judgement is its fairest (`_with_prefill_caps`), and judged cap by cap the last layout
        comes late (docs/benchmarks/search-efficiency.md)."""
        variants = [self._with_prefill_caps(move, measured) for move in moves]
        width = max((len(v) for v in variants), default=0)
        ordered = [v[i] for i in range(width) for v in variants if i < len(v)]
        return [m for m in ordered if not self._judged(m, measured)]

    def _judged(self, move: dict[str, Any], measured: dict[Key, float]) -> bool:
        """Whether a layout move's layout was measured with the move's other arguments, its
        prefill cap aside where its ranks do not step in lockstep (there each cap is a
        judgement of its own). Without it a better cap on one lockstep layout would send the
        sweep back to every other layout."""
        assert self.layout is not None  # a layout move
        coupled = {self._cap} if self._cap and not _lockstep(move[self.layout]) else set()
        rest = {k: v for k, v in move.items() if k not in coupled}
        return any(all(dict(key).get(k) == v for k, v in rest.items()) for key in measured)

    def _with_prefill_caps(self, move: dict[str, Any],
                           measured: dict[Key, float]) -> list[dict[str, Any]]:
        """A move to a layout whose DP ranks step in lockstep (an MoE model's DP ranks:
        vllm/v1/engine/core.py, run_engine_core starts DPEngineCoreProc for them) with each
        long-prefill cap the space offers, the tightest first and none (0) last: there one
        rank's long prefill holds every rank's decode for the whole step, so the layout is
        only judged fairly with its prefills chunked (docs/benchmarks/search-efficiency.md:
        uncapped the worst layout on a document-like trace, capped the best)."""
        layout, cap = self.layout, self._cap
        assert layout is not None  # a layout move
        if cap is None or not _lockstep(move[layout]) or cap not in move:
            return [move]
        # Once a layout was judged with each cap, it is judged again only at its best one.
        caps = _line_values(self._space.param(cap).distribution(), move[cap])
        judged = [(value, dict(key)) for key, value in measured.items()
                  if dict(key).get(layout) == move[layout] and cap in dict(key)]
        if {m[cap] for _, m in judged} >= set(caps):
            return [self._active({**move, cap: max(judged, key=lambda m: m[0])[1][cap]})]
        tightest_first = sorted((v for v in caps if v), key=float) + [v for v in caps if not v]
        return [self._active({**move, cap: v}) for v in tightest_first]

    def _move(self, base: dict[str, Any], name: str, value: Any,
              reach: float | None = None) -> dict[str, Any]:
        """`base` with `name` set to `value`; a move to another parallel layout with the
        sequence count that layout gets (`_count_for_layout`)."""
        params = {**base, name: value}
        if name != self.layout or self._count is None or self._count not in base:
            return params
        count = self._count_for_layout(base, value, reach)
        if count is not None:
            params[self._count] = count
        return params

    def _count_for_layout(self, base: dict[str, Any], layout: Any,
                          reach: float | None) -> Any:
        """A layout move keeps the deployment's sequence count: `max_num_seqs` is per engine
        core, and each DP rank is one (vllm/v1/core/sched/scheduler.py, Scheduler.__init__:
        max_num_running_reqs = scheduler_config.max_num_seqs, built once per rank's
        EngineCore), so TP8 at 1024 compares with DP8 at 128, not at 1024 each (8,192 in all).
        Where the count binds (`reach`: the requests in flight the best reference reached),
        the move takes the smallest count that holds the reached requests spread over the
        layout's ranks instead: a layout judged at a count its engine never reaches is judged
        in the regime where the count cannot help it. None: the space offers no count."""
        assert self.layout is not None and self._count is not None  # a layout move
        count = self._count
        ranks_after = Strategy.parse(str(layout)).data_parallel_size
        candidates = [v for v in _line_values(self._space.param(count).distribution(),
                                              base[count])
                      if isinstance(v, int | float) and v > 0]
        if not candidates:
            return None
        if reach is not None:
            target = reach / ranks_after
            return min((v for v in candidates if v >= target), default=max(candidates))
        ranks_before = Strategy.parse(str(base[self.layout])).data_parallel_size
        target = float(base[count]) * ranks_before / ranks_after
        return min(candidates, key=lambda v: abs(np.log(v / target)))

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


def _walk(moves: list[dict[str, Any]], i: int, measured: dict[Key, float],
          floor: float) -> list[dict[str, Any]]:
    """Along an ordered line from position `i`, in each direction, the first move not yet
    measured, past measured ones at or above `floor`; a measured one below it ends that way."""
    out = []
    for step in (1, -1):
        j = i + step
        while 0 <= j < len(moves):
            value = measured.get(key_of(moves[j]))
            if value is None:
                out.append(moves[j])
                break
            if value < floor:
                break
            j += step
    return out


def _incumbent(complete: Sequence[FrozenTrial]) -> FrozenTrial | None:
    """The best feasible complete trial (infeasible ones are told 0 with a violated constraint)."""
    feasible = [t for t in complete
                if t.value is not None and t.value > 0 and is_feasible(t.constraints)]
    return max(feasible, key=lambda t: t.value, default=None)  # type: ignore[arg-type,return-value]


def _layout_bests(complete: Sequence[FrozenTrial], best: FrozenTrial,
                  layout: str | None) -> list[FrozenTrial]:
    """The incumbent, then the best feasible config of each other parallel layout, best
    first (only the incumbent where the space has no layout to choose)."""
    if layout is None or layout not in best.params:
        return [best]
    by_layout: dict[Any, FrozenTrial] = {best.params[layout]: best}
    for t in sorted(complete, key=_value, reverse=True):
        if _value(t) > 0 and layout in t.params:
            by_layout.setdefault(t.params[layout], t)
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

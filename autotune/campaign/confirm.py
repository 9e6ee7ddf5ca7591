"""Winner confirmation: re-run the best configs with other arrival seeds and pick by a lower
confidence bound, so a lucky single measurement does not become the published config.

After the search, the top K feasible configs (distinct configs, by their search capacity), the
incumbent (when the campaign re-measured one and it met the SLO) and the baselines that met the
SLO in the search are each run R more times, all with the same seeds,
through the same executor as the trials, with replay seeds the search did not use (on the
simulator the seed draws its run-to-run jitter; on real engines it picks the synthesised prompt
ids). The search measurement itself is not a sample: it was selected for being high, so it is
biased upwards (the winner's curse).

Per config, over its n measured runs (a run that misses the SLO counts as capacity 0; a run
lost to the infrastructure is dropped):

    mean, s (sample standard deviation, n - 1), CV = s / mean
    LCB = mean - t(0.90, n - 1) * s / sqrt(n)     (one-sided 90% lower confidence bound)

With fewer than two runs there is no bound and the LCB is 0 (such a config cannot win). The
winner is the config with the highest LCB (ties: higher mean, then the earlier trial).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Student's t quantile (what scipy.stats.t.ppf computes) without importing scipy.stats,
# which adds 0.4 s to every command that reaches this module.
import scipy.special
from sqlalchemy import delete
from sqlalchemy.orm import Session

from autotune.campaign import budget
from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import TrialOutcome
from autotune.domain.trial_record import TrialRecord
from autotune.measure import progress
from autotune.measure.executors import Executor
from autotune.measure.trial_spec import TrialSpec
from autotune.search.objective import is_feasible, outcome_constraints
from autotune.storage import repo
from autotune.storage.models import Campaign, Confirmation, Trial
from autotune.vocabulary import NOT_THE_CONFIG, FailureClass, RecordState, Role

log = logging.getLogger("autotune.confirm")
CONFIDENCE = 0.90


def t90(df: int) -> float:
    """Student's one-sided t quantile t(CONFIDENCE, df)."""
    if df < 1:
        raise ValueError("a t quantile needs at least one degree of freedom")
    return float(scipy.special.stdtrit(df, CONFIDENCE))


@dataclass(frozen=True)
class Stats:
    n: int
    mean: float
    std: float
    cv: float | None
    lcb: float


def stats(samples: Sequence[float]) -> Stats:
    n = len(samples)
    if n == 0:
        return Stats(0, 0.0, 0.0, None, 0.0)
    mean = math.fsum(samples) / n
    if n == 1:
        return Stats(1, mean, 0.0, None, 0.0)  # no spread known: no bound
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in samples) / (n - 1))
    return Stats(n, mean, std, std / mean if mean > 0 else None,
                 max(0.0, mean - t90(n - 1) * std / math.sqrt(n)))


@dataclass(frozen=True)
class Candidate:
    trial_number: int
    role: str
    config: dict[str, Any]  # EngineConfig.explicit()
    search_output_tok_s: float


@dataclass(frozen=True)
class Confirmed:
    candidate: Candidate
    seeds: tuple[int, ...]
    samples: tuple[float | None, ...]  # None: the run was lost (NOT_THE_CONFIG)
    failures: tuple[str | None, ...]
    gpu_hours: float
    stats: Stats
    winner: bool = False


@dataclass(frozen=True)
class ConfirmPlan:
    top: int = 3
    repeats: int = 3
    base_seed: int = 0

    def seeds(self) -> tuple[int, ...]:
        # The search replayed with base_seed; every confirmation run gets another one.
        return tuple(self.base_seed + 1 + r for r in range(self.repeats))


# What candidate selection needs of a finished trial: the one finished-trial type.
TrialRow = TrialRecord


def candidates(trials: Sequence[TrialRecord], top: int, *,
               include_roles: tuple[str, ...] = (Role.INCUMBENT,)) -> list[Candidate]:
    """The top `top` distinct feasible configs by search capacity, plus the first trial of
    each of `include_roles` (the incumbent, the baselines, a path's single config) when it was
    feasible and is not among them: the winner must beat what it would replace, and its gains
    are measured, under the same seeds. A rule-rejected, failed or SLO-missing baseline is not
    confirmed: it has no capacity to confirm."""
    firsts = [t for t in trials if t.feasible and t.state == RecordState.MEASURED and t.repeat_of is None]
    firsts.sort(key=lambda t: (-t.capacity_output_tok_s, t.number))
    picked: list[Candidate] = []
    keys: set[tuple[tuple[str, Any], ...]] = set()

    def add(t: TrialRecord) -> None:
        key = tuple(sorted(t.config.items()))
        if key not in keys:
            keys.add(key)
            picked.append(Candidate(t.number, t.role, dict(t.config), t.capacity_output_tok_s))

    for t in firsts:
        if len(picked) >= top:
            break
        add(t)
    for role in include_roles:
        extra = [t for t in trials if t.role == role and t.feasible and t.state == RecordState.MEASURED]
        if extra and top > 0:
            add(extra[0])
    return picked


def run(executor: Executor, template: TrialSpec, chosen: Sequence[Candidate],
        plan: ConfirmPlan) -> list[Confirmed]:
    """Run every candidate `plan.repeats` times on the (open) executor; returns them with their
    statistics, the best LCB marked as the winner. `template` carries the campaign's trace,
    SLO, backend and capacity search; its study name gets a ':confirm' suffix in the logs."""
    from dataclasses import replace

    seeds = plan.seeds()
    jobs = [(c, i, s) for c in chosen for i, s in enumerate(seeds)]
    specs = {run_id: replace(template, study_name=f"{template.study_name}:confirm",
                             trial_number=run_id, config=EngineConfig(**c.config), seed=s)
             for run_id, (c, _, s) in enumerate(jobs)}
    results: dict[int, TrialOutcome] = {}
    retried: set[int] = set()
    pending = list(specs)
    running = 0

    def event(run_id: int, outcome: TrialOutcome | None = None) -> progress.ConfirmRun:
        c, _, seed = jobs[run_id]
        capacity = None if outcome is None else outcome.capacity_output_tok_s
        return progress.ConfirmRun(specs[run_id].study_name, run_id + 1, len(jobs),
                                   c.trial_number, c.role, seed, capacity,
                                   None if outcome is None else outcome.failure_class)

    while pending or running:
        while pending and running < executor.slots:
            run_id = pending.pop(0)
            progress.emit(event(run_id))
            executor.submit(specs[run_id])
            running += 1
        for outcome in executor.wait():
            running -= 1
            run_id = outcome.trial_number
            if outcome.failure_class == FailureClass.INFRASTRUCTURE and run_id not in retried:
                retried.add(run_id)  # a lost worker says nothing about the config: once more
                pending.insert(0, run_id)
                continue
            results[run_id] = outcome
            progress.emit(event(run_id, outcome))
    confirmed = []
    for c in chosen:
        ids = [run_id for run_id, (cand, _, _) in enumerate(jobs) if cand is c]
        samples: list[float | None] = []
        failures: list[str | None] = []
        gpu_hours = 0.0
        for run_id in ids:
            o = results[run_id]
            gpu_hours += budget.gpu_hours(o.start_s, o.measure_s, specs[run_id].gpus)
            feasible = is_feasible(outcome_constraints(o, template.slo))
            failures.append(o.failure_class or (None if feasible else FailureClass.SLO_MISS))
            samples.append(None if o.failure_class in NOT_THE_CONFIG
                           else o.capacity_output_tok_s if feasible else 0.0)
        s = stats([x for x in samples if x is not None])
        log.info("%s: trial %d (%s) confirmed: mean %.0f, sd %.0f, LCB %.0f output tok/s over %d "
                 "runs", template.study_name, c.trial_number, c.role, s.mean, s.std, s.lcb, s.n)
        confirmed.append(Confirmed(c, seeds, tuple(samples), tuple(failures), gpu_hours, s))
    return mark_winner(confirmed)


def mark_winner(confirmed: Sequence[Confirmed]) -> list[Confirmed]:
    """The same list, the highest LCB marked as the winner (ties: higher mean, then the earlier
    trial); none is marked when no LCB is above 0."""
    from dataclasses import replace

    ranked = sorted(confirmed, key=lambda x: (-x.stats.lcb, -x.stats.mean,
                                              x.candidate.trial_number))
    if not ranked or ranked[0].stats.lcb <= 0:
        return [replace(x, winner=False) for x in confirmed]
    return [replace(x, winner=x is ranked[0]) for x in confirmed]


def save(session: Session, campaign: Campaign, confirmed: Sequence[Confirmed]) -> None:
    """Replace the campaign's confirmation rows (a resumed job confirms afresh) and add the
    runs' GPU time to what the campaign spent; one transaction, so never half-written."""
    session.execute(delete(Confirmation).where(Confirmation.campaign_id == campaign.id))
    by_number = {t.number: t for t in session.query(Trial).filter(
        Trial.campaign_id == campaign.id)}
    for c in confirmed:
        s = c.stats
        session.add(Confirmation(
            campaign_id=campaign.id, trial_id=by_number[c.candidate.trial_number].id,
            role=c.candidate.role, engine_config=dict(c.candidate.config), seeds=list(c.seeds),
            samples=list(c.samples), failures=list(c.failures), n=s.n, mean_output_tok_s=s.mean,
            std_output_tok_s=s.std, cv=s.cv, lcb_output_tok_s=s.lcb, gpu_hours=c.gpu_hours,
            winner=c.winner, created_at=repo.now()))
        campaign.gpu_hours = (campaign.gpu_hours or 0.0) + c.gpu_hours
    session.flush()

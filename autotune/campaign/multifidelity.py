"""Multi-fidelity campaigns: screen the search space on the simulator, measure the best configs
on real engines, and decide on the real measurements only.

`autotune tune --screen sim --confirm vllm --screen-top K` is one campaign and one Optuna study
in two phases:

1. Screening. The study runs as a one-backend campaign would, its `--trials` measured by the
   simulator on the same deployment (GPU profile and catalogue model: for the tiny model on the
   CPU build, the `cpu` profile and `tiny-llama`). Screening trials hold no GPU: they cost no
   GPU-hours.
2. Real measurement. The baselines (vLLM's defaults, the tuning guide's heuristic), the
   incumbent where there is one, and the K best feasible distinct screened configs besides them
   run on the real backend as full trials (capacity search). They are enqueued into the same
   study with their exact configs and told to it with their real capacity, so the dashboard
   and the report show both fidelities side by side: every trial carries a `fidelity` user
   attribute (the backend that measured it) and our rows a `fidelity` column, and a real trial
   names the screening trial it measured (`screen_of`).

Winner confirmation, the winner, publication and the quarterly decision see only the real
trials (`repo.measured_trials`): a simulated capacity is never published as a measurement.

Why the sampler never mixes the two scales. Simulated and real capacities differ by a factor
that depends on how well the simulator is calibrated, so one pooled set of values would rank
one fidelity's trials above all of the other's and say nothing about the space. The sampler
therefore only ever learns from screening: the real phase starts after the last screening
trial, it closes screening first (a study attribute, so a resumed job, or one given a larger
budget, never asks the sampler again), and its trials are enqueued ones that the sampler does
not choose. Feeding the real results back into the search itself (a sampler conditioned on the
fidelity, or a correction fitted on the K pairs) would need more real points than K; the pairs
are kept (`screen_of`) for `autotune sim calibrate`-style checks of the simulator.

Resume. Both phases resume like any campaign (autotune.campaign.study.repair): a dead job's RUNNING trials are
re-queued with their parameters and user attributes, fidelity included. The real phase's plan
is computed again from the stored screening trials (the same rows give the same plan) and each
planned run is enqueued only if no trial holds its tag, so nothing is measured twice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from autotune.domain import optuna_keys as keys
from autotune.domain.trial_record import TrialRecord
from autotune.errors import ConfigError
from autotune.vocabulary import RecordState

log = logging.getLogger("autotune.multifidelity")


@dataclass(frozen=True)
class Screening:
    """The screening phase of a multi-fidelity campaign."""

    backend: str  # a simulated backend (sim)
    top: int  # screened configs measured on the campaign's real backend, besides the baselines
    options: dict[str, Any]  # the screening backend's options


# What the real phase's plan needs of a finished screening trial: the one finished-trial type.
Screened = TrialRecord


@dataclass(frozen=True)
class RealRun:
    """One planned real-engine trial: `tag` names it uniquely within the campaign."""

    tag: str
    role: str
    config: dict[str, Any]  # EngineConfig.explicit()
    screen_of: int | None  # the screening trial of this config, if it ran


def _key(config: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(config.items()))


def plan(screened: Sequence[TrialRecord], top: int, references: Sequence[tuple[str, str]]
         ) -> list[RealRun]:
    """The real phase: each reference role in `references` ((tag, role): the incumbent, then
    the baselines) with its screened config, then the `top` best feasible distinct screened
    configs that are not among them, best first. A reference screening rejected (it breaks an
    error rule) is left out; one that merely missed the SLO in the simulator still runs, as the
    real comparison point."""
    by_role: dict[str, TrialRecord] = {}
    for t in screened:
        if t.repeat_of is None and t.state != RecordState.REJECTED:
            by_role.setdefault(t.role, t)
    runs: list[RealRun] = []
    keys: set[tuple[tuple[str, Any], ...]] = set()
    for tag, role in references:
        ref = by_role.get(role)
        if ref is not None and _key(ref.config) not in keys:
            keys.add(_key(ref.config))
            runs.append(RealRun(f"real:{tag}", role, dict(ref.config), ref.number))
    best = sorted((t for t in screened if t.feasible and t.state == RecordState.MEASURED
                   and t.repeat_of is None), key=lambda t: (-t.capacity_output_tok_s, t.number))
    picked = 0
    for t in best:
        if picked >= top:
            break
        if _key(t.config) in keys:
            continue
        keys.add(_key(t.config))
        runs.append(RealRun(f"real:screen{t.number}", t.role, dict(t.config), t.number))
        picked += 1
    if picked < top:
        log.warning("screening found %d feasible distinct config(s) besides the references, "
                    "fewer than screen_top %d", picked, top)
    return runs


def screening_closed(study: optuna.Study) -> bool:
    return study.user_attrs.get(keys.PHASE) == keys.REAL_PHASE


def close_screening(storage: BaseStorage, study: optuna.Study, screen_backend: str) -> list[int]:
    """End screening for good: a waiting screening trial (re-queued, or enqueued and left when
    the budget stopped the search) is failed and marked, so the real phase's asks only ever
    pop real trials. Safe to repeat; returns the numbers it failed."""
    dropped = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if t.user_attrs.get(keys.FIDELITY, screen_backend) == screen_backend:
            storage.set_trial_system_attr(t._trial_id, keys.SCREENING_CLOSED, True)
            storage.set_trial_user_attr(t._trial_id, "failure_message",
                                        "screening closed before this trial ran")
            storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL)
            dropped.append(t.number)
    study.set_user_attr(keys.PHASE, keys.REAL_PHASE)
    return dropped


def enqueue(study: optuna.Study, runs: Sequence[tuple[RealRun, dict[str, Any]]],
            backend: str) -> int:
    """Enqueue the (run, space parameters) pairs no trial holds the tag of yet; returns how
    many were enqueued. Each carries its exact config (autotune.campaign.study.loop runs it as it is)."""

    tags = {t.user_attrs.get(keys.ENQUEUE_TAG) for t in study.get_trials(deepcopy=False)}
    added = 0
    for run, params in runs:
        if run.tag in tags:
            continue
        attrs: dict[str, Any] = {keys.ROLE: run.role, keys.ENQUEUE_TAG: run.tag,
                                 keys.ENGINE_CONFIG: run.config, keys.FIDELITY: backend}
        if run.screen_of is not None:
            attrs[keys.SCREEN_OF] = run.screen_of
        study.enqueue_trial(params, user_attrs=attrs, skip_if_exists=False)
        added += 1
    return added


def waiting_real(study: optuna.Study, backend: str) -> int:
    """Real trials enqueued (or re-queued) and not yet asked for."""
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    other = [t.number for t in waiting if t.user_attrs.get(keys.FIDELITY) != backend]
    if other:  # close_screening failed them all; anything else is a bug, not a config
        raise ConfigError(f"trials {other} wait in the study of a closed screening; "
                          "this campaign's study was changed outside autotune")
    return len(waiting)

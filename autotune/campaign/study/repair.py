"""What a dead job left in its study, settled; and the trials enqueued once whatever the crash.

Only the owner asks Optuna for trials, so after a takeover every RUNNING trial belongs to the
dead job. Each result is written in the order Optuna attributes, our row, Optuna's tell, so a
RUNNING trial that has our row died between the row and the tell: the tell is replayed from the
row. One without a row never finished: its parameters are enqueued as a new WAITING trial
first (system attr `autotune:retry_of`), and only then is the old trial failed and marked
`autotune:requeued_as` (a crash between the two steps is seen and not enqueued twice). Every
Optuna trial number therefore has one row in autotune_trials, or is FAIL with `requeued_as`.
Optuna's own `fail_stale_trials` fails first and re-queues after, losing the trial if the job
dies in between, and its heartbeats do not run for ask/tell trials; hence this explicit sweep.
"""

from __future__ import annotations

import logging
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from autotune.domain import optuna_keys as keys
from autotune.storage.models import Trial
from autotune.vocabulary import Role

log = logging.getLogger("autotune.resume")


def ensure_baselines(study: optuna.Study, baseline_params: dict[str, dict[str, Any]]) -> None:
    """Enqueue the baselines a study does not hold yet (a job can die between enqueues)."""
    roles = {t.user_attrs.get(keys.ROLE) for t in study.get_trials(deepcopy=False)}
    for role, params in baseline_params.items():
        if role not in roles:
            study.enqueue_trial(params, user_attrs={keys.ROLE: role})


def ensure_references(study: optuna.Study,
                      references: list[tuple[str, str, dict[str, Any], dict[str, Any]]]) -> None:
    """Enqueue the (tag, role, params, exact config) references a study does not hold yet: the
    incumbent and the warm starts. Their exact config rides along as a user attribute, so a
    setting the space does not tune is kept too."""
    tags = {t.user_attrs.get(keys.ENQUEUE_TAG) for t in study.get_trials(deepcopy=False)}
    for tag, role, params, config in references:
        if tag not in tags:
            study.enqueue_trial(params, user_attrs={keys.ROLE: role, keys.ENQUEUE_TAG: tag,
                                                    keys.ENGINE_CONFIG: config})


def requeue(storage: BaseStorage, study: optuna.Study, trial: FrozenTrial) -> int:
    """Fail a trial that never finished, its parameters enqueued again first (or found
    enqueued by an earlier, interrupted requeue); returns the new trial's number."""
    trials = study.get_trials(deepcopy=False)
    earlier = [t.number for t in trials if t.system_attrs.get(keys.RETRY_OF) == trial.number]
    number: int | None = earlier[0] if earlier else None
    if number is None:
        params = dict(trial.system_attrs.get(keys.FIXED_PARAMS) or trial.params)
        template = optuna.trial.create_trial(
            state=TrialState.WAITING, system_attrs={keys.FIXED_PARAMS: params,
                                                    keys.RETRY_OF: trial.number},
            user_attrs={keys.ROLE: trial.user_attrs.get(keys.ROLE, Role.PROPOSED),
                        "retry_of": trial.number,
                        # A reference's exact config (see autotune.campaign.study.loop), and the backend and
                        # screening trial of a multi-fidelity campaign's real trial.
                        **{k: trial.user_attrs[k]
                           for k in (keys.ENGINE_CONFIG, keys.FIDELITY, keys.SCREEN_OF)
                           if k in trial.user_attrs}})
        study_id = storage.get_study_id_from_name(study.study_name)
        new_id = storage.create_new_trial(study_id, template_trial=template)
        number = storage.get_trial_number_from_id(new_id)
    storage.set_trial_system_attr(trial._trial_id, keys.REQUEUED_AS, number)
    storage.set_trial_user_attr(trial._trial_id, "requeued_as", number)
    storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
    log.warning("%s trial %d: its job died before it finished; re-queued as trial %d",
                study.study_name, trial.number, number)
    return number


def repair(storage: BaseStorage, study: optuna.Study, rows: dict[int, Trial]) -> list[int]:
    """Settle the trials a dead job left RUNNING; returns the numbers that were re-queued."""
    requeued = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        row = rows.get(t.number)
        if row is not None:  # died between our row and Optuna's tell: replay the tell
            log.warning("%s trial %d: stored but not told to Optuna; telling it now",
                        study.study_name, t.number)
            study.tell(t.number, row.capacity_output_tok_s)
        else:
            requeue(storage, study, t)
            requeued.append(t.number)
    return requeued

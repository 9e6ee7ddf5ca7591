"""What a stored study says about how its campaign ran: the simulator step model of its trials,
the roofline profiles that priced them, the sampler. A resumed campaign is checked against
these (autotune.campaign.resume_settings); None or empty where nothing is recorded."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.domain import optuna_keys as keys
from autotune.domain import step_model
from autotune.storage.studies import reading

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial


def step_model_label(trial: FrozenTrial) -> str | None:
    """The simulator's step-model label in a trial's notes (keys.BACKEND_NOTES); None for a
    trial no simulator priced."""
    return (trial.user_attrs.get(keys.BACKEND_NOTES) or {}).get("step_model")


def stored_step_model(storage_url: str, study_name: str) -> str | None:
    """The simulator step model (the setting) a campaign's simulated trials ran with, from
    their notes (keys.BACKEND_NOTES): "roofline" where the roofline was asked for, else
    "measured" (a table, or the roofline as its fallback); None where no simulated trial is
    recorded."""
    with reading(storage_url) as storage:
        try:
            study_id = storage.get_study_id_from_name(study_name)
            for trial in storage.get_all_trials(study_id, deepcopy=False):
                label = step_model_label(trial)
                if label:
                    return step_model.setting(label)
            return None
        except KeyError:
            return None


def stored_roofline_profiles(storage_url: str, study_name: str) -> set[str]:
    """The profiles ("GPU/model vN (how fitted)") that set the roofline's coefficients for a
    campaign's trials the roofline priced (none: no such trial)."""
    with reading(storage_url) as storage:
        try:
            study_id = storage.get_study_id_from_name(study_name)
            labels = [step_model_label(trial)
                      for trial in storage.get_all_trials(study_id, deepcopy=False)]
        except KeyError:
            return set()
    return {p for label in labels if label and step_model.kind(label) in (
        step_model.FALLBACK, step_model.ROOFLINE) and (p := step_model.profile(label))}


def stored_sampler(storage_url: str, study_name: str) -> str | None:
    """The --sampler a campaign's study was last run with (None: no such study, or none
    recorded)."""
    with reading(storage_url) as storage:
        try:
            study_id = storage.get_study_id_from_name(study_name)
            return storage.get_study_user_attrs(study_id).get(keys.SAMPLER)
        except KeyError:
            return None

"""Optuna's storage opened by autotune.storage.studies, and what study_settings reads back."""

from __future__ import annotations

import optuna

from autotune.domain import optuna_keys as keys
from autotune.storage import studies
from autotune.storage.study_settings import (
    step_model_label,
    stored_roofline_profiles,
    stored_sampler,
    stored_step_model,
)

FALLBACK = ("roofline (no measured table for H100-80GB/x/TP1/bf16); "
            "profile H100-80GB/x v1 (fitted)")


def test_a_missing_study_records_no_setting(migrated_sqlite: str) -> None:
    assert not studies.has_study(studies.open_storage(migrated_sqlite), "none")
    assert stored_step_model(migrated_sqlite, "none") is None
    assert stored_roofline_profiles(migrated_sqlite, "none") == set()
    assert stored_sampler(migrated_sqlite, "none") is None


def test_a_stored_study_gives_back_its_settings(migrated_sqlite: str) -> None:
    storage = studies.open_storage(migrated_sqlite)
    study = studies.create_or_load_study(storage, "s", optuna.samplers.RandomSampler(seed=0))
    study.set_user_attr(keys.SAMPLER, "random")
    study.enqueue_trial({}, user_attrs={keys.BACKEND_NOTES: {"step_model": FALLBACK}})
    study.enqueue_trial({}, user_attrs={keys.BACKEND_NOTES: {}})  # a real engine's trial
    assert studies.has_study(storage, "s")
    # Loaded again (a resumed campaign's): the same study, not a second one.
    assert studies.create_or_load_study(storage, "s", optuna.samplers.RandomSampler()
                                        )._study_id == study._study_id
    labels = [step_model_label(t) for t in studies.load_study(migrated_sqlite, "s").trials]
    assert labels == [FALLBACK, None]
    assert stored_step_model(migrated_sqlite, "s") == "measured"  # the fallback of a table
    assert stored_roofline_profiles(migrated_sqlite, "s") == {"H100-80GB/x v1 (fitted)"}
    assert stored_sampler(migrated_sqlite, "s") == "random"
    storage.engine.dispose()

"""What optuna-dashboard shows of a campaign's study reads right: the objective is named, a
rule-rejected trial is marked as such (it is COMPLETE with value 0 to Optuna, for the samplers),
and a stepped float is stored as its step writes it (0.87, not 0.8700000000000001)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna_dashboard._note import get_note_from_system_attrs

from autotune.domain import optuna_keys as keys
from autotune.domain.deployment import DEMO
from autotune.search.objective import OBJECTIVE_NAME
from autotune.search.samplers import make_sampler, step_decimals
from autotune.search.spaces.deployment import deployment_space
from autotune.storage.db import open_database, session_scope, upgrade
from autotune.storage.models import Campaign as CampaignRow
from tests.release.report.conftest import run_campaign


def test_step_decimals() -> None:
    assert [step_decimals(s) for s in (0.01, 0.05, 0.5, 2.0, 1e-3)] == [2, 2, 1, 0, 3]


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_stepped_floats_are_stored_rounded_to_their_step(sampler: str) -> None:
    space = deployment_space("chat", DEMO)  # gpu_memory_utilization: 0.80 to 0.95, step 0.01
    plan = make_sampler(sampler, space, seed=0)
    study = optuna.create_study(direction="maximize", sampler=plan.sampler)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for _ in range(60):  # past the line sweep (up to 40 trials), whose own points are round
        trial = study.ask()
        values = plan.space.suggest(trial)
        trial.set_constraint("slo", 0.0)  # what the controller reports
        study.tell(trial, float(values["gpu_memory_utilization"]))
    stored = [t.params["gpu_memory_utilization"] for t in study.trials]
    assert len(set(stored)) > 3  # the sampler moved it
    # Unwrapped, both samplers store about one value in four off by 1e-16 (0.8700000000000001).
    assert [v for v in stored if v != round(v, 2)] == []


Campaign = tuple[str, str, dict[int, str]]  # database URL, study name, each trial's row state


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Campaign:
    url = f"sqlite:///{Path(tmp_path_factory.mktemp('dash')) / 'a.db'}"
    upgrade(url)
    campaign_id = run_campaign(url, "2026Q4", 8)  # random draws: rejected trials among them
    engine = open_database(url)
    with session_scope(engine) as s:
        row = s.get(CampaignRow, campaign_id)
        assert row is not None
        found = (url, row.study_name, {t.number: t.state for t in row.trials})
    engine.dispose()
    return found


def test_the_study_names_its_objective(campaign: Campaign) -> None:
    url, study_name, _ = campaign
    assert optuna.load_study(study_name=study_name, storage=url).metric_names == [OBJECTIVE_NAME]


def test_rejected_trials_are_marked_and_noted(campaign: Campaign) -> None:
    url, study_name, rows = campaign
    study = optuna.load_study(study_name=study_name, storage=url)
    assert {t.number: t.user_attrs[keys.OUTCOME] for t in study.trials} == rows
    rejected = [t for t in study.trials if rows[t.number] == "rejected"]
    assert rejected and any(s == "measured" for s in rows.values())
    notes = study._storage.get_study_system_attrs(study._study_id)
    for t in study.trials:
        note = get_note_from_system_attrs(notes, t._trial_id)["body"]
        if rows[t.number] == "rejected":
            # Still COMPLETE with value 0, so the samplers learn from its constraints.
            assert t.state == optuna.trial.TrialState.COMPLETE and t.value == 0
            assert note.startswith("**Rejected, not measured**")
            assert t.user_attrs[keys.FAILURE_CLASS] == "rule_violation"
        else:
            assert note == ""
    for t in study.trials:
        value = t.params.get("gpu_memory_utilization")
        assert value is None or value == round(value, 2)

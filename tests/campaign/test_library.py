"""autotune as a library: the calls under `autotune tune`, with the defaults a script gets."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

import autotune
from autotune.errors import SettingError
from autotune.settings import Settings
from autotune.storage import repo
from autotune.storage.db import open_database, session_scope
from autotune.storage.models import Campaign


def test_a_campaign_runs_from_a_request_with_no_front_end(
        migrated_sqlite: str, caplog: pytest.LogCaptureFixture) -> None:
    request = autotune.TuneRequest.of(campaign="lib", max_trials=3, confirm_top=0, max_scale=64)
    with caplog.at_level(logging.INFO, logger="autotune"):
        run = autotune.run_campaign(request, settings=Settings(database_url=migrated_sqlite))
    assert not run.already_completed
    # Its lines went to the logger: the search space and the step model.
    assert any("Simulator step model" in r.getMessage() for r in caplog.records)
    engine = open_database(migrated_sqlite)
    with session_scope(engine) as s:
        campaign = s.get(Campaign, run.campaign_id)
        assert campaign is not None and campaign.name == "lib" and campaign.status == "completed"
        assert len(campaign.trials) == 3 and repo.best_trial(campaign) is not None
    engine.dispose()


def test_bad_input_names_the_setting_not_a_flag() -> None:
    with pytest.raises(SettingError) as info:
        autotune.TuneRequest.of(max_trials=1)
    assert "max_trials" in str(info.value) and "--" not in str(info.value)


def test_importing_autotune_loads_no_campaign_stack() -> None:
    code = ("import sys, autotune; print(sorted(m for m in ('optuna', 'autotune.campaign.run') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert callable(autotune.run_campaign) and autotune.__version__


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'run_campaing'"):
        autotune.run_campaing  # type: ignore[attr-defined]  # noqa: B018

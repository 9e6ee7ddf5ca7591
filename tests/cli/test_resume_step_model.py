"""A campaign is resumed with the simulator step model its trials ran with, or refused: the
two models' capacities differ several times over, so mixing them would rank on the wrong one."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from tests.conftest import run_cli

pytestmark = pytest.mark.e2e
TUNE = ("tune", "--trials", "3", "--confirm-top", "0")


def _trials(url: str) -> int:
    engine = create_engine(url)
    with engine.connect() as c:
        count = int(c.execute(text("select count(*) from autotune_trials")).scalar_one())
    engine.dispose()
    return count


def test_a_resume_with_another_step_model_is_refused(migrated_sqlite: str) -> None:
    roofline = {"AUTOTUNE_DATABASE_URL": migrated_sqlite, "AUTOTUNE_SIM__STEP_MODEL": "roofline"}
    assert run_cli(*TUNE, env=roofline).returncode == 0
    engine = create_engine(migrated_sqlite)  # as a job that died mid-campaign leaves it
    with engine.begin() as c:
        c.execute(text("update autotune_campaigns set status = 'failed', finished_at = null"))
    engine.dispose()
    before = _trials(migrated_sqlite)

    proc = run_cli(*TUNE, env={"AUTOTUNE_DATABASE_URL": migrated_sqlite})  # measured: default
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and ("campaign 'demo' simulated its trials with the roofline step "
                                "model; resume it with AUTOTUNE_SIM__STEP_MODEL=roofline, or "
                                "give --new-campaign") in lines[0], proc.stderr
    assert _trials(migrated_sqlite) == before  # nothing written

    proc = run_cli(*TUNE, env=roofline)
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = run_cli(*TUNE, "--new-campaign", env={"AUTOTUNE_DATABASE_URL": migrated_sqlite})
    assert proc.returncode == 0, proc.stderr[-2000:]

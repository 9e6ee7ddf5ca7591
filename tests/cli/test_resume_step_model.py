"""A campaign is resumed with the simulator step model its trials ran with, or refused: the
two models' capacities differ several times over, so mixing them would rank on the wrong one."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from autotune.workers.sim.profile import BUNDLED, load_profile, save_profile
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


def test_a_resume_with_other_roofline_coefficients_is_refused(migrated_sqlite: str,
                                                              tmp_path: Path) -> None:
    """A profile calibrated between the dead job and the resume changes what the roofline's
    steps cost: the campaign is refused, nothing written, and --new-campaign runs."""
    env = {"AUTOTUNE_DATABASE_URL": migrated_sqlite, "AUTOTUNE_SIM__STEP_MODEL": "roofline",
           "AUTOTUNE_SIM__PROFILE_DIR": str(tmp_path / "profiles")}
    assert run_cli(*TUNE, env=env).returncode == 0  # H200's profile fitted to the tables
    engine = create_engine(migrated_sqlite)
    with engine.begin() as c:
        c.execute(text("update autotune_campaigns set status = 'failed', finished_at = null"))
    engine.dispose()
    before = _trials(migrated_sqlite)
    calibrated = replace(load_profile(BUNDLED / "gpu.yaml"), gpu="H200-141GB",
                         model="DeepSeek-V4-Flash", fit={"measurements": 1})
    save_profile(calibrated, tmp_path / "profiles")  # as `autotune sim calibrate` saves one

    proc = run_cli(*TUNE, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and (
        "campaign 'demo' priced its roofline steps with profile H200-141GB/DeepSeek-V4-Flash v1 "
        "(GPU coefficients fitted to measured kernel tables of H200-141GB") in lines[0], lines
    assert lines[0].endswith("this autotune prices them with H200-141GB/DeepSeek-V4-Flash v2 "
                             "(fitted), so its trials would not compare; give --new-campaign "
                             "to start another"), lines
    assert _trials(migrated_sqlite) == before  # nothing written
    proc = run_cli(*TUNE, "--new-campaign", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]

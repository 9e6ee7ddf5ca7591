"""`autotune quarterly` through the real command, on the simulator and SQLite: one publication
per quarter, the incumbent kept when nothing beats it, budgets that stop cleanly and still
decide, a second concurrent job refused, and the exit codes a scheduler acts on."""

from __future__ import annotations

import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from autotune.api.app import create_app
from autotune.campaign.budget import Budget
from autotune.settings import Settings
from autotune.storage.db import open_database, session_scope
from autotune.storage.models import Campaign, Publication, Trial
from autotune.traffic.formats import load_trace
from autotune.traffic.parquet_store import write_parquet
from autotune.traffic.shape import ShapeSpec, shape
from autotune.traffic.trace import DEMO_TRACE
from tests.conftest import AUTOTUNE, run_cli

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier

DAY_S = 86_400.0
DEP = ["--deployment", "llama"]
# Small and fast: 3 trials, one config confirmed besides the incumbent, two seeds each.
FAST = ["--max-trials", "3", "--confirm-top", "1", "--confirm-repeats", "2"]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A database where deployment `llama` was tuned once (on the demo trace, which has no
    wall-clock times), and a Parquet trace that does: 400 requests, then 200 two days later."""
    root = tmp_path_factory.mktemp("quarterly")
    db = root / "seed.db"
    env = {"AUTOTUNE_DATABASE_URL": f"sqlite:///{db}"}
    assert run_cli("db", "upgrade", env=env).returncode == 0
    tune = run_cli("tune", *DEP, "--campaign", "first", "--model", "Llama-3.1-8B", "--gpu",
                   "H100-80GB", "--gpus", "1", "--max-model-len", "8192", "--slo",
                   "ttft_p99<=2s,tpot_p99<=100ms", "--trials", "4", "--confirm-top", "0",
                   "--max-scale", "64", env=env)
    assert tune.returncode == 0, tune.stderr[-2000:]
    demo = load_trace(DEMO_TRACE)
    early, late = demo.slice(0, 400), demo.slice(400, 200)
    two_days = early.evolve(arrival_s=list(early.arrival_s) + list(
        late.arrival_s + 2 * DAY_S + float(early.arrival_s[-1])))
    both = demo.evolve(arrival_s=two_days.arrival_s, start_epoch_s=1_790_000_000.0)
    trace = root / "two_days.parquet"
    write_parquet(both, trace)
    return db, trace


@pytest.fixture
def db(seeded: tuple[Path, Path], tmp_path: Path) -> Path:
    """A private copy of the seeded database."""
    copy = tmp_path / "q.db"
    with sqlite3.connect(seeded[0]) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    return copy


def _env(db: Path, **extra: str) -> dict[str, str]:
    return {"AUTOTUNE_DATABASE_URL": f"sqlite:///{db}", "USER": "scheduler", **extra}


def _q(db: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli("quarterly", *DEP, *args, env=_env(db, **env), timeout=600)


def _rows(db: Path) -> tuple[list[Campaign], int]:
    engine = open_database(f"sqlite:///{db}")
    with session_scope(engine) as s:
        campaigns = list(s.scalars(select(Campaign).where(Campaign.period.is_not(None))
                                   .order_by(Campaign.id)))
        for c in campaigns:
            _ = [(t.role, t.state) for t in c.trials], [r.winner for r in c.confirmations]
        pubs = s.scalar(select(func.count()).select_from(Publication)) or 0
    engine.dispose()
    return campaigns, pubs


def test_twice_in_a_quarter_publishes_once_and_force_runs_again(
        db: Path, seeded: tuple[Path, Path]) -> None:
    trace = seeded[1]
    first = _q(db, "--period", "2026Q3", "--trace", str(trace), "--days", "1", *FAST)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "2026Q3: published" in first.stdout and "no incumbent" in first.stdout
    assert "200 of 600 requests, the last 1 days" in first.stderr
    campaigns, pubs = _rows(db)
    assert pubs == 1 and [c.name for c in campaigns] == ["2026Q3"]
    window = shape(load_trace(trace), ShapeSpec(last_days=1))
    assert len(window) == 200 and campaigns[0].trace_digest == window.digest
    # The first campaign's configs came in as warm starts, ahead of the baselines.
    roles = [t.role for t in sorted(campaigns[0].trials, key=lambda t: t.number)]
    assert roles[0] == "warm-start"

    again = _q(db, "--period", "2026Q3", "--trace", str(trace), "--days", "1", *FAST)
    assert again.returncode == 0 and "already decided" in again.stdout, again.stderr
    assert _rows(db)[1] == 1 and len(_rows(db)[0]) == 1  # a no-op: nothing ran, nothing new

    forced = _q(db, "--period", "2026Q3", "--trace", str(trace), "--days", "1", "--force",
                *FAST)
    assert forced.returncode == 0, forced.stderr[-2000:]
    campaigns, _ = _rows(db)
    assert [c.name for c in campaigns] == ["2026Q3", "2026Q3.2"]
    rerun = campaigns[1]
    assert rerun.decision in ("published", "kept_incumbent")
    # The published config (the incumbent now) was re-measured first, and confirmed.
    incumbent = next(t for t in rerun.trials if t.number == 0)
    assert incumbent.role == "incumbent" and incumbent.state == "measured"
    assert any(r.role == "incumbent" and r.n == 2 for r in rerun.confirmations)


def test_a_winner_that_does_not_beat_the_incumbent_keeps_it(db: Path) -> None:
    # The incumbent: the first campaign's best config, published. Three trials only re-measure
    # it and the first campaign's other configs, all worse there; and the new winner must beat
    # it by 15% beyond its confirmed noise.
    pub = run_cli("publish", "--campaign", "first", *DEP, env=_env(db))
    assert pub.returncode == 0, pub.stderr
    proc = _q(db, "--period", "2026Q4", *FAST, "--margin-pct", "15")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "has no wall-clock times" in proc.stderr and "using the whole file" in proc.stderr
    campaigns, pubs = _rows(db)
    assert pubs == 1  # still the incumbent's publication only
    c = campaigns[0]
    assert c.decision == "kept_incumbent" and c.decision_note
    assert "2026Q4: kept_incumbent" in proc.stdout
    # Visible in `autotune campaigns` and in the API's campaign detail.
    listing = run_cli("campaigns", env={**_env(db), "COLUMNS": "400"})
    assert "kept_incumbent" in listing.stdout
    with TestClient(create_app(Settings(database_url=f"sqlite:///{db}"))) as client:
        detail = client.get(f"/v1/campaigns/{c.id}").json()
    assert detail["decision"] == "kept_incumbent" and detail["decision_note"] == c.decision_note
    assert detail["period"] == "2026Q4" and detail["gpu_hours"] > 0
    assert {r["role"] for r in detail["confirmations"]} >= {"incumbent"}


def test_budgets_stop_the_search_cleanly_and_still_decide(db: Path) -> None:
    by_trials = _q(db, "--period", "2027Q1", *FAST)
    assert by_trials.returncode == 0, by_trials.stderr[-2000:]
    tiny = _q(db, "--period", "2027Q2", "--max-trials", "30", "--max-gpu-hours", "1e-9",
              "--confirm-top", "1", "--confirm-repeats", "2")
    assert tiny.returncode == 0, tiny.stderr[-2000:]
    assert "stopped by max gpu hours" in tiny.stdout
    trials_c, gpu_c = _rows(db)[0]
    measured = [t for t in trials_c.trials if t.state != "rejected" and t.repeat_of is None]
    assert trials_c.stop_reason == "max_trials" and len(measured) <= 3
    assert trials_c.decision is not None and trials_c.status == "completed"
    # One trial spends more than 1e-9 GPU-hours: the search stops after it (inline: one slot).
    engined = [t for t in gpu_c.trials if t.gpu_hours > 0]
    assert gpu_c.stop_reason == "max_gpu_hours" and len(engined) == 1
    assert gpu_c.budget == {"max_trials": 30, "max_gpu_hours": 1e-9, "deadline": None}
    assert gpu_c.decision is not None and gpu_c.confirmations
    assert gpu_c.gpu_hours == pytest.approx(
        sum(t.gpu_hours for t in gpu_c.trials) + sum(r.gpu_hours for r in gpu_c.confirmations))


def test_a_second_job_on_the_same_campaign_is_refused(db: Path) -> None:
    # Slow replays keep the first job busy; a short lease makes the second decide quickly.
    slow = {"AUTOTUNE_SIM__REPLAY_DELAY_S": "0.3", "AUTOTUNE_CAMPAIGN_LEASE_S": "2"}
    first = subprocess.Popen([AUTOTUNE, "quarterly", *DEP, "--period", "2027Q3", *FAST],
                             env={**__import__("os").environ, **_env(db, **slow)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        engine = open_database(f"sqlite:///{db}")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with session_scope(engine) as s:
                running = s.scalar(select(Campaign).where(Campaign.period == "2027Q3"))
                if running is not None and running.lease_owner and s.scalar(
                        select(func.count()).select_from(Trial)
                        .where(Trial.campaign_id == running.id)):
                    break
            time.sleep(0.3)
        else:
            pytest.fail("the first job never started a trial")
        engine.dispose()
        second = _q(db, "--period", "2027Q3", *FAST, **slow)
        assert second.returncode == 3, second.stderr
        errors = [line for line in second.stderr.splitlines() if "error" in line]
        assert len(errors) == 1 and "being run by another live job" in errors[0], second.stderr
        _out, err = first.communicate(timeout=300)
        assert first.returncode == 0, err[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    campaigns, _ = _rows(db)
    assert len(campaigns) == 1 and campaigns[0].decision is not None


def test_no_feasible_config_within_the_budget_exits_4(db: Path) -> None:
    proc = _q(db, "--period", "2028Q1", *FAST, "--slo", "ttft_p99<=1ms")
    assert proc.returncode == 4, proc.stderr[-2000:]
    campaigns, pubs = _rows(db)
    assert campaigns[0].decision == "no_feasible" and pubs == 0
    assert "no config met the SLO" in proc.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--period", "2026Q5"], "is not a quarter label"),
    (["--deadline", "2001-01-01T00:00:00"], "has already passed"),
    (["--deadline", "soon"], "is not an ISO 8601 time"),
    (["--confirm-repeats", "1"], "--confirm-repeats must be at least 2"),
    (["--max-gpu-hours", "0"], "--max-gpu-hours must be positive"),
    (["--trace", "/nonexistent.jsonl"], "give --trace FILE"),
])
def test_bad_input_is_one_line_and_exit_2(db: Path, args: list[str], message: str) -> None:
    proc = _q(db, *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1
    assert _rows(db)[0] == []  # nothing was written


def test_a_space_the_simulator_cannot_search_is_refused_as_tune_refuses_it(
        db: Path, tmp_path: Path) -> None:
    """The space comes from the latest campaign: one that searches speculative decoding (run on
    real engines) is refused on the simulator before anything is written, as `tune` refuses it."""
    space = tmp_path / "speculative.yaml"
    space.write_text("parameters:\n  speculative_config:\n    type: categorical\n    choices: [null, "
                     "'{\"method\": \"ngram\", \"num_speculative_tokens\": 2, "
                     "\"prompt_lookup_max\": 3}']\n")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE autotune_campaigns SET search_space = ?", (str(space),))
    proc = _q(db, "--period", "2028Q3", *FAST, "--backend", "sim")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "searches speculative_config, which the simulator does not model" in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert _rows(db)[0] == []  # nothing was written


def test_an_unknown_deployment_exits_2(db: Path) -> None:
    proc = run_cli("quarterly", "--deployment", "nope", env=_env(db))
    assert proc.returncode == 2 and "no deployment named 'nope'" in proc.stderr


def test_infrastructure_failures_exit_5(db: Path, tmp_path: Path) -> None:
    ray = _q(db, "--period", "2028Q2", *FAST, "--ray-address", "127.0.0.1:1")
    assert ray.returncode == 5 and "cannot reach the Ray cluster" in ray.stderr, ray.stderr
    assert _rows(db)[0] == []  # an unreachable cluster leaves no campaign behind
    gone = run_cli("quarterly", *DEP, env={"AUTOTUNE_DATABASE_URL":
                                           "postgresql+psycopg://nobody@127.0.0.1:1/x"})
    assert gone.returncode == 5 and "cannot reach the database" in gone.stderr, gone.stderr


def test_the_budget_names_the_limit_reached() -> None:
    assert Budget().spent(1e9, 1e12) is None
    assert Budget(max_gpu_hours=2.0).spent(1.9, 0.0) is None
    assert Budget(max_gpu_hours=2.0).spent(2.0, 0.0) == "max_gpu_hours"
    assert Budget(deadline_epoch_s=100.0).spent(0.0, 99.0) is None
    assert Budget(deadline_epoch_s=100.0).spent(0.0, 100.0) == "deadline"


def _deadline_in(seconds: float) -> tuple[str, float]:
    """A --deadline `seconds` from now (ISO 8601, UTC) and its epoch seconds."""
    from datetime import UTC, datetime, timedelta

    when = (datetime.now(UTC) + timedelta(seconds=seconds)).replace(microsecond=0)
    return when.isoformat(), when.timestamp()


# Each replay takes at least 0.2 s: a trial's capacity search (a dozen replays) takes seconds,
# so --max-trials 40 would take minutes and a deadline 30 s ahead lands mid-search.
PACED = {"AUTOTUNE_SIM__REPLAY_DELAY_S": "0.2"}
DEADLINE_S = 30.0


def _assert_stopped_at(c: Campaign, deadline_epoch: float, max_trials: int) -> None:
    """Stopped by the deadline mid-search: nothing asked after it (inline, one slot: only the
    trial in flight then finished later), the best so far confirmed after it, and the
    spending adds up."""
    from autotune.release.publish import utc

    assert c.status == "completed" and c.stop_reason == "deadline"
    measured = [t for t in c.trials if t.state != "rejected" and t.repeat_of is None]
    assert 1 <= len(measured) < max_trials
    assert sum(utc(t.finished_at).timestamp() > deadline_epoch for t in c.trials) <= 1
    assert c.confirmations and any(r.winner for r in c.confirmations)
    assert all(utc(r.created_at).timestamp() > deadline_epoch for r in c.confirmations)
    assert c.gpu_hours > 0 and c.gpu_hours == pytest.approx(
        sum(t.gpu_hours for t in c.trials) + sum(r.gpu_hours for r in c.confirmations))


def test_a_deadline_mid_search_stops_confirms_and_decides(db: Path) -> None:
    deadline, epoch = _deadline_in(DEADLINE_S)
    proc = _q(db, "--period", "2028Q3", "--max-trials", "40", "--deadline", deadline,
              "--confirm-top", "1", "--confirm-repeats", "2", **PACED)
    assert proc.returncode == 0, proc.stderr[-2000:]  # published: the documented exit code
    out = " ".join(proc.stdout.split())
    assert "search stopped by deadline" in out and f"deadline {deadline}" in out
    assert "2028Q3: published" in out
    campaigns, pubs = _rows(db)
    (c,) = campaigns
    _assert_stopped_at(c, epoch, 40)
    assert c.budget == {"max_trials": 40, "max_gpu_hours": None, "deadline": deadline}
    assert c.decision == "published" and pubs == 1
    assert f"Spent {c.gpu_hours:.4g} GPU-hours" in out
    listing = run_cli("campaigns", env={**_env(db), "COLUMNS": "400"})
    assert "deadline" in listing.stdout and f"{c.gpu_hours:.3g}" in listing.stdout


def test_tune_takes_the_same_budget(db: Path) -> None:
    deadline, epoch = _deadline_in(DEADLINE_S)
    proc = run_cli("tune", *DEP, "--campaign", "paced", "--model", "Llama-3.1-8B", "--gpu",
                   "H100-80GB", "--gpus", "1", "--max-model-len", "8192", "--max-trials", "40",
                   "--deadline", deadline, "--confirm-top", "1", "--confirm-repeats", "2",
                   "--max-scale", "64", env=_env(db, **PACED), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]  # a completed campaign, whatever stopped it
    out = " ".join(proc.stdout.split())
    assert "search stopped by deadline" in out and f"deadline {deadline}" in out
    engine = open_database(f"sqlite:///{db}")
    with session_scope(engine) as s:
        c = s.scalar(select(Campaign).where(Campaign.name == "paced"))
        assert c is not None
        _assert_stopped_at(c, epoch, 40)
        assert c.budget == {"max_trials": 40, "max_gpu_hours": None, "deadline": deadline}
        assert c.decision is None  # tune decides nothing; publish takes the confirmed winner
    engine.dispose()
    # --max-gpu-hours: one engine trial spends more than 1e-9, the search stops after it.
    gpu = run_cli("tune", *DEP, "--campaign", "tiny", "--model", "Llama-3.1-8B", "--gpu",
                  "H100-80GB", "--gpus", "1", "--max-model-len", "8192", "--max-trials", "30",
                  "--max-gpu-hours", "1e-9", "--confirm-top", "0", "--max-scale", "64",
                  env=_env(db))
    assert gpu.returncode == 0, gpu.stderr[-2000:]
    assert "search stopped by max gpu hours" in " ".join(gpu.stdout.split())


def test_a_dead_job_resumed_on_another_step_model_is_refused(db: Path) -> None:
    """A quarter's campaign simulated on the roofline, whose job died, is not finished on the
    measured tables: its capacities would mix two scales. One line, exit 2, nothing written."""
    first = _q(db, "--period", "2029Q1", *FAST, AUTOTUNE_SIM__STEP_MODEL="roofline")
    assert first.returncode in (0, 4), first.stderr[-2000:]
    with sqlite3.connect(db) as c:  # as a job killed before it decided leaves the campaign
        c.execute("update autotune_campaigns set status = 'failed', finished_at = null, "
                  "decision = null, decided_at = null where period = '2029Q1'")
        trials = c.execute("select count(*) from autotune_trials").fetchone()[0]
    second = _q(db, "--period", "2029Q1", *FAST)  # the default step model: measured
    assert second.returncode == 2, second.stderr[-2000:]
    errors = [line for line in second.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].endswith(
        "campaign '2029Q1' simulated its trials with the roofline step model; resume it "
        "with AUTOTUNE_SIM__STEP_MODEL=roofline"), second.stderr
    with sqlite3.connect(db) as c:
        assert c.execute("select count(*) from autotune_trials").fetchone()[0] == trials

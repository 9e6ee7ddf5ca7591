"""`autotune tune --per-path` through the real command, on the simulator and SQLite, on the
bundled demo trace (hot 536, warm 44, cold 20 of 600 requests): the whole-trace campaign and one
campaign per path, each stored with its sub-trace, compared with the single config on the same
sub-trace, published per path and read back through the REST API; bad input refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from autotune.api.app import create_app
from autotune.campaign import per_path as pp
from autotune.campaign.study import comparisons
from autotune.domain import optuna_keys as keys
from autotune.settings import Settings
from autotune.storage import repo
from autotune.storage.db import open_database, session_scope
from autotune.storage.models import Campaign, Publication, Trial
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE
from autotune.vocabulary import Role
from tests.conftest import run_cli

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier

FAST = ["--trials", "3", "--confirm-top", "1", "--confirm-repeats", "2", "--max-scale", "16"]
TUNE = ["tune", "--campaign", "c1", *FAST, "--per-path", "--slo-hot", "ttft_p99<=1s,tpot_p99<=50ms"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    db = tmp_path_factory.mktemp("per_path") / "p.db"
    env = {"AUTOTUNE_DATABASE_URL": f"sqlite:///{db}"}
    assert run_cli("db", "upgrade", env=env).returncode == 0
    proc = run_cli(*TUNE, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return db, proc.stdout


def _env(db: Path) -> dict[str, str]:
    return {"AUTOTUNE_DATABASE_URL": f"sqlite:///{db}"}


def _copy(db: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy.db"
    with sqlite3.connect(db) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    return copy


def test_each_path_is_its_own_campaign_on_its_sub_trace(tuned: tuple[Path, str]) -> None:
    db, out = tuned
    url = f"sqlite:///{db}"
    parts = pp.plan_paths(load_trace(DEMO_TRACE), pp.parse_paths("hot,cold"))
    want = {p.path: p.trace for p in parts}
    assert {k: len(v) for k, v in want.items() if v is not None} == {"hot": 536, "cold": 64}
    engine = open_database(url)
    with session_scope(engine) as s:
        parent = repo.find_campaign(s, "c1", "demo")
        assert parent.status == "completed" and parent.trace_ref == str(DEMO_TRACE.resolve())
        found = pp.path_campaigns(s, parent)
        assert set(found) == {"hot", "cold"}
        for path, c in found.items():
            sub = want[path]
            assert sub is not None
            assert (c.deployment.name, c.status) == (f"demo.{path}", "completed")
            assert c.trace_digest == sub.digest  # the sub-trace, not the whole one
            assert c.search_space == {"hot": "chat", "cold": "batch"}[path]
            assert c.deployment.traffic_profile == {"hot": "chat", "cold": "batch"}[path]
            measured = [t for t in c.trials if t.state == "measured"]
            assert len([t for t in c.trials if t.repeat_of is None and t.state != "rejected"]) == 3
            # Every measurement replayed the path's requests, and only those.
            assert measured and {t.latency_recorded_rate["requests"] for t in measured} == {len(sub)}
            assert repo.choose_winner(c).confirmation is not None
            study = optuna.load_study(study_name=c.study_name, storage=url)
            assert study.user_attrs[keys.PATH]["requests"] == len(sub)
            assert study.user_attrs[keys.PATH]["parent_campaign"] == "c1"
            # The whole trace's winner measured on this path with the confirmation's seeds.
            (single,) = comparisons(study)
            assert single["role"] == Role.SINGLE_CONFIG
            assert single["engine_config"] == repo.choose_winner(parent).trial.engine_config
            assert single["seeds"] == repo.choose_winner(c).confirmation.seeds and single["n"] == 2
            # The path's search started from it, and it was confirmed beside the path's best:
            # the path's winner has at least its lower bound.
            roles = [t.role for t in sorted(c.trials, key=lambda t: t.number)]
            assert roles[0] == Role.SINGLE_CONFIG, roles
            confirmed = {r.role: r for r in c.confirmations}
            if Role.SINGLE_CONFIG in confirmed:
                assert (repo.choose_winner(c).confirmation.lcb_output_tok_s
                        >= confirmed[Role.SINGLE_CONFIG].lcb_output_tok_s)
        assert found["hot"].slo == {"ttft_p99_ms": 1000.0, "tpot_p99_ms": 50.0}
        assert found["cold"].slo == parent.slo
    engine.dispose()
    assert "Per-path configs beside the single config" in out
    assert "536 of 600 (89%)" in out and "64 of 600 (11%)" in out
    assert "autotune publish --campaign c1 --deployment demo --per-path" in out


def test_published_per_path_and_read_through_the_api(tuned: tuple[Path, str],
                                                     tmp_path: Path) -> None:
    db = _copy(tuned[0], tmp_path)
    proc = run_cli("publish", "--campaign", "c1", "--deployment", "demo", "--per-path",
                   env=_env(db))
    assert proc.returncode == 0, proc.stderr
    assert "for deployment 'demo.hot'" in proc.stdout and "for deployment 'demo.cold'" in proc.stdout
    single = run_cli("publish", "--campaign", "c1", "--deployment", "demo", env=_env(db))
    assert single.returncode == 0, single.stderr
    engine = open_database(f"sqlite:///{db}")
    with session_scope(engine) as s:
        winners = {dep: repo.choose_winner(repo.find_campaign(s, "c1", dep)).trial.engine_config
                   for dep in ("demo", "demo.hot", "demo.cold")}
    engine.dispose()
    with TestClient(create_app(Settings(database_url=f"sqlite:///{db}"))) as client:
        for dep, config in winners.items():
            r = client.get(f"/v1/deployments/{dep}/config")
            assert r.status_code == 200, r.text
            doc = r.json()
            assert doc["deployment"] == dep and doc["campaign"] == "c1"
            assert doc["engine_args"] == config
            assert client.get(f"/v1/deployments/{dep}/config",
                              params={"format": "args"}).text.startswith("--")
        hot = client.get("/v1/deployments/demo.hot/config").json()
        assert "path hot of campaign 'c1'" in hot["note"] and "536 requests" in hot["note"]
        assert hot["slo"] == {"ttft_p99_ms": 1000.0, "tpot_p99_ms": 50.0}
        assert client.get("/v1/deployments/demo.warm/config").status_code == 404


def test_running_it_again_measures_nothing_new(tuned: tuple[Path, str], tmp_path: Path) -> None:
    db = _copy(tuned[0], tmp_path)
    engine = open_database(f"sqlite:///{db}")
    with session_scope(engine) as s:
        before = s.scalar(select(func.count()).select_from(Trial))
    proc = run_cli(*TUNE, env=_env(db))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("already completed") == 3
    assert "Per-path configs beside the single config" in proc.stdout
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(Trial)) == before
    engine.dispose()


@pytest.mark.parametrize(("args", "message"), [
    (["--paths", "hot"], "--paths 'hot' is not a path split"),
    (["--per-path", "--slo-warm", "ttft_p99<=1s"], "--slo-warm: warm is no path of --paths hot,cold"),
    (["--slo-cold", "ttft_p99<=1s"], "--slo-hot, --slo-warm and --slo-cold are for --per-path"),
    (["--per-path", "--slo-cold", "fast please"], "SLO"),
    (["--per-path", "--min-path-requests", "1000"], "no path of trace"),
    (["--per-path", "--deployment", "d" * 97], "deployment name"),
])
def test_bad_per_path_input_is_one_line_and_writes_nothing(tmp_path: Path, args: list[str],
                                                          message: str) -> None:
    db = tmp_path / "bad.db"
    assert run_cli("db", "upgrade", env=_env(db)).returncode == 0
    proc = run_cli("tune", "--campaign", "c1", *FAST, *args, env=_env(db))
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    engine = open_database(f"sqlite:///{db}")
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(Campaign)) == 0
    engine.dispose()


def test_publish_per_path_of_a_campaign_without_paths(tuned: tuple[Path, str],
                                                     tmp_path: Path) -> None:
    db = _copy(tuned[0], tmp_path)
    proc = run_cli("publish", "--campaign", "c1", "--deployment", "demo.hot", "--per-path",
                   env=_env(db))
    assert proc.returncode == 2 and "has no per-path campaigns" in proc.stderr
    engine = open_database(f"sqlite:///{db}")
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(Publication)) == 0
    engine.dispose()

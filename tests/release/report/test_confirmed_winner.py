"""The report names the winner `publish` and the quarterly decision take: the confirmed one
(best lower confidence bound), not the best single measurement, and shows the confirmation.

A real simulated campaign; its confirmation rows are then written through autotune.campaign.confirm
(stats, mark_winner, save) from re-run samples chosen so that the search's best config proves
noisy and the runner-up steady: the two winners differ by construction."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

from autotune.campaign import confirm
from autotune.campaign import quarterly as q
from autotune.storage import repo
from autotune.storage.db import open_database, session_scope, upgrade
from autotune.storage.models import Campaign
from tests.conftest import run_cli
from tests.release.report.conftest import run_campaign
from tests.release.report.test_report import _parse

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier

NOISY = (1.0, 0.0, 0.0)  # the search's best config, re-run: lucky once, then missed the SLO
STEADY = (0.97, 0.98, 0.96)  # the runner-up, re-run: what it measured, give or take


@dataclass(frozen=True)
class Confirmed:
    url: str
    db: Path
    best_single: int  # the search's best trial
    lcb_winner: int  # the confirmed winner
    lcb_winner_lcb: float
    decision_note: str


def _confirmed_from(t: object, factors: tuple[float, ...]) -> confirm.Confirmed:
    cap = t.capacity_output_tok_s  # type: ignore[attr-defined]
    samples = tuple(cap * f for f in factors)
    cand = confirm.Candidate(t.number, t.role, dict(t.engine_config), cap)  # type: ignore[attr-defined]
    return confirm.Confirmed(cand, tuple(range(1, len(samples) + 1)), samples, (None,) * len(samples), 1e-4,
                             confirm.stats(samples))


@pytest.fixture(scope="module")
def confirmed(tmp_path_factory: pytest.TempPathFactory) -> Confirmed:
    path = tmp_path_factory.mktemp("confirmed") / "autotune.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    campaign_id = run_campaign(url, "2027Q1", 6)
    engine = open_database(url)
    try:
        with session_scope(engine) as s:
            c = s.get(Campaign, campaign_id)
            assert c is not None
            firsts = sorted((t for t in c.trials if t.feasible and t.repeat_of is None),
                            key=lambda t: -t.capacity_output_tok_s)
            best = firsts[0]
            runner = next(t for t in firsts[1:] if t.engine_config != best.engine_config)
            marked = confirm.mark_winner([_confirmed_from(best, NOISY),
                                          _confirmed_from(runner, STEADY)])
            confirm.save(s, c, marked)
            s.flush()
            s.refresh(c)
            winner = repo.choose_winner(c)
            assert winner.basis == repo.CONFIRMED and winner.trial is not None
            assert winner.trial.number == runner.number != repo.best_trial(c).number  # type: ignore[union-attr]
            c.period = "2027Q1"  # as the quarterly job's campaign has
            decision = q.decide(s, c, margin_pct=5.0, period="2027Q1", published_by="test")
            assert decision.outcome == q.PUBLISHED
            lcb = winner.confirmation.lcb_output_tok_s  # type: ignore[union-attr]
            return Confirmed(url=url, db=path, best_single=best.number,
                             lcb_winner=runner.number, lcb_winner_lcb=lcb,
                             decision_note=decision.note)
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def page(confirmed: Confirmed, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("confirmed-report") / "r"
    proc = run_cli("report", "--campaign", "2027Q1", "--out", str(out),
                   env={"AUTOTUNE_DATABASE_URL": confirmed.url})
    assert proc.returncode == 0, proc.stderr
    return _parse(out / "index.html")


def test_the_report_names_the_confirmed_winner(confirmed: Confirmed, page) -> None:  # type: ignore[no-untyped-def]
    summary = dict(cells for _, cells in page.rows["summary"])  # type: ignore[misc]
    assert summary["Winner"].startswith(f"trial {confirmed.lcb_winner} ")
    assert "confirmed" in summary["Winner"]
    assert f"LCB {confirmed.lcb_winner_lcb:,.0f} output tok/s" in summary["Winner"]
    trials = [attrs for attrs, _ in page.rows["trials"][1:] if "data-trial" in attrs]
    assert [a["data-trial"] for a in trials if "winner" in a["class"].split()] == [
        str(confirmed.lcb_winner)]
    comparison = page.rows["comparison"]
    assert comparison[0][1][1] == "winner"
    assert comparison[1][1][1].startswith(f"trial {confirmed.lcb_winner}, confirmed LCB ")


def test_the_confirmation_table_shows_each_candidate(confirmed: Confirmed, page) -> None:  # type: ignore[no-untyped-def]
    header, *body = page.rows["confirmations"]
    cells = header[1]
    rows = {int(attrs["data-trial"]): dict(zip(cells, r, strict=True)) for attrs, r in body}
    assert set(rows) == {confirmed.best_single, confirmed.lcb_winner}
    engine = open_database(confirmed.url)
    try:
        with session_scope(engine) as s:
            c = repo.find_campaign(s, "2027Q1", "demo")
            for row in c.confirmations:
                shown = rows[row.trial.number]
                assert shown["re-runs"] == str(row.n) == "3"
                assert shown["mean tok/s"] == f"{row.mean_output_tok_s:,.0f}"
                assert shown["LCB tok/s"] == f"{row.lcb_output_tok_s:,.0f}"
                assert shown["CV"] == f"{row.cv:.1%}"
                assert shown[""] == ("winner" if row.winner else "")
    finally:
        engine.dispose()
    # Listed best bound first: the winner, then the search's (noisy) best.
    assert [int(a["data-trial"]) for a, _ in body] == [confirmed.lcb_winner,
                                                       confirmed.best_single]


def test_the_decision_is_shown(confirmed: Confirmed, page) -> None:  # type: ignore[no-untyped-def]
    summary = dict(cells for _, cells in page.rows["summary"])  # type: ignore[misc]
    assert summary["Decision"] == f"2027Q1: published: {confirmed.decision_note}"
    assert re.match(r"[0-9.e-]+ GPU-hours \(trials and confirmation runs\); search stopped by "
                    r"max trials; budget: max trials 6", summary["Spent"]), summary["Spent"]


def test_the_report_winner_is_what_publish_publishes(confirmed: Confirmed,
                                                     tmp_path: Path) -> None:
    copy = tmp_path / "copy.db"  # publishing writes: the module's page stays as it was
    with sqlite3.connect(confirmed.db) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    proc = run_cli("publish", "--campaign", "2027Q1", "--deployment", "demo",
                   env={"AUTOTUNE_DATABASE_URL": f"sqlite:///{copy}"})
    assert proc.returncode == 0, proc.stderr
    assert f"published trial {confirmed.lcb_winner} of campaign '2027Q1'" in proc.stdout
    # And the quarterly decision published the same trial.
    engine = open_database(f"sqlite:///{copy}")
    try:
        with session_scope(engine) as s:
            dep = repo.get_deployment(s, "demo")
            assert [p.trial.number for p in repo.publications(s, dep)] == [
                confirmed.lcb_winner, confirmed.lcb_winner]
    finally:
        engine.dispose()


def test_confirmation_that_confirms_nothing_has_no_winner(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'none.db'}"
    upgrade(url)
    campaign_id = run_campaign(url, "2027Q2", 3)
    engine = open_database(url)
    try:
        with session_scope(engine) as s:
            c = s.get(Campaign, campaign_id)
            assert c is not None
            best = repo.best_trial(c)
            assert best is not None
            # Every re-run missed the SLO: capacity 0, no bound above 0.
            confirm.save(s, c, confirm.mark_winner([_confirmed_from(best, (0.0, 0.0))]))
    finally:
        engine.dispose()
    proc = run_cli("report", "--campaign", "2027Q2", "--out", str(tmp_path / "r"),
                   env={"AUTOTUNE_DATABASE_URL": url})
    assert proc.returncode == 0, proc.stderr
    page = _parse(tmp_path / "r" / "index.html")
    summary = dict(cells for _, cells in page.rows["summary"])  # type: ignore[misc]
    assert summary["Winner"].startswith("none: confirmation ran and no config kept")
    assert all("winner" not in a["class"].split() for a, _ in page.rows["trials"][1:])
    assert "winner" not in page.rows["comparison"][0][1]
    refused = run_cli("publish", "--campaign", "2027Q2", "--deployment", "demo",
                      env={"AUTOTUNE_DATABASE_URL": url})
    assert refused.returncode == 2 and "confirmed no config" in refused.stderr, refused.stderr

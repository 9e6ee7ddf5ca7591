"""Headless Chromium reads what people read: the report's index.html and a real
`autotune dashboard` process on the same database. Screenshots go to runs/screenshots/."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune.storage import repo
from autotune.storage.db import open_database, session_scope
from autotune.storage.models import Campaign
from tests.browser import WAIT_S, chromium, wait_for
from tests.conftest import AUTOTUNE, ROOT, run_cli
from tests.release.report.conftest import ReportDb

pytestmark = pytest.mark.integration
SCREENSHOTS = ROOT / "runs" / "screenshots"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, condition: Any, what: str) -> Any:
    return wait_for(driver, condition, what,
                    on_timeout=lambda d: _screenshot(d, f"timeout-{what}"))


def _body_with(*needles: str) -> Any:
    """A wait condition: the page's text once it holds every needle (React renders late)."""
    def condition(driver: Any) -> str | bool:
        text: str = driver.find_element("tag name", "body").text
        return text if all(n in text for n in needles) else False
    return condition


def _reveal(driver: Any, prefix: str) -> None:
    """Scroll the dashboard's (fixed-height) attribute box to the line starting with prefix."""
    driver.execute_script(
        "const el = [...document.querySelectorAll('p, span, div')].find(e => "
        "e.childElementCount === 0 && e.textContent.startsWith(arguments[0]));"
        "let box = el && el.parentElement;"
        "while (box && !(['auto', 'scroll'].includes(getComputedStyle(box).overflowY) && "
        "box.scrollHeight > box.clientHeight)) box = box.parentElement;"
        "if (box) box.scrollTop += el.getBoundingClientRect().top - "
        "box.getBoundingClientRect().top - 60;", prefix)


def _screenshot(driver: Any, name: str, full_page: bool = False,
                scroll_to: str | None = None) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    if full_page:  # headless Chromium shoots the viewport: grow it to the page first
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1400, min(int(height) + 100, 12000))
    else:
        driver.set_window_size(1400, 1300)
    if scroll_to is not None:  # after the resize, which may move the page
        driver.execute_script(f"document.getElementById({scroll_to!r}).scrollIntoView()")
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)
    assert path.stat().st_size > 10_000, f"{path} looks empty"
    return path


def _facts(db: ReportDb) -> tuple[list[int], dict[int, bool], int, float, str]:
    engine = open_database(db.url)
    try:
        with session_scope(engine) as s:
            c = s.get(Campaign, db.campaign_id)
            assert c is not None
            best = repo.best_trial(c)
            assert best is not None
            return ([t.number for t in c.trials], {t.number: t.feasible for t in c.trials},
                    best.number, best.capacity_output_tok_s, c.study_name)
    finally:
        engine.dispose()


def test_report_in_a_browser(browser: Any, report_db: ReportDb, tmp_path: Path) -> None:
    out = tmp_path / "report"
    proc = run_cli("report", "--campaign", report_db.campaign, "--out", str(out),
                   env={"AUTOTUNE_DATABASE_URL": report_db.url})
    assert proc.returncode == 0, proc.stderr
    numbers, feasible, winner, capacity, _ = _facts(report_db)

    browser.get((out / "index.html").as_uri())
    _wait(browser, lambda d: d.find_elements("css selector", "#trials tr[data-trial]"),
          "the trials table")
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#trials tr[data-trial]')].map(r => "
        "({n: +r.dataset.trial, feasible: r.dataset.feasible === 'true', cls: r.className}))")
    assert [r["n"] for r in rows] == numbers
    assert {r["n"]: r["feasible"] for r in rows} == feasible
    assert [r["n"] for r in rows if "winner" in r["cls"].split()] == [winner]
    summary = browser.find_element("css selector", "#summary").text
    assert f"trial {winner} " in summary and f"{capacity:,.0f} output tok/s" in summary
    # Every plot is inlined (the page stands alone) and was decoded by the browser: the sweep
    # views (latency against offered load, distributions at capacity, the per-GPU Pareto) too.
    images = _wait(browser, lambda d: d.execute_script(
        "const i = [...document.images]; return i.every(x => x.complete) && "
        "i.map(x => [x.id, x.getAttribute('src').slice(0, 22), x.naturalWidth])"),
        "the plots to load")
    assert [i for i, _, _ in images] == ["latency-vs-load", "latency-cdf", "pareto", "throughput",
                                         "capacity", "importances-plot"], images
    assert all(src == "data:image/png;base64," and width > 500 for _, src, width in images), images
    capacity_rows = browser.execute_script(
        "return [...document.querySelectorAll('#sweep-capacity tr')].slice(1).map("
        "r => r.cells[0].textContent)")
    assert capacity_rows and capacity_rows[0].startswith(f"winner #{winner}"), capacity_rows
    _screenshot(browser, "report", full_page=True)
    # The latency-against-load curves as a person first sees them, scrolled to.
    _screenshot(browser, "report-sweep", scroll_to="sweep")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def dashboard(report_db: ReportDb, tmp_path: Path) -> Iterator[str]:
    """A real `autotune dashboard` process; its process group is ended afterwards."""
    port = _free_port()
    log = (tmp_path / "dashboard.log").open("wb")
    proc = subprocess.Popen([AUTOTUNE, "dashboard", "--port", str(port)], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "AUTOTUNE_DATABASE_URL": report_db.url})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"autotune dashboard exited with {proc.returncode}: "
                            f"{(tmp_path / 'dashboard.log').read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{base}/api/meta", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("autotune dashboard did not answer within "
                                f"{WAIT_S:.0f} s")
                time.sleep(0.2)
        yield base
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log.close()


def test_dashboard_lists_the_study_and_its_trials(browser: Any, report_db: ReportDb,
                                                  dashboard: str) -> None:
    import optuna

    numbers, feasible, winner, _, study_name = _facts(report_db)
    with urllib.request.urlopen(f"{dashboard}/api/studies", timeout=10) as r:
        studies = {s["study_name"]: s["study_id"] for s in json.load(r)["study_summaries"]}
    assert study_name in studies, studies
    study_id = studies[study_name]
    optuna_trials = len(optuna.load_study(study_name=study_name, storage=report_db.url).trials)

    # The study list, as a person opens it.
    browser.get(f"{dashboard}/dashboard")
    _wait(browser, _body_with(study_name), "the study list")
    _screenshot(browser, "dashboard-studies")

    # The trial list, with an infeasible trial open: its constraints and failure class show.
    infeasible = next(n for n in numbers if not feasible[n])
    browser.get(f"{dashboard}/dashboard/studies/{study_id}/trials?numbers={infeasible}")
    body = _wait(browser, _body_with(f"Trial {infeasible} (trial_id=", "failure_class"),
                 f"trial {infeasible}'s page")
    assert f"{optuna_trials} Trials" in body
    for n in numbers[:8]:  # the list pane shows the first ones without scrolling
        assert f"Trial {n}\n" in body, n
    assert "feasible False" in body  # Python reprs: the dashboard prints str(value)
    assert "constraint:ttft_p99_ms" in body and "constraint:tpot_p99_ms" in body
    assert any(f"failure_class {c}" in body for c in ("rule_violation", "slo_miss")), body[-1500:]
    _reveal(browser, "failure_class")
    _screenshot(browser, f"dashboard-trial-{infeasible}")

    # The winner: feasible, no failure.
    browser.get(f"{dashboard}/dashboard/studies/{study_id}/trials?numbers={winner}")
    body = _wait(browser, _body_with(f"Trial {winner} (trial_id=", "failure_class"),
                 f"trial {winner}'s page")
    assert "Best Trial" in body and "failure_class none" in body and "feasible True" in body
    _reveal(browser, "failure_class")
    _screenshot(browser, f"dashboard-trial-{winner}-winner")

    # A rule-rejected trial: Complete with value 0 to Optuna, but its page says it was not
    # measured, in the note above everything and as its outcome.
    rejected = report_db.rejected_trials[0]
    browser.get(f"{dashboard}/dashboard/studies/{study_id}/trials?numbers={rejected}")
    body = _wait(browser, _body_with(f"Trial {rejected} (trial_id=", "Rejected, not measured",
                                     "outcome"), f"rejected trial {rejected}'s page")
    assert "outcome rejected" in body and "failure_class rule_violation" in body
    _screenshot(browser, f"dashboard-trial-{rejected}-rejected")

    # The study's history page draws (plotly) from the same trials, the objective named.
    browser.get(f"{dashboard}/dashboard/studies/{study_id}")
    _wait(browser, lambda d: d.find_elements("css selector", ".js-plotly-plot"), "the history plot")
    _wait(browser, _body_with("output tok/s at capacity"), "the objective's name")
    _screenshot(browser, "dashboard-history")

"""The report's sweep views (latency against offered load, latency distributions at capacity,
tokens/s per GPU against tokens/s per user) and its exports, read back with pandas."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from autotune.measure.metrics import QUANTILE_PCTS
from autotune.release.report import data as report_data
from autotune.release.report import exports, plots
from autotune.release.report.data import SWEEP_KEYS, CampaignReport, ReportReplay, ReportTrial
from autotune.release.report.write import write_report
from autotune.storage.db import open_database, session_scope
from autotune.storage.models import Campaign
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE
from tests.release.report.conftest import ReportDb
from tests.release.report.test_report import DATA_PNG, _parse

GPUS = 8  # the demo deployment's
# What a replay held before it kept its P90s, E2E P99, offered rate, concurrency and quantiles.
OLD_REPLAY_KEYS = ("rate_scale", "output_tok_s", "slo_ok", "send_lag_p99_ms", "client_bound",
                   "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "e2e_p50_ms",
                   "error_rate")


def _gather(url: str, campaign: str) -> CampaignReport:
    engine = open_database(url)
    try:
        with session_scope(engine) as s:
            return report_data.gather(s, report_data.find_campaign(s, campaign), url)
    finally:
        engine.dispose()


def _stored(db: ReportDb) -> dict[int, dict[str, Any]]:
    """Each trial of the 8-trial campaign as stored: role, feasibility, capacity, replays."""
    engine = open_database(db.url)
    try:
        with session_scope(engine) as s:
            c = s.get(Campaign, db.campaign_id)
            assert c is not None
            return {t.number: {"role": t.role, "feasible": t.feasible, "repeat_of": t.repeat_of,
                               "capacity": t.capacity_output_tok_s, "replays": list(t.replays)}
                    for t in c.trials}
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def written(report_db: ReportDb, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_report(_gather(report_db.url, report_db.campaign),
                        tmp_path_factory.mktemp("sweep") / "report")


@pytest.mark.e2e
@pytest.mark.parametrize("read", [pd.read_csv, pd.read_json], ids=["csv", "json"])
def test_trials_export_loads_with_pandas(report_db: ReportDb, written: Path, read: Any) -> None:
    stored = _stored(report_db)
    frame = read(written / ("trials.csv" if read is pd.read_csv else "trials.json"))
    assert list(frame.columns[:len(exports.TRIAL_COLUMNS)]) == list(exports.TRIAL_COLUMNS)
    assert "arg.max_num_seqs" in frame.columns and "constraint.ttft_p99_ms" in frame.columns
    assert list(frame["trial"]) == sorted(stored)
    rows = frame.set_index("trial")
    for number, t in stored.items():
        row = rows.loc[number]
        assert bool(row["feasible"]) == t["feasible"] and row["role"] == t["role"]
        assert row["replays"] == len(t["replays"])
        assert row["capacity_output_tok_s"] == pytest.approx(t["capacity"])
        if t["feasible"]:
            assert row["capacity_output_tok_s_per_gpu"] == pytest.approx(t["capacity"] / GPUS)
            assert row["ttft_p50_ms"] <= row["ttft_p90_ms"] <= row["ttft_p99_ms"]
        else:
            assert pd.isna(row["capacity_output_tok_s_per_gpu"])
    assert set(frame["campaign"]) == {report_db.campaign} and set(frame["gpus"]) == {GPUS}


@pytest.mark.e2e
@pytest.mark.parametrize("read", [pd.read_csv, pd.read_json], ids=["csv", "json"])
def test_replays_export_loads_with_pandas(report_db: ReportDb, written: Path, read: Any) -> None:
    stored = _stored(report_db)
    frame = read(written / ("replays.csv" if read is pd.read_csv else "replays.json"))
    assert list(frame.columns) == list(exports.REPLAY_COLUMNS)
    # One row per stored replay, trial by trial in the order the search ran them.
    expected = [(n, i, r["rate_scale"]) for n, t in sorted(stored.items())
                for i, r in enumerate(t["replays"])]
    assert [(n, i) for n, i, _ in expected] == list(zip(frame["trial"], frame["replay"],
                                                         strict=True))
    # (pandas reads JSON floats to 15 digits unless told precise_float=True.)
    assert frame["rate_scale"].to_numpy() == pytest.approx([x for _, _, x in expected])
    trace = load_trace(DEMO_TRACE)
    recorded = len(trace) / trace.duration_s
    assert frame["offered_request_s"].to_numpy() == pytest.approx(recorded * frame["rate_scale"])
    for metric in ("ttft", "tpot", "e2e"):
        assert (frame[f"{metric}_p50_ms"] <= frame[f"{metric}_p90_ms"]).all()
        assert (frame[f"{metric}_p90_ms"] <= frame[f"{metric}_p99_ms"]).all()
    assert frame["output_tok_s_per_gpu"].to_numpy() == pytest.approx(frame["output_tok_s"] / GPUS)
    assert frame["output_tok_s_per_user"].to_numpy() == pytest.approx(
        frame["output_tok_s"] / frame["mean_concurrent_requests"])
    # The replay taken as capacity: one per feasible trial, with the trial's capacity.
    at = frame[frame["at_capacity"].astype(bool)].set_index("trial")
    feasible = {n for n, t in stored.items() if t["feasible"]}
    assert set(at.index) == feasible
    for n in feasible:
        assert at.loc[n, "output_tok_s"] == pytest.approx(stored[n]["capacity"])
        assert bool(at.loc[n, "slo_ok"])


@pytest.mark.e2e
def test_quantiles_export_is_the_distribution_at_capacity(report_db: ReportDb,
                                                          written: Path) -> None:
    stored = _stored(report_db)
    csv, js = pd.read_csv(written / "quantiles.csv"), pd.read_json(written / "quantiles.json")
    assert list(csv.columns) == list(js.columns) == list(exports.QUANTILE_COLUMNS)
    assert len(csv) == len(js)
    feasible = sorted(n for n, t in stored.items() if t["feasible"])
    assert sorted(set(csv["trial"])) == feasible
    replays = pd.read_csv(written / "replays.csv")
    for n in feasible:
        mine = csv[csv["trial"] == n]
        assert list(mine["percentile"]) == list(QUANTILE_PCTS)
        assert mine["e2e_ms"].is_monotonic_increasing
        at = replays[(replays["trial"] == n) & replays["at_capacity"]].iloc[0]
        median = mine[mine["percentile"] == 50.0].iloc[0]
        assert median["ttft_ms"] == pytest.approx(at["ttft_p50_ms"])
        assert median["tpot_ms"] == pytest.approx(at["tpot_p50_ms"])


@pytest.mark.e2e
def test_the_page_draws_the_sweep_views(report_db: ReportDb, written: Path) -> None:
    stored = _stored(report_db)
    page = _parse(written / "index.html")
    for view in ("latency-vs-load", "latency-cdf", "pareto"):
        assert view in page.image_ids, page.image_ids
        assert f"{view}-none" not in page.ids
    assert "Not drawn for" not in " ".join(page.text)  # every config drawn has the figures
    assert all(src.startswith(DATA_PNG) for src in page.images)
    # The configs drawn: the winner first, then the baselines, then the best other ones.
    rows = page.rows["sweep-capacity"]
    head, body = rows[0][1], [cells for _, cells in rows[1:]]
    labels = [cells[0] for cells in body]
    assert labels[0].startswith("winner #")
    winner = int(labels[0].split("#")[1].split()[0])
    assert stored[winner]["capacity"] == max(t["capacity"] for t in stored.values())
    for role in ("guide-heuristic", "vllm-recipe"):
        number = next(n for n, t in stored.items() if t["role"] == role)
        assert f"{role} #{number}" in labels or stored[number]["role"] in labels[0]
    proposed = sorted((n for n, t in stored.items() if t["feasible"] and t["role"] == "proposed"
                       and n != winner), key=lambda n: -stored[n]["capacity"])
    best_others = [f"#{n}" for n in proposed[:report_data.TOP_CONFIGS]]  # as many as there are
    assert best_others and labels[len(labels) - len(best_others):] == best_others
    # Each row is that config's replay at capacity.
    tok_s = head.index("output tok/s")
    for label, cells in zip(labels, body, strict=True):
        number = int(label.split("#")[1].split()[0])
        assert cells[tok_s] == f"{stored[number]['capacity']:,.0f}"
        assert cells[head.index("SLO")] == "capacity"
    drawn = {int(label.split("#")[1].split()[0]) for label in labels}
    assert len(page.rows["sweep-replays"]) - 1 == sum(len(stored[n]["replays"]) for n in drawn)


@pytest.mark.e2e
def test_a_campaign_stored_before_replays_kept_percentiles(report_db: ReportDb,
                                                           tmp_path: Path) -> None:
    """Its replays hold only the multiplier, throughput, SLO verdict and a few latencies: the
    report still renders, the sweep views say why they are not drawn, the exports load."""
    old_url = f"sqlite:///{tmp_path / 'old.db'}"
    # A copy through SQLite's backup: the file alone would miss what its WAL still holds.
    with sqlite3.connect(report_db.url.removeprefix("sqlite:///")) as src, \
            sqlite3.connect(tmp_path / "old.db") as dst:
        src.backup(dst)
    engine = open_database(old_url)
    try:
        with session_scope(engine) as s:
            c = s.get(Campaign, report_db.campaign_id)
            assert c is not None
            for t in c.trials:
                t.replays = [{k: r[k] for k in OLD_REPLAY_KEYS if k in r} for r in t.replays]
    finally:
        engine.dispose()
    out = write_report(_gather(old_url, report_db.campaign), tmp_path / "report")
    assert not any((out / f).exists() for f in (plots.LATENCY_VS_LOAD_PNG, plots.LATENCY_CDF_PNG,
                                                plots.PARETO_PER_GPU_PNG))
    page = _parse(out / "index.html")
    assert {"latency-vs-load-none", "latency-cdf-none", "pareto-none"} <= page.ids
    assert "throughput" in page.image_ids and "capacity" in page.image_ids
    text = " ".join(page.text)
    assert "stored before each replay kept its percentiles" in text
    # The table at capacity still shows what was kept (the replay is found by its multiplier).
    body = page.rows["sweep-capacity"][1:]
    assert body and all(cells[-1] != "-" for _, cells in body)  # tok/s per GPU
    replays = pd.read_csv(out / "replays.csv")
    assert len(replays) == sum(len(t["replays"]) for t in _stored(report_db).values())
    assert replays["offered_request_s"].isna().all() and replays["ttft_p90_ms"].isna().all()
    assert replays["ttft_p99_ms"].notna().all()
    assert int(replays["at_capacity"].sum()) == sum(t["feasible"]
                                                    for t in _stored(report_db).values())
    quantiles = pd.read_json(out / "quantiles.json")
    assert len(quantiles) == 0
    assert len(pd.read_json(out / "trials.json")) == len(_stored(report_db))


@pytest.mark.e2e
def test_a_config_without_percentiles_is_named_and_the_others_drawn(report_db: ReportDb,
                                                                     tmp_path: Path) -> None:
    report = _gather(report_db.url, report_db.campaign)
    label, old = report.sweep_configs()[1]
    stripped = tuple(ReportReplay(index=r.index, rate_scale=r.rate_scale,
                                  output_tok_s=r.output_tok_s, slo_ok=r.slo_ok,
                                  client_bound=r.client_bound, at_capacity=r.at_capacity)
                     for r in old.replays)
    trials = tuple(_with(t, replays=stripped) if t is old else t for t in report.trials)
    out = write_report(_with(report, trials=trials), tmp_path / "report")
    page = _parse(out / "index.html")
    assert {"latency-vs-load", "latency-cdf", "pareto"} <= set(page.image_ids)
    assert {"latency-vs-load-note", "latency-cdf-note", "pareto-note"} <= page.ids
    text = " ".join(page.text)
    assert f"Not drawn for {label}: stored before each replay kept its percentiles" in text
    assert f"Not drawn for {label}: stored before the replay at capacity kept" in text


def _with(record: Any, **changes: Any) -> Any:
    from dataclasses import replace

    return replace(record, **changes)


def _replay(x_user: float, output: float, *, ok: bool = True, at: bool = False) -> ReportReplay:
    return ReportReplay(index=0, rate_scale=1.0, output_tok_s=output, slo_ok=ok,
                        client_bound=False, at_capacity=at, offered_request_s=1.0,
                        mean_concurrent_requests=output / x_user,
                        latency_ms=dict.fromkeys(SWEEP_KEYS, 1.0))


def test_pareto_frontier_is_vllms() -> None:
    """As `vllm bench sweep plot_pareto` takes it: no other point has both more tokens/s/user
    and more tokens/s/GPU (a tie on tokens/s/GPU stays on it, as in vLLM's)."""
    points = [(10.0, 100.0), (20.0, 80.0), (15.0, 70.0), (30.0, 80.0), (5.0, 90.0), (40.0, 10.0)]
    assert plots.pareto_frontier(points) == [(10.0, 100.0), (20.0, 80.0), (30.0, 80.0),
                                             (40.0, 10.0)]
    assert plots.pareto_frontier([]) == []


def test_tokens_per_user_is_output_over_requests_in_flight() -> None:
    r = _replay(50.0, 1000.0)
    assert r.mean_concurrent_requests == pytest.approx(20.0)
    assert r.tokens_per_user == pytest.approx(50.0)
    assert ReportReplay(index=0, rate_scale=1.0, output_tok_s=5.0, slo_ok=True,
                        client_bound=False, at_capacity=False).tokens_per_user is None


def test_curve_orders_by_offered_load_and_drops_client_bound_replays() -> None:
    replays = (ReportReplay(index=0, rate_scale=2.0, output_tok_s=2.0, slo_ok=True,
                            client_bound=False, at_capacity=False, offered_request_s=8.0),
               ReportReplay(index=1, rate_scale=1.0, output_tok_s=1.0, slo_ok=True,
                            client_bound=False, at_capacity=False, offered_request_s=4.0),
               ReportReplay(index=2, rate_scale=4.0, output_tok_s=3.0, slo_ok=False,
                            client_bound=True, at_capacity=False, offered_request_s=16.0),
               ReportReplay(index=3, rate_scale=8.0, output_tok_s=3.0, slo_ok=False,
                            client_bound=False, at_capacity=False))  # stored without a rate
    t = ReportTrial(number=1, role="proposed", state="measured", feasible=True,
                    capacity_output_tok_s=2.0, replays=replays)
    assert [r.index for r in plots.curve(t)] == [1, 0]

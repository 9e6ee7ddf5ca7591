"""`autotune report`: the page and its plots, read back from a real (simulated) campaign."""

from __future__ import annotations

import base64
import re
import struct
from html.parser import HTMLParser
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.release.report import data as report_data
from autotune.release.report import exports, plots
from autotune.release.report.data import ReportTrial
from autotune.release.report.write import write_report
from autotune.storage import repo
from autotune.storage.db import open_database, session_scope
from autotune.storage.models import Campaign
from tests.conftest import run_cli
from tests.release.report.conftest import HOSTILE_MESSAGE, ReportDb

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DATA_PNG = "data:image/png;base64,"
ALL_PLOTS = [plots.THROUGHPUT_LATENCY_PNG, plots.CAPACITY_BY_TRIAL_PNG, plots.IMPORTANCES_PNG,
             plots.LATENCY_VS_LOAD_PNG, plots.LATENCY_CDF_PNG, plots.PARETO_PER_GPU_PNG]


class _Page(HTMLParser):
    """The bits of the report the tests read: table rows (attributes, cell texts) and images."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[tuple[dict[str, str], list[str]]]] = {}
        self.images: list[str] = []
        self.image_ids: list[str] = []
        self.ids: set[str] = set()
        self.links: list[str] = []  # every href and src, the images' left out
        self.text: list[str] = []
        self._table: str | None = None
        self._row: tuple[dict[str, str], list[str]] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.add(a["id"])
        if tag != "img":
            self.links += [a[k] for k in ("href", "src") if k in a]
        if tag == "table":
            self._table = a.get("id", "")
        elif tag == "tr" and self._table is not None:
            self._row = (a, [])
            self.rows.setdefault(self._table, []).append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "img":
            self.images.append(a["src"])
            self.image_ids.append(a.get("id", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row[1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _campaign_facts(db: ReportDb) -> tuple[set[int], set[int], int, float]:
    """(all trial numbers, infeasible ones, winner number, winner capacity) from the database."""
    engine = open_database(db.url)
    try:
        with session_scope(engine) as s:
            c = s.get(Campaign, db.campaign_id)
            assert c is not None
            assert repo.choose_winner(c).basis == repo.BEST_SINGLE
            best = repo.choose_winner(c).trial
            assert best is not None
            return ({t.number for t in c.trials}, {t.number for t in c.trials if not t.feasible},
                    best.number, best.capacity_output_tok_s)
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def report_dir(report_db: ReportDb, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("out") / "q4 report"
    proc = run_cli("report", "--campaign", report_db.campaign, "--deployment", "demo",
                   "--out", str(out), env={"AUTOTUNE_DATABASE_URL": report_db.url})
    assert proc.returncode == 0, proc.stderr
    assert str(out / "index.html") in proc.stdout.replace("\n", "")
    return out


def test_writes_the_page_its_plots_and_exports(report_dir: Path) -> None:
    assert sorted(p.name for p in report_dir.iterdir()) == sorted(
        ["index.html", *ALL_PLOTS, *exports.FILES])


def test_the_page_stands_alone(report_dir: Path, tmp_path: Path) -> None:
    """Every plot is inlined (the PNG written beside it, byte for byte); nothing is loaded from
    a network or a relative path: the page can be mailed or attached on its own."""
    raw = (report_dir / "index.html").read_text(encoding="utf-8")
    page = _parse(report_dir / "index.html")
    assert len(page.images) == len(ALL_PLOTS)
    assert all(src.startswith(DATA_PNG) for src in page.images), [s[:40] for s in page.images]
    inlined = sorted(base64.b64decode(src.removeprefix(DATA_PNG)) for src in page.images)
    assert inlined == sorted((report_dir / f).read_bytes() for f in ALL_PLOTS)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", raw), "a network reference"
    assert "<link" not in raw and "<script" not in raw and "url(" not in raw
    # The only links are to the exports beside it (downloads, not parts of the page).
    assert sorted(page.links) == sorted(exports.FILES)
    alone = tmp_path / "index.html"
    alone.write_text(raw, encoding="utf-8")  # copied away from its directory: still whole
    assert _parse(alone).images == page.images


def test_plots_are_real_pngs(report_dir: Path) -> None:
    pngs = list(report_dir.glob("*.png"))
    assert len(pngs) == len(ALL_PLOTS), pngs
    for png in pngs:
        raw = png.read_bytes()
        assert raw[:8] == PNG_SIGNATURE, png.name
        assert raw[12:16] == b"IHDR"
        width, height = struct.unpack(">II", raw[16:24])
        assert width >= 600 and height >= 200, (png.name, width, height)
        assert len(raw) > 10_000, f"{png.name} is {len(raw)} bytes: an empty canvas?"


def test_names_every_trial_and_the_winner(report_db: ReportDb, report_dir: Path) -> None:
    numbers, _, winner, capacity = _campaign_facts(report_db)
    page = _parse(report_dir / "index.html")
    rows = [r for r in page.rows["trials"][1:] if "data-trial" in r[0]]
    assert {int(attrs["data-trial"]) for attrs, _ in rows} == numbers
    assert [attrs["data-trial"] for attrs, _ in rows if "winner" in attrs["class"].split()] == [
        str(winner)]
    summary = dict(cells for _, cells in page.rows["summary"])  # type: ignore[misc]
    assert summary["Winner"].startswith(f"trial {winner} ")
    assert f"{capacity:,.0f} output tok/s" in summary["Winner"]
    assert summary["Status"] == "completed"
    # No confirmation ran for this campaign: said so, and the winner labelled for what it is.
    assert "the best single measurement (no confirmation ran" in summary["Winner"]
    assert "No confirmation ran for this campaign" in "".join(page.text)
    assert "confirmations" not in page.rows and "Decision" not in summary
    assert "ttft_p99 ≤ 2000 ms" in summary["SLO"]
    # What priced the simulated steps, read from the trials' notes (the demo checkpoint's
    # FP4-expert tables are partly estimated).
    assert summary["Simulator step model"].startswith("partly estimated kernel tables for TP8")
    assert "(from aiconfigurator-core 0.12.0" in summary["Simulator step model"]


def test_marks_infeasible_trials(report_db: ReportDb, report_dir: Path) -> None:
    _, infeasible, _, _ = _campaign_facts(report_db)
    assert infeasible, "the fixture campaign should hold an infeasible trial"
    rows = _parse(report_dir / "index.html").rows["trials"]
    header, body = rows[0][1], [r for r in rows[1:] if "data-trial" in r[0]]
    assert body
    feasible_col = header.index("feasible")
    for attrs, cells in body:
        number = int(attrs["data-trial"])
        classes = attrs["class"].split()
        if number in infeasible:
            assert attrs["data-feasible"] == "false" and cells[feasible_col] == "no"
            assert {"infeasible", "rejected"} & set(classes), (number, classes)
        else:
            assert "feasible" in classes and cells[feasible_col] == "yes", (number, classes)
    # Constraint values are shown per trial, one column each.
    assert any(h.startswith("constraint ttft_p99_ms") for h in header)


def test_compares_winner_incumbent_and_baselines(report_dir: Path) -> None:
    rows = _parse(report_dir / "index.html").rows["comparison"]
    assert rows[0][1][1:] == ["winner", "incumbent", "vllm-default", "guide-heuristic",
                              "vllm-recipe"]
    measured_as = dict((cells[0], cells[1:]) for _, cells in rows[1:])["measured as"]
    assert measured_as[1].startswith("2026Q3: campaign 2026Q3, trial ")
    labels = [cells[0] for _, cells in rows]
    assert "capacity (output tok/s)" in labels and "ttft_p99_ms" in labels


def test_escapes_trial_messages(report_db: ReportDb, report_dir: Path) -> None:
    raw = (report_dir / "index.html").read_text(encoding="utf-8")
    assert "<script" not in raw and 'id="injected"' not in raw
    page = _parse(report_dir / "index.html")
    row = next(cells for attrs, cells in page.rows["trials"][1:]
               if attrs.get("data-message-for") == str(report_db.hostile_trial))
    assert row == [HOSTILE_MESSAGE]  # shown as text, exactly


def test_campaign_by_id(report_db: ReportDb, tmp_path: Path) -> None:
    proc = run_cli("report", "--campaign", str(report_db.campaign_id), "--out",
                   str(tmp_path / "r"), env={"AUTOTUNE_DATABASE_URL": report_db.url})
    assert proc.returncode == 0, proc.stderr
    summary = dict(cells for _, cells in _parse(tmp_path / "r" / "index.html")  # type: ignore[misc]
                   .rows["summary"])
    assert summary["Optuna study"] == f"demo:{report_db.campaign}"


def test_too_few_trials_for_importances_is_a_note(tmp_path: Path) -> None:
    from autotune.storage.db import upgrade
    from tests.release.report.conftest import run_campaign

    url = f"sqlite:///{tmp_path / 'few.db'}"
    upgrade(url)
    run_campaign(url, "tiny", 2)  # the two baselines only
    engine = open_database(url)
    try:
        with session_scope(engine) as s:
            report = report_data.gather(s, report_data.find_campaign(s, "tiny"), url)
    finally:
        engine.dispose()
    assert report.importances.values == {}
    assert "only 2 complete trial(s)" in (report.importances.note or "")
    out = write_report(report, tmp_path / "r")
    assert (out / plots.THROUGHPUT_LATENCY_PNG).is_file()
    assert not (out / plots.IMPORTANCES_PNG).exists()
    assert "parameter importances need at least" in "".join(_parse(out / "index.html").text)


def test_a_failure_midway_leaves_no_directory(report_db: ReportDb, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    engine = open_database(report_db.url)
    try:
        with session_scope(engine) as s:
            report = report_data.gather(s, report_data.find_campaign(s, report_db.campaign),
                                        report_db.url)
    finally:
        engine.dispose()

    def broken(*_: object) -> bool:
        raise RuntimeError("disk full")

    # The two first plots are written by then: a non-atomic writer would leave them behind.
    monkeypatch.setattr(plots, "plot_importances", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        write_report(report, tmp_path / "new")
    assert list(tmp_path.iterdir()) == []

    # An earlier report stays whole when its replacement fails.
    monkeypatch.undo()
    old = write_report(report, tmp_path / "kept")
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    monkeypatch.setattr(plots, "plot_importances", broken)
    with pytest.raises(RuntimeError):
        write_report(report, old)
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["kept"]


def test_refuses_a_directory_that_is_not_a_report(report_db: ReportDb, tmp_path: Path) -> None:
    mine = tmp_path / "thesis"
    mine.mkdir()
    (mine / "chapter1.tex").write_text("precious")
    proc = run_cli("report", "--campaign", report_db.campaign, "--out", str(mine),
                   env={"AUTOTUNE_DATABASE_URL": report_db.url})
    assert proc.returncode == 2, proc.stderr
    assert "holds no report" in proc.stderr
    assert [p.name for p in mine.iterdir()] == ["chapter1.tex"]
    assert [p.name for p in tmp_path.iterdir()] == ["thesis"]


def test_unknown_campaign_is_one_line_and_exit_2(report_db: ReportDb, tmp_path: Path) -> None:
    proc = run_cli("report", "--campaign", "1999Q1", "--out", str(tmp_path / "r"),
                   env={"AUTOTUNE_DATABASE_URL": report_db.url})
    assert proc.returncode == 2
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert lines == ["autotune: error: no campaign named '1999Q1'; list them with "
                     "`autotune campaigns`"]
    assert not (tmp_path / "r").exists()


def _trial(number: int, feasible: bool, capacity: float) -> ReportTrial:
    return ReportTrial(number=number, role="proposed", state="measured", feasible=feasible,
                       capacity_output_tok_s=capacity)


def test_pareto_front_keeps_only_undominated_points() -> None:
    points = [(100.0, 10.0), (50.0, 5.0), (200.0, 8.0), (300.0, 30.0), (50.0, 4.0), (400.0, 30.0)]
    assert plots.pareto_front(points) == [(50.0, 5.0), (100.0, 10.0), (300.0, 30.0)]


def test_best_so_far_follows_feasible_trials_only() -> None:
    trials = [_trial(0, False, 0.0), _trial(1, True, 5.0), _trial(2, False, 0.0),
              _trial(3, True, 4.0), _trial(4, True, 9.0)]
    assert plots.best_so_far(trials) == [(1, 5.0), (2, 5.0), (3, 5.0), (4, 9.0)]


def test_not_a_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "file.html"
    target.write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        write_report(None, target)  # type: ignore[arg-type]  # refused before anything is read

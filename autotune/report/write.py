"""Writing a report directory so that it is complete or absent (`autotune.atomic`)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from autotune.atomic import atomic_directory
from autotune.errors import ConfigError
from autotune.report import html, plots
from autotune.report.data import CampaignReport

INDEX = "index.html"


def _check_target(out_dir: Path) -> None:
    """Refuse to replace anything but an empty directory or an earlier report."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} is a file; give a directory for the report")
    if any(out_dir.iterdir()) and not (out_dir / INDEX).is_file():
        raise ConfigError(f"--out {out_dir} is a non-empty directory that holds no report; "
                          "give a new or empty directory")


def _fill(report: CampaignReport, tmp: Path) -> None:
    plots.plot_throughput_latency(report, tmp / plots.THROUGHPUT_LATENCY_PNG)
    plots.plot_capacity_by_trial(report, tmp / plots.CAPACITY_BY_TRIAL_PNG)
    importances = (plots.IMPORTANCES_PNG
                   if plots.plot_importances(report, tmp / plots.IMPORTANCES_PNG) else None)
    page = html.render(report, throughput_png=plots.THROUGHPUT_LATENCY_PNG,
                       capacity_png=plots.CAPACITY_BY_TRIAL_PNG, importances_png=importances,
                       generated_at=datetime.now(UTC))
    (tmp / INDEX).write_text(page, encoding="utf-8")


def write_report(report: CampaignReport, out_dir: Path) -> Path:
    """Write index.html and its PNGs to out_dir (replacing an earlier report there)."""
    out_dir = out_dir.resolve()
    _check_target(out_dir)
    atomic_directory(out_dir, lambda tmp: _fill(report, tmp))
    return out_dir

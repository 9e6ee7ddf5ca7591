"""Writing a report directory so that it is complete or absent (`autotune.atomic`): index.html
(self-contained: its plots inlined as data URIs), the same plots as PNG files, and the exports
(trials, replays, quantiles at capacity) as CSV and JSON."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path

from autotune.atomic import atomic_directory
from autotune.errors import SettingError
from autotune.release.report import exports, html, plots
from autotune.release.report.data import CampaignReport

INDEX = "index.html"


def _check_target(out_dir: Path) -> None:
    """Refuse to replace anything but an empty directory or an earlier report."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise SettingError("{out_dir} {path} is a file; give a directory for the report",
                           path=out_dir)
    if any(out_dir.iterdir()) and not (out_dir / INDEX).is_file():
        raise SettingError("{out_dir} {path} is a non-empty directory that holds no report; "
                           "give a new or empty directory", path=out_dir)


def data_uri(png: Path) -> str:
    """A PNG as a data URI: the page carries its images and opens alone (mailed, attached)."""
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")


def _fill(report: CampaignReport, tmp: Path) -> None:
    plots.plot_throughput_latency(report, tmp / plots.THROUGHPUT_LATENCY_PNG)
    plots.plot_capacity_by_trial(report, tmp / plots.CAPACITY_BY_TRIAL_PNG)
    drawn = {"throughput": plots.THROUGHPUT_LATENCY_PNG, "capacity": plots.CAPACITY_BY_TRIAL_PNG}
    optional = (("importances", plots.plot_importances, plots.IMPORTANCES_PNG),
                ("latency_vs_load", plots.plot_latency_vs_load, plots.LATENCY_VS_LOAD_PNG),
                ("latency_cdf", plots.plot_latency_cdf, plots.LATENCY_CDF_PNG),
                ("pareto", plots.plot_pareto_per_gpu, plots.PARETO_PER_GPU_PNG))
    for name, draw, file in optional:
        if draw(report, tmp / file):
            drawn[name] = file
    exports.write_exports(report, tmp)
    page = html.render(report, images={k: data_uri(tmp / f) for k, f in drawn.items()},
                       exports=exports.FILES, generated_at=datetime.now(UTC))
    (tmp / INDEX).write_text(page, encoding="utf-8")


def write_report(report: CampaignReport, out_dir: Path) -> Path:
    """Write index.html, its PNGs and the exports to out_dir (replacing an earlier report
    there)."""
    out_dir = out_dir.resolve()
    _check_target(out_dir)
    atomic_directory(out_dir, lambda tmp: _fill(report, tmp))
    return out_dir

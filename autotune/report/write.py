"""Writing a report directory so that it is complete or absent: everything goes into a
temporary directory beside the target, which is renamed into place only at the end."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

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
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.", suffix=".tmp"))
    try:
        _fill(report, tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; a report is meant to be served and shared
        if out_dir.exists():
            # Two renames: the old report stays whole until the new one is in place.
            old = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.",
                                        suffix=".old"))
            os.replace(out_dir, old)
            try:
                os.replace(tmp, out_dir)
            except BaseException:
                os.replace(old, out_dir)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out_dir)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
        raise
    return out_dir

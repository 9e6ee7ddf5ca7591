"""`autotune report`: a campaign as an HTML page with PNG plots.

    gather(session, campaign, storage_url) -> CampaignReport   (data: the database, read once)
    write_report(report, out_dir) -> Path                      (plots + html, written atomically)
"""

from __future__ import annotations

from autotune.release.report.data import CampaignReport, find_campaign, gather
from autotune.release.report.write import INDEX, write_report

__all__ = ["INDEX", "CampaignReport", "find_campaign", "gather", "write_report"]

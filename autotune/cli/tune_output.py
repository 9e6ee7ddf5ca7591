"""How `autotune tune` shows a campaign that autotune.campaign.run runs: its lines, the live view,
the result, the per-path table; and the --json object it builds on the way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from sqlalchemy.orm import Session

from autotune.campaign.per_path import PathSummary
from autotune.cli import json_views
from autotune.cli.flags import TUNE_FLAGS, flag_message
from autotune.cli.live import progress_observer
from autotune.cli.render import per_path_table
from autotune.cli.report import print_campaign_result
from autotune.domain.engine_config import EngineConfig
from autotune.errors import SettingText
from autotune.release.result import campaign_result
from autotune.storage.models import Campaign


class TuneOutput:
    """autotune.campaign.run.CampaignOutput on the terminal (stdout) and stderr; `view` holds the
    main campaign's --json object once its result is shown."""

    def __init__(self, console: Console, err: Console) -> None:
        self.console, self.err = console, err
        self.view: dict[str, Any] = {}

    def say(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def warn(self, line: str | SettingText) -> None:
        text = flag_message(line, TUNE_FLAGS) if isinstance(line, SettingText) else line
        self.err.print(text, markup=False, highlight=False, soft_wrap=True)

    def progress(self) -> Any:
        return progress_observer(self.console)

    def result(self, session: Session, campaign: Campaign, url: str,
               already_completed: bool) -> None:
        shown = campaign_result(session, campaign)
        print_campaign_result(self.console, shown)
        self.view = json_views.campaign_result(shown, already_completed=already_completed)


def render_paths(console: Console, summaries: Sequence[PathSummary], campaign: str,
                 parent: str) -> list[dict[str, Any]]:
    """Print the paths beside the single config and how to publish them; their --json rows."""
    console.print(per_path_table(list(summaries)))
    for row in summaries:
        if row.winner_config:
            console.print(f"{row.deployment} (path {row.path}) engine arguments:")
            console.print("  " + " ".join(EngineConfig(**row.winner_config).to_cli_args()),
                          soft_wrap=True)
    console.print(f"\nPublish every path's config: autotune publish --campaign "
                  f"{campaign} --deployment {parent} --per-path", soft_wrap=True)
    return [json_views.path_result(row) for row in summaries]

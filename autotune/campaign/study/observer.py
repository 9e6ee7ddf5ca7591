"""The hooks a progress display gets from a running campaign."""

from __future__ import annotations

import logging

from autotune.campaign.study.request import CampaignRequest
from autotune.domain.trial_record import TrialRecord
from autotune.errors import SettingText
from autotune.measure import progress


class Observer:
    """Hooks for progress displays; the controller never draws anything itself."""

    def on_start(self, request: CampaignRequest) -> None: ...

    def on_trial(self, record: TrialRecord) -> None: ...

    def on_event(self, event: progress.Event) -> None:
        """What happens while trials run (autotune.measure.progress): called in the controller's thread,
        the replay steps of trials included (inline, or carried back from Ray workers)."""


class QuietProgress(Observer):
    """The progress display of a library call: none."""

    def close(self) -> None: ...


class LoggedOutput:
    """What a campaign or a quarterly run shows, when called as a library: its lines go to the
    `autotune` logger, nothing is drawn, and the result is the caller's to read from the return
    value and the database."""

    def __init__(self) -> None:
        self.log = logging.getLogger("autotune")

    def say(self, line: str) -> None:
        self.log.info("%s", line)

    def warn(self, line: str | SettingText) -> None:
        self.log.warning("%s", line)  # a SettingText names settings as the library does

    def progress(self) -> QuietProgress:
        return QuietProgress()

    def result(self, *args: object, **kwargs: object) -> None: ...

    def decided(self, *args: object, **kwargs: object) -> None: ...

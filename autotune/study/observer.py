"""The hooks a progress display gets from a running campaign."""

from __future__ import annotations

from autotune import progress
from autotune.study.request import CampaignRequest
from autotune.trial_record import TrialRecord


class Observer:
    """Hooks for progress displays; the controller never draws anything itself."""

    def on_start(self, request: CampaignRequest) -> None: ...

    def on_trial(self, record: TrialRecord) -> None: ...

    def on_event(self, event: progress.Event) -> None:
        """What happens while trials run (autotune.progress): called in the controller's thread,
        the replay steps of trials included (inline, or carried back from Ray workers)."""

"""The hooks a progress display gets from a running campaign."""

from __future__ import annotations

from autotune.campaign.study.request import CampaignRequest
from autotune.domain.trial_record import TrialRecord
from autotune.measure import progress


class Observer:
    """Hooks for progress displays; the controller never draws anything itself."""

    def on_start(self, request: CampaignRequest) -> None: ...

    def on_trial(self, record: TrialRecord) -> None: ...

    def on_event(self, event: progress.Event) -> None:
        """What happens while trials run (autotune.measure.progress): called in the controller's thread,
        the replay steps of trials included (inline, or carried back from Ray workers)."""

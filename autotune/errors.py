"""The one error tree of autotune.

Every message says what was wrong and how to fix it; the CLI prints it as one line and exits 2,
the API turns it into one JSON error shape.

    AutotuneError
    ├── ConfigError          bad flag, setting or SLO string
    │   ├── CampaignBusyError    another live job runs the campaign
    │   └── InfrastructureError  the workers or the cluster fail, not the configs
    ├── SearchSpaceError     unknown parameter, bad rule, malformed space file
    ├── TraceError           missing or malformed trace
    ├── StorageError         database unreachable or not migrated
    ├── NotFoundError        no such deployment, campaign, trial or publication
    ├── EngineStartError     an engine could not start (failure_class says why)
    ├── ReplayError          replaying traffic against an engine failed
    └── TrialTimeoutError    a trial ran past its time limit
"""

from __future__ import annotations

from autotune.vocabulary import FailureClass


class AutotuneError(Exception):
    """Root of every error autotune raises on purpose."""


class ConfigError(AutotuneError):
    pass


class CampaignBusyError(ConfigError):
    """Another live job holds the campaign's lease (`autotune quarterly` exits 3)."""


class InfrastructureError(ConfigError):
    """The cluster or the workers failed, not a config (`autotune quarterly` exits 5). A
    ConfigError for the other commands, which exit 2 on any error."""


class SearchSpaceError(AutotuneError):
    pass


class TraceError(AutotuneError):
    pass


class StorageError(AutotuneError):
    pass


class NotFoundError(AutotuneError):
    pass


class EngineStartError(AutotuneError):
    """An engine failed to start; `failure_class` says why."""

    def __init__(self, message: str,
                 failure_class: FailureClass = FailureClass.START_FAILED) -> None:
        super().__init__(message)
        self.failure_class = failure_class


class ReplayError(AutotuneError):
    """A replay could not be completed: the engine died ("engine_crash") or GPU memory crossed
    the abort watermark ("memory_pressure")."""

    def __init__(self, message: str,
                 failure_class: FailureClass = FailureClass.ENGINE_CRASH) -> None:
        super().__init__(message)
        self.failure_class = failure_class


class TrialTimeoutError(AutotuneError):
    pass

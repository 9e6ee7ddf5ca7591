"""The one error tree of autotune.

Every message says what was wrong and how to fix it; the CLI prints it as one line and exits
with the error's `exit_code` (2: bad input; 5: the infrastructure failed), the API turns it into
one JSON error shape.

    AutotuneError
    ├── ConfigError          bad flag, setting or SLO string
    │   ├── SettingError         a library call's bad setting, named as the caller spells it
    │   └── CampaignBusyError    another live job runs the campaign
    ├── InfrastructureError  the workers or the cluster fail, not the configs (exit 5)
    ├── SearchSpaceError     unknown parameter, bad rule, malformed space file
    ├── TraceError           missing or malformed trace
    ├── StorageError         database unreachable or not migrated
    ├── NotFoundError        no such deployment, campaign, trial or publication
    ├── EngineStartError     an engine could not start (failure_class says why)
    ├── ReplayError          replaying traffic against an engine failed
    └── TrialTimeoutError    a trial ran past its time limit
"""

from __future__ import annotations

from collections.abc import Callable

from autotune.vocabulary import FailureClass


class SettingText:
    """A line naming the settings it concerns as `{setting}` placeholders: str() names them as
    the library does (gpu_count), `render` as a front end does (the CLI's --gpus). Values go in
    as keywords, so braces in them are never read as placeholders. A warning a library hands its
    front end is one; an error may carry one (AutotuneError's message)."""

    def __init__(self, template: str, **values: object) -> None:
        self.template, self.values = template, values

    def render(self, name_of: Callable[[str], str]) -> str:
        return self.template.format_map(_Names(name_of, self.values))

    def __str__(self) -> str:
        return self.render(lambda setting: setting)


def placeholder(setting: str) -> str:
    """A SettingText's placeholder of a setting chosen at run time."""
    return "{" + setting + "}"


class _Names(dict[str, object]):
    """format_map's lookup: a value given as a keyword, else a setting's name."""

    def __init__(self, name_of: Callable[[str], str], values: dict[str, object]) -> None:
        super().__init__(values)
        self.name_of = name_of

    def __missing__(self, key: str) -> str:
        return self.name_of(key)


class AutotuneError(Exception):
    """Root of every error autotune raises on purpose. Its message is a string, or a SettingText
    where it names settings (then `render` names them as a front end does)."""

    exit_code = 2  # the CLI's: bad input, nothing was done

    def __init__(self, message: object = "", *args: object) -> None:
        self.setting_text = message if isinstance(message, SettingText) else None
        super().__init__(str(message), *args)

    def render(self, name_of: Callable[[str], str]) -> str:
        return self.setting_text.render(name_of) if self.setting_text else str(self)

    def __reduce__(self) -> str | tuple[object, ...]:
        if self.setting_text is None:
            return super().__reduce__()
        # Pickled (a worker process, Ray) as the text's template and values, not as the
        # rendered line, so that the front end still names the settings its own way.
        return _with_setting_text, (type(self), self.setting_text.template,
                                    self.setting_text.values)


def _with_setting_text(cls: type[AutotuneError], template: str,
                       values: dict[str, object]) -> AutotuneError:
    if issubclass(cls, SettingError):
        return cls(template, **values)
    return cls(SettingText(template, **values))


class ConfigError(AutotuneError):
    pass


class SettingError(ConfigError):
    """Bad input to a library call (a campaign, a traffic shape, a capture, ...), its message a
    SettingText built from `template` and `values`."""

    def __init__(self, template: str, **values: object) -> None:
        self.template, self.values = template, values
        super().__init__(SettingText(template, **values))


class CampaignBusyError(ConfigError):
    """Another live job holds the campaign's lease (`autotune quarterly` exits 3)."""


class InfrastructureError(AutotuneError):
    """The cluster or the workers failed, not a config or the user's input: retry when it is
    back (a campaign resumes where it stopped)."""

    exit_code = 5


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

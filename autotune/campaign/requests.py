"""What a campaign (`run_campaign`) and a quarterly re-tune (`run_quarterly`) are asked to do, as
validated pydantic models. Every check that needs neither the database nor the settings runs
here, once, when the model is built; an invalid value raises SettingError naming the setting
(the field), which the CLI renders with its flag.

The checks run in one model validator, in a fixed order, so that of several bad values the
same one is named every time (the CLI's order before these models existed). An SLO setting is
read there too, once: it comes in as text (or an SLO) and leaves as an SLO.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PrivateAttr,
    SkipValidation,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

# The CLI builds its options from these models as it starts (`autotune --help`), so only light
# modules are imported here; the checks import those that load Optuna or numpy where they run.
from autotune.campaign import budget as budgets
from autotune.domain.slo import DEFAULT_SLO, SLO, parse_slo
from autotune.errors import SettingError, placeholder

if TYPE_CHECKING:
    from autotune.campaign.confirm import ConfirmPlan

DEFAULT_SCREEN_TOP = 3  # screened configs the real backend measures besides the baselines
PATH_SLOS = {"hot": "slo_hot", "warm": "slo_warm", "cold": "slo_cold"}  # path: its SLO setting


def setting_error(exc: ValidationError) -> SettingError:
    """A pydantic type error (a string for a count, ...) as one SettingError naming the field."""
    first = exc.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else "request"  # engine_args, not its item
    return SettingError(placeholder(field) + ": {message}", message=first["msg"])


def _text_or_slo(value: object) -> object:
    """An SLO setting's type check when its field is validated; the checks read the text."""
    if isinstance(value, str | SLO):
        return value
    raise PydanticCustomError("string_type", "Input should be a valid string")  # as str's check


# An SLO setting: text or an SLO when the model is built, an SLO once the checks have read it.
# Read by the checks, not when its field is validated, so that of several bad values the same
# one is named as before.
SLOSetting = Annotated[SLO, SkipValidation, BeforeValidator(_text_or_slo)]


class _RunRequest(BaseModel):
    """What a campaign and a quarterly run share: budget, executor, real-engine and
    confirmation settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: Path | None = None
    max_gpu_hours: float | None = None
    deadline: str | None = None  # ISO 8601, UTC where no zone is given
    parallel: int = 1
    ray_address: str | None = None
    model_path: str | None = None
    engine_args: list[str] = []
    confirm_top: int = 3
    confirm_repeats: int = 3

    _deadline_epoch_s: float | None = PrivateAttr(default=None)

    @classmethod
    def of(cls, **values: Any) -> Self:
        """Built from plain values; every invalid one raises SettingError."""
        try:
            return cls(**values)
        except ValidationError as exc:
            raise setting_error(exc) from None

    def _read_slo(self, setting: str) -> None:
        """The SLO setting's text as its SLO; parse_slo's errors name the problem."""
        text = getattr(self, setting)
        if isinstance(text, str):
            object.__setattr__(self, setting, parse_slo(text))  # frozen, but still being built

    def budget(self) -> budgets.Budget:
        return budgets.Budget(max_gpu_hours=self.max_gpu_hours,
                              deadline_epoch_s=self._deadline_epoch_s)

    def _check_budget(self, now: datetime) -> None:
        budgets.check_max_gpu_hours(self.max_gpu_hours)
        self._deadline_epoch_s = budgets.parse_deadline(self.deadline, now)

    def _check_parallel(self) -> None:
        if self.parallel < 1:
            raise SettingError("{parallel} must be at least 1")

    def _check_confirmation(self) -> None:
        if self.confirm_top < 0:
            raise SettingError("{confirm_top} must be 0 (no confirmation) or more")
        if self.confirm_top and self.confirm_repeats < 2:
            raise SettingError("{confirm_repeats} must be at least 2: one run gives no spread, "
                               "so no confidence bound")

    def confirm_plan(self, seed: int) -> ConfirmPlan | None:
        """None: no confirmation (confirm_top 0)."""
        from autotune.campaign.confirm import ConfirmPlan

        if not self.confirm_top:
            return None
        return ConfirmPlan(top=self.confirm_top, repeats=self.confirm_repeats, base_seed=seed)


class TuneRequest(_RunRequest):
    """One campaign (`autotune tune`), with its per-path campaigns if asked for."""

    deployment: str = "demo"
    campaign: str = "demo"
    model: str = "DeepSeek-V4-Flash"
    gpu: str = "H200-141GB"
    gpu_count: int = 8
    tensor_parallel_size: int | None = None  # None: gpu_count
    max_model_len: int = 16384
    traffic_profile: str = "chat"
    allow_accuracy_affecting: bool = True
    # The default as text (`tune --help` shows it so); the checks read it into an SLO.
    slo: SLOSetting = DEFAULT_SLO  # type: ignore[assignment]
    backend: str | None = None  # None: sim, or a multi-fidelity campaign's confirm backend
    screen: str | None = None
    confirm: str | None = None
    screen_top: int | None = None
    executor: str = "inline"
    space: str | None = None
    sampler: str = "tpe"
    max_trials: int = 30
    seed: int = 0
    max_scale: float = 1024.0
    bisect_steps: int = 3
    max_send_lag_ms: float = 5.0
    per_path: bool = False
    paths: str | None = None
    slo_hot: SLOSetting | None = None
    slo_warm: SLOSetting | None = None
    slo_cold: SLOSetting | None = None
    min_path_requests: int = 50
    new_campaign: bool = False

    @model_validator(mode="after")
    def _check(self) -> TuneRequest:
        self._read_slo("slo")
        if self.max_trials < 3:
            raise SettingError("{max_trials} must be at least 3 (two baselines and one proposal)")
        self._check_budget(datetime.now(UTC))
        self._check_parallel()
        if self.max_scale < 1 or self.bisect_steps < 0:
            raise SettingError("{max_scale} must be at least 1 and {bisect_steps} at least 0")
        self._check_fidelities()
        self._check_confirmation()
        self._check_paths()
        return self

    def _check_fidelities(self) -> None:
        from autotune.measure.backends import backend_class

        if self.screen is None:
            if self.confirm is not None or self.screen_top is not None:
                raise SettingError("{confirm} and {screen_top} are for a multi-fidelity "
                                   "campaign; give {screen} sim too (or tune on one backend "
                                   "with {backend})")
            backend_class(self.backend or "sim")  # refuses an unknown name, listing the known
            return
        screen, confirm = self.screen, self.confirm
        if confirm is None:
            raise SettingError("{screen} {got} needs {confirm} BACKEND, the real engine backend "
                               "(vllm) that measures the best screened configs", got=screen)
        if self.backend is not None and self.backend != confirm:
            raise SettingError("{backend} {got} and {confirm} {confirmed} disagree; a "
                               "multi-fidelity campaign's backend is its {confirm} backend "
                               "(leave {backend} out)", got=self.backend, confirmed=confirm)
        if not backend_class(screen).simulated:
            raise SettingError("{screen} {got} is a real engine backend; screening is for a "
                               "simulator (sim). To tune on {got} alone, use {backend} {got}",
                               got=screen)
        if backend_class(confirm).simulated:
            raise SettingError("{confirm} {got} is a simulator; its numbers cannot confirm the "
                               "screening's, give a real engine backend (vllm)", got=confirm)
        if self.screen_top is not None and self.screen_top < 1:
            raise SettingError("{screen_top} must be at least 1: screening picks the configs the "
                               "real backend measures")

    def _check_paths(self) -> None:
        given = [path for path, setting in PATH_SLOS.items() if getattr(self, setting)]
        if not self.tunes_paths and given:
            raise SettingError("{slo_hot}, {slo_warm} and {slo_cold} are for {per_path}")
        groups = self.path_groups()
        for name in given:
            if name not in groups:
                raise SettingError(placeholder(f"slo_{name}") + ": {path} is no path of {paths} "
                                   "{split} (warm is folded into cold)", path=name,
                                   split=",".join(groups))
        for setting in PATH_SLOS.values():
            if getattr(self, setting) == "":  # an empty path SLO is none: the campaign's
                object.__setattr__(self, setting, None)
            self._read_slo(setting)
        if self.tunes_paths and self.min_path_requests < 1:
            raise SettingError("{min_path_requests} must be at least 1")

    @property
    def campaign_backend(self) -> str:
        """The backend whose results are confirmed and published."""
        if self.screen is not None:
            return str(self.confirm)
        return self.backend or "sim"

    @property
    def search_backend(self) -> str:
        """The backend the sampler's proposals are measured on."""
        return self.screen or self.campaign_backend

    @property
    def screen_top_or_default(self) -> int:
        return DEFAULT_SCREEN_TOP if self.screen_top is None else self.screen_top

    @property
    def tunes_paths(self) -> bool:
        return self.per_path or self.paths is not None  # --paths implies --per-path

    def path_groups(self) -> dict[str, tuple[str, ...]]:
        """{path: the guide's paths it holds}; empty without per-path campaigns."""
        from autotune.campaign import per_path as pp

        return pp.parse_paths(self.paths or pp.DEFAULT_PATHS) if self.tunes_paths else {}

    @property
    def path_slos(self) -> dict[str, SLO]:
        """{path: its own SLO} for the paths given one; the others keep the campaign's."""
        return {path: slo for path, setting in PATH_SLOS.items()
                if (slo := getattr(self, setting)) is not None}


class QuarterlyRequest(_RunRequest):
    """The scheduled re-tune of one deployment (`autotune quarterly`); what it leaves out (SLO,
    backend, trace) comes from the deployment's latest campaign."""

    deployment: str
    period: str | None = None  # None: today's quarter
    days: float = 28.0
    force: bool = False
    max_trials: int = 40
    margin_pct: float = 2.0
    slo: SLOSetting | None = None  # None: the latest campaign's
    backend: str | None = None
    published_by: str

    _period: str = PrivateAttr(default="")

    @model_validator(mode="after")
    def _check(self) -> QuarterlyRequest:
        from autotune.campaign import quarterly as q

        now = datetime.now(UTC)
        self._period = q.period_of(self.period, now)
        self._check_budget(now)
        if self.days <= 0:
            raise SettingError("{days} must be positive")
        if self.max_trials < 3:
            raise SettingError("{max_trials} must be at least 3 (the incumbent or a baseline, "
                               "and a proposal)")
        if self.margin_pct < 0:
            raise SettingError("{margin_pct} must be 0 or more")
        self._check_parallel()
        self._check_confirmation()
        if not self.confirm_top:
            raise SettingError("{confirm_top} must be at least 1: the quarterly decision "
                               "compares confirmed capacities")
        self._read_slo("slo")
        return self

    @property
    def period_label(self) -> str:
        """The quarter, e.g. 2026Q4: the one given, else today's."""
        return self._period

"""Response shapes (they are also the OpenAPI schema)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

# Integer columns are 32-bit on PostgreSQL: a bigger id or trial number cannot exist.
MAX_DB_INT = 2**31 - 1


class ErrorBody(BaseModel):
    type: str = Field(description="Stable and machine-readable: NotFoundError, ValidationError, "
                                  "Unauthorized, MethodNotAllowed, InternalError, ...")
    message: str = Field(description="One line: what was wrong and how to fix it.")


class ErrorResponse(BaseModel):
    """The one shape of every error the API answers."""

    error: ErrorBody


def error_docs(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for these error statuses, all in the one error shape."""
    return {status: {"model": ErrorResponse} for status in statuses}


class HistoryEntry(BaseModel):
    period: str
    campaign: str
    trial: int
    published_at: str
    published_by: str
    note: str | None
    capacity_output_tok_s: float = Field(
        description="Capacity under the SLO: the confirmed mean over the confirmation re-runs "
                    "where the config was confirmed, else the search's single measurement "
                    "(capacity_basis says which).")
    capacity_basis: Literal["confirmed_mean", "search_measurement"] = Field(
        description="What capacity_output_tok_s is.")
    search_output_tok_s: float = Field(
        description="The search's single measurement of the config (picked for being high).")
    confirmed_mean_output_tok_s: float | None = Field(
        None, description="Mean capacity over the confirmation re-runs; null if not confirmed.")
    confirmed_std_output_tok_s: float | None = Field(
        None, description="Sample standard deviation over the re-runs.")
    confirmed_lcb_output_tok_s: float | None = Field(
        None, description="One-sided 90% lower confidence bound of the mean: what chose it.")
    confirmed_runs: int | None = Field(None, description="Re-runs that count (not lost).")
    engine_args: dict[str, Any]


class ConfigResponse(HistoryEntry):
    deployment: str
    slo: dict[str, float]
    model: str = Field(description="The catalogue model the deployment was tuned for.")
    served_model: str | None = Field(None, description="What `yaml` names as `model`: the path "
                                     "or id the deployment's real engines loaded, else the "
                                     "model's Hugging Face id; null where neither is known.")
    accuracy_affecting: list[dict[str, Any]] | None = Field(
        None, description="The config's values that change the model's numerics (an fp8 KV "
                          "cache, speculative decoding), each {name, value, why}, judged when "
                          "published; values the model requires are not listed; null in "
                          "publications made before this was recorded.")
    cli_args: list[str]
    yaml: str


class HistoryResponse(BaseModel):
    deployment: str
    publications: list[HistoryEntry]


class Health(BaseModel):
    status: str
    detail: str | None = None


class ConfirmationView(BaseModel):
    """One config's confirmation runs: capacity per arrival seed, mean, sd, CV and the one-sided
    90% lower confidence bound the winner is chosen by."""

    trial: int
    role: str
    seeds: list[int]
    samples: list[float | None]
    n: int
    mean_output_tok_s: float
    std_output_tok_s: float
    cv: float | None
    lcb_output_tok_s: float
    winner: bool


class CampaignSummary(BaseModel):
    id: int
    deployment: str
    name: str
    status: str
    backend: str
    slo: dict[str, float]
    trace_ref: str
    trace_digest: str
    study_name: str
    max_trials: int
    trials: int
    best_trial: int | None
    best_capacity_output_tok_s: float | None
    started_at: str
    finished_at: str | None
    wall_s: float | None
    period: str | None = Field(None, description="The quarter of a `quarterly` campaign.")
    gpu_hours: float = Field(0.0, description="Spent: engine wall time x GPUs, trials and "
                                              "confirmation runs.")
    budget: dict[str, Any] | None = Field(None, description="max_trials, max_gpu_hours, "
                                                            "deadline, as asked.")
    stop_reason: str | None = Field(None, description="max_trials, max_gpu_hours or deadline.")
    winner_trial: int | None = Field(None, description="What publish takes: the confirmed "
                                     "winner (best lower confidence bound) where confirmation "
                                     "ran (null if it confirmed none), else best_trial.")
    confirmations: list[ConfirmationView] = []
    decision: str | None = Field(None, description="The quarterly job's: published, "
                                                   "kept_incumbent or no_feasible.")
    decision_note: str | None = Field(None, description="Why it was decided so.")


class CampaignList(BaseModel):
    campaigns: list[CampaignSummary]


class TrialView(BaseModel):
    number: int
    role: str
    state: str
    feasible: bool
    capacity_output_tok_s: float
    capacity_rate_scale: float
    engine_config: dict[str, Any]
    latency: dict[str, Any] | None
    # null where the value was not finite (JSON has no infinity; the recorder stores null)
    constraints: dict[str, float | None]
    failure_class: str | None
    failure_message: str | None
    repeat_of: int | None


class TrialPage(BaseModel):
    campaign: int
    total: int
    offset: int
    limit: int
    trials: list[TrialView]


class PublishRequest(BaseModel):
    campaign: str = Field(min_length=1, max_length=100)
    trial: int | None = Field(None, ge=0, le=MAX_DB_INT,
                              description="Default: the campaign's winner (its confirmed config; "
                                          "without confirmation, its best feasible trial).")
    period: str | None = Field(None, min_length=1, max_length=20,
                               description="Default: the campaign's name if it is a quarter "
                                           "label like 2026Q4, else this quarter.")
    note: str | None = Field(None, max_length=2000)
    by: str | None = Field(None, min_length=1, max_length=100)

"""Response shapes (they are also the OpenAPI schema)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ErrorBody(BaseModel):
    type: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorBody


class HistoryEntry(BaseModel):
    period: str
    campaign: str
    trial: int
    published_at: str
    published_by: str
    note: str | None
    capacity_output_tok_s: float
    engine_args: dict[str, Any]


class ConfigResponse(HistoryEntry):
    deployment: str
    slo: dict[str, float]
    model: str
    cli_args: list[str]
    yaml: str


class HistoryResponse(BaseModel):
    deployment: str
    publications: list[HistoryEntry]


class Health(BaseModel):
    status: str
    detail: str | None = None


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
    constraints: dict[str, float]
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
    campaign: str
    trial: int | None = None  # default: the campaign's best feasible trial
    period: str | None = None
    note: str | None = None
    by: str | None = None

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

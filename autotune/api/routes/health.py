from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from autotune.api.deps import EngineDep
from autotune.api.errors import ApiError
from autotune.api.schemas import ErrorResponse, Health
from autotune.errors import StorageError
from autotune.storage.db import UPGRADE_HINT, current_revision, head_revision

router = APIRouter(tags=["health"])
_NOT_READY: dict[int | str, dict[str, Any]] = {
    503: {"model": ErrorResponse, "description": "Not ready: the database is unreachable or "
                                                 "not migrated"}}


class NotReady(ApiError):
    def __init__(self, message: str) -> None:
        super().__init__(503, message)


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """Liveness: the process is up and answering (it touches no database)."""
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses=_NOT_READY)
def readyz(engine: EngineDep) -> Health:
    """Readiness: the database is reachable and migrated to head."""
    try:
        current = current_revision(engine)
    except StorageError as exc:
        raise NotReady(str(exc)) from None
    head = head_revision()
    if current != head:
        raise NotReady(f"database at revision {current or 'none'}, head is {head}; {UPGRADE_HINT}")
    return Health(status="ok", detail=f"database at revision {current}")

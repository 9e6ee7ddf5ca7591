from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.deps import EngineDep
from api.schemas import Health
from autotune.errors import StorageError
from autotune.storage.db import current_revision, head_revision

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """The process is up."""
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses={503: {"model": Health}})
def readyz(engine: EngineDep) -> Health | JSONResponse:
    """The database is reachable and migrated to head."""
    try:
        current = current_revision(engine)
    except StorageError as exc:
        return JSONResponse(status_code=503, content={"status": "unavailable", "detail": str(exc)})
    head = head_revision()
    if current != head:
        return JSONResponse(status_code=503, content={
            "status": "unavailable",
            "detail": f"database at revision {current or 'none'}, head is {head}; "
                      "run `autotune db upgrade`"})
    return Health(status="ok", detail=f"database at revision {current}")

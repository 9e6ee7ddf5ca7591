from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import SessionDep
from api.schemas import ConfigResponse, ErrorResponse, HistoryEntry, HistoryResponse
from autotune.publish import config_document
from autotune.storage import repo

router = APIRouter(prefix="/v1/deployments", tags=["deployments"])
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorResponse}}


@router.get("/{name}/config", response_model=ConfigResponse, responses=_NOT_FOUND)
def current_config(name: str, session: SessionDep) -> ConfigResponse:
    """The deployment's current published config."""
    pub = repo.current_publication(session, repo.get_deployment(session, name))
    return ConfigResponse(**config_document(pub))


@router.get("/{name}/history", response_model=HistoryResponse, responses=_NOT_FOUND)
def history(name: str, session: SessionDep) -> HistoryResponse:
    """Every publication of the deployment, newest first."""
    dep = repo.get_deployment(session, name)
    entries = []
    for pub in repo.publications(session, dep):
        doc = config_document(pub)
        entries.append(HistoryEntry(**{k: doc[k] for k in HistoryEntry.model_fields}))
    return HistoryResponse(deployment=dep.name, publications=entries)

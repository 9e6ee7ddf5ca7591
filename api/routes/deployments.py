from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse

from api.deps import SessionDep, WriterDep
from api.schemas import ConfigResponse, ErrorResponse, HistoryEntry, HistoryResponse, PublishRequest
from autotune.errors import NotFoundError
from autotune.publish import config_document, publish_campaign
from autotune.storage import repo

router = APIRouter(prefix="/v1/deployments", tags=["deployments"])
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorResponse}}


# Services poll this; a short max-age and an ETag let them revalidate for free.
CACHE_CONTROL = "public, max-age=60"


@router.get("/{name}/config", response_model=ConfigResponse,
            responses={**_NOT_FOUND, 304: {"description": "Not modified (ETag matched)"}})
def current_config(name: str, session: SessionDep, request: Request,
                   format: Literal["json", "yaml", "args"] = Query(
                       "json", description="json: the whole document; yaml: a file for "
                                           "`vllm serve --config`; args: the CLI flags, one a line")
                   ) -> Response:
    """The deployment's current published config."""
    doc = ConfigResponse(**config_document(
        repo.current_publication(session, repo.get_deployment(session, name)))).model_dump()
    etag = '"' + hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32] + '"'
    headers = {"ETag": etag, "Cache-Control": CACHE_CONTROL}
    if etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    if format == "yaml":
        return PlainTextResponse(doc["yaml"], media_type="application/yaml", headers=headers)
    if format == "args":
        return PlainTextResponse("\n".join(doc["cli_args"]) + "\n", headers=headers)
    return JSONResponse(doc, headers=headers)


@router.get("/{name}/history", response_model=HistoryResponse, responses=_NOT_FOUND)
def history(name: str, session: SessionDep) -> HistoryResponse:
    """Every publication of the deployment, newest first."""
    dep = repo.get_deployment(session, name)
    entries = []
    for pub in repo.publications(session, dep):
        doc = config_document(pub)
        entries.append(HistoryEntry(**{k: doc[k] for k in HistoryEntry.model_fields}))
    return HistoryResponse(deployment=dep.name, publications=entries)


_WRITE = {**_NOT_FOUND, 401: {"model": ErrorResponse}, 403: {"model": ErrorResponse}}


@router.post("/{name}/publish", response_model=ConfigResponse, responses=_WRITE)
def publish(name: str, body: PublishRequest, session: SessionDep, writer: WriterDep) -> ConfigResponse:
    """Publish a campaign's best feasible trial (or a given one) as the current config."""
    repo.get_deployment(session, name)
    pub = publish_campaign(session, body.campaign, deployment=name, trial_number=body.trial,
                           period_label=body.period, published_by=body.by or writer, note=body.note)
    return ConfigResponse(**config_document(pub))


@router.post("/{name}/rollback", response_model=ConfigResponse, responses=_WRITE)
def rollback(name: str, session: SessionDep, writer: WriterDep) -> ConfigResponse:
    """Make the previous publication current again (as a new publication: history keeps all)."""
    pubs = repo.publications(session, repo.get_deployment(session, name))
    if len(pubs) < 2:
        raise NotFoundError(f"deployment {name!r} has no earlier publication to roll back to")
    current, previous = pubs[0], pubs[1]
    pub = repo.publish(session, previous.campaign, previous.trial,
                       period_label=previous.period_label, published_by=writer,
                       note=f"rollback from trial {current.trial.number} of {current.campaign.name}")
    return ConfigResponse(**config_document(pub))

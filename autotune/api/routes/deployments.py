from __future__ import annotations

import hashlib
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse

from autotune import __version__
from autotune.api.deps import SessionDep, WriterDep
from autotune.api.schemas import ConfigResponse, HistoryEntry, HistoryResponse, PublishRequest, error_docs
from autotune.domain.deployment import NAME_MAX_LENGTH, NAME_PATTERN
from autotune.errors import NotFoundError
from autotune.release.publish import config_document, publish_campaign, publish_trial, utc
from autotune.storage import repo
from autotune.storage.models import Publication

router = APIRouter(prefix="/v1/deployments", tags=["deployments"], responses=error_docs(422))
_NOT_FOUND = error_docs(404)
Name = Annotated[str, Path(min_length=1, max_length=NAME_MAX_LENGTH, pattern=NAME_PATTERN,
                           description="The deployment's name.")]


# Services poll this; a short max-age and an ETag let them revalidate for free.
CACHE_CONTROL = "public, max-age=60"


@router.get("/{name}/config", response_model=ConfigResponse,
            responses={**_NOT_FOUND, 304: {"description": "Not modified (ETag matched)"},
                       200: {"content": {"application/yaml": {"schema": {"type": "string"}},
                                         "text/plain": {"schema": {"type": "string"}}},
                             "description": "The config: JSON, YAML (format=yaml) or the CLI "
                                            "flags one a line (format=args)"}})
def current_config(name: Name, session: SessionDep, request: Request,
                   format: Literal["json", "yaml", "args"] = Query(
                       "json", description="json: the whole document; yaml: a file for "
                                           "`vllm serve --config`; args: the CLI flags, one a line")
                   ) -> Response:
    """The deployment's current published config."""
    pub_id, published_at = repo.current_publication_key(session, repo.get_deployment(session, name))
    # A publication never changes (a new config, or a rollback, is a new one), nor do the
    # deployment, campaign, trial and confirmation (written before the campaign completes,
    # and only a completed one is published) its document reads; so its id and time (a recreated
    # database may reuse ids) and the server's version name the document, and a revalidation
    # costs two small queries, not the whole document.
    key = f"{__version__}:{name}:{pub_id}:{utc(published_at).isoformat()}"
    etag = '"' + hashlib.sha256(key.encode()).hexdigest()[:32] + '"'
    headers = {"ETag": etag, "Cache-Control": CACHE_CONTROL}
    if etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    pub = session.get(Publication, pub_id)
    assert pub is not None  # read in this transaction
    doc = ConfigResponse(**config_document(pub)).model_dump()
    if format == "yaml":
        return PlainTextResponse(doc["yaml"], media_type="application/yaml", headers=headers)
    if format == "args":
        return PlainTextResponse("\n".join(doc["cli_args"]) + "\n", headers=headers)
    return JSONResponse(doc, headers=headers)


@router.get("/{name}/history", response_model=HistoryResponse, responses=_NOT_FOUND)
def history(name: Name, session: SessionDep) -> HistoryResponse:
    """Every publication of the deployment, newest first."""
    dep = repo.get_deployment(session, name)
    entries = []
    for pub in repo.publications(session, dep):
        doc = config_document(pub)
        entries.append(HistoryEntry(**{k: doc[k] for k in HistoryEntry.model_fields}))
    return HistoryResponse(deployment=dep.name, publications=entries)


_WRITE = error_docs(400, 401, 403, 404)


@router.post("/{name}/publish", response_model=ConfigResponse, responses=_WRITE)
def publish(name: Name, body: PublishRequest, session: SessionDep, writer: WriterDep) -> ConfigResponse:
    """Publish a campaign's winner (or a given trial) as the current config: the confirmed
    config, or without confirmation the best feasible trial."""
    repo.get_deployment(session, name)
    pub = publish_campaign(session, body.campaign, deployment=name, trial_number=body.trial,
                           period_label=body.period, published_by=body.by or writer, note=body.note)
    return ConfigResponse(**config_document(pub))


@router.post("/{name}/rollback", response_model=ConfigResponse, responses=_WRITE)
def rollback(name: Name, session: SessionDep, writer: WriterDep) -> ConfigResponse:
    """Make the previous publication current again (as a new publication: history keeps all)."""
    pubs = repo.publications(session, repo.get_deployment(session, name))
    if len(pubs) < 2:
        raise NotFoundError(f"deployment {name!r} has no earlier publication to roll back to")
    current, previous = pubs[0], pubs[1]
    pub = publish_trial(session, previous.campaign, previous.trial,
                        period_label=previous.period_label, published_by=writer,
                        served=config_document(previous)["served_model"],
                        note=f"rollback from trial {current.trial.number} of {current.campaign.name}")
    return ConfigResponse(**config_document(pub))

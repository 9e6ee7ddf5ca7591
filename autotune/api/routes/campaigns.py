from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query

from autotune.api.deps import SessionDep
from autotune.api.schemas import (
    MAX_DB_INT,
    CampaignList,
    CampaignSummary,
    ConfirmationView,
    TrialPage,
    TrialView,
    error_docs,
)
from autotune.errors import NotFoundError
from autotune.release.publish import utc
from autotune.storage import repo
from autotune.storage.models import Campaign

router = APIRouter(prefix="/v1/campaigns", tags=["campaigns"], responses=error_docs(422))
_NOT_FOUND = error_docs(404)
CampaignId = Annotated[int, Path(ge=1, le=MAX_DB_INT)]


def _iso(value: Any) -> str | None:
    return utc(value).isoformat() if value is not None else None


def _summary(c: Campaign) -> CampaignSummary:
    best, winner = repo.best_trial(c), repo.choose_winner(c).trial
    return CampaignSummary(
        id=c.id, deployment=c.deployment.name, name=c.name, status=c.status, backend=c.backend,
        slo=c.slo, trace_ref=c.trace_ref, trace_digest=c.trace_digest, study_name=c.study_name,
        max_trials=c.max_trials, trials=len(c.trials), best_trial=best.number if best else None,
        best_capacity_output_tok_s=best.capacity_output_tok_s if best else None,
        started_at=_iso(c.started_at) or "", finished_at=_iso(c.finished_at), wall_s=c.wall_s,
        period=c.period, gpu_hours=c.gpu_hours or 0.0, budget=c.budget,
        stop_reason=c.stop_reason, winner_trial=winner.number if winner else None,
        confirmations=[ConfirmationView(
            trial=r.trial.number, role=r.role, seeds=r.seeds, samples=list(r.samples), n=r.n,
            mean_output_tok_s=r.mean_output_tok_s, std_output_tok_s=r.std_output_tok_s, cv=r.cv,
            lcb_output_tok_s=r.lcb_output_tok_s, winner=r.winner) for r in c.confirmations],
        decision=c.decision, decision_note=c.decision_note)


def _campaign(session: Any, campaign_id: int) -> Campaign:
    campaign = session.get(Campaign, campaign_id)
    if campaign is None:
        raise NotFoundError(f"no campaign with id {campaign_id}; list them at /v1/campaigns")
    return campaign  # type: ignore[no-any-return]


@router.get("", response_model=CampaignList)
def list_campaigns(session: SessionDep) -> CampaignList:
    """Every campaign, oldest first."""
    return CampaignList(campaigns=[_summary(c) for c in repo.list_campaigns(session)])


@router.get("/{campaign_id}", response_model=CampaignSummary, responses=_NOT_FOUND)
def get_campaign(campaign_id: CampaignId, session: SessionDep) -> CampaignSummary:
    return _summary(_campaign(session, campaign_id))


@router.get("/{campaign_id}/trials", response_model=TrialPage, responses=_NOT_FOUND)
def list_trials(campaign_id: CampaignId, session: SessionDep,
                state: Literal["measured", "rejected", "failed"] | None = None,
                offset: int = Query(0, ge=0, le=MAX_DB_INT),
                limit: int = Query(50, ge=1, le=500)) -> TrialPage:
    """A campaign's trials by number, optionally of one state, a page at a time."""
    trials = [t for t in _campaign(session, campaign_id).trials if state is None or t.state == state]
    page = trials[offset:offset + limit]
    return TrialPage(campaign=campaign_id, total=len(trials), offset=offset, limit=limit, trials=[
        TrialView(number=t.number, role=t.role, state=t.state, feasible=t.feasible,
                  capacity_output_tok_s=t.capacity_output_tok_s,
                  capacity_rate_scale=t.capacity_rate_scale, engine_config=t.engine_config,
                  latency=t.latency, constraints=t.constraints, failure_class=t.failure_class,
                  failure_message=t.failure_message, repeat_of=t.repeat_of) for t in page])

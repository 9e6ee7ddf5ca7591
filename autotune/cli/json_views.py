"""The objects `--json` prints: stable keys, documented in docs/reference/json-output.md.

Capacities are output tokens per second, named by the figure they are: `search` (the one
measurement of the search), `confirmed_mean` and `confirmed_lcb` (mean and 90% lower confidence
bound over the confirmation re-runs; null where the config was not confirmed). A gain is in
percent over the other config: `search` from the two single measurements, the confirmed ones as
autotune.release.gains computes them (like with like: the same seeds).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from autotune.domain.engine_config import EngineConfig
from autotune.release import gains
from autotune.release.publish import utc
from autotune.search import accuracy
from autotune.search.baselines import BASELINES
from autotune.storage import repo
from autotune.storage.models import Campaign, Confirmation, Publication, Trial
from autotune.vocabulary import RecordState


def _time(value: datetime | None) -> str | None:
    return utc(value).isoformat() if value is not None else None


def _confirmation(campaign: Campaign, trial: Trial) -> Confirmation | None:
    """A baseline equal to a finalist shares its runs: found by config (repo.confirmation_of)."""
    return repo.confirmation_of(campaign, dict(trial.engine_config))


def _capacity(trial: Trial, conf: Confirmation | None) -> dict[str, float | None]:
    return {"search": trial.capacity_output_tok_s if trial.feasible else None,
            "confirmed_mean": conf.mean_output_tok_s if conf is not None else None,
            "confirmed_lcb": conf.lcb_output_tok_s if conf is not None else None}


def _gain_pct(winner: float | None, other: float | None) -> float | None:
    return None if not winner or not other else 100.0 * (winner / other - 1.0)


def _gains(win_trial: Trial, win_conf: Confirmation | None, base_trial: Trial,
           base_conf: Confirmation | None) -> dict[str, float | None]:
    """The winner's gain over a baseline in percent: from the search's single measurements,
    and from the confirmation runs (autotune.release.gains: on the mean, its 90% CI half-width, and
    the winner's LCB over the baseline's mean) where both were confirmed."""
    confirmed = (gains.gain(gains.Runs.of(win_conf), gains.Runs.of(base_conf))
                 if win_conf is not None and base_conf is not None else None)
    return {"search": _gain_pct(win_trial.capacity_output_tok_s if win_trial.feasible else None,
                                base_trial.capacity_output_tok_s if base_trial.feasible
                                else None),
            "confirmed_mean": confirmed.mean_pct if confirmed else None,
            "confirmed_mean_ci": confirmed.mean_ci_pct if confirmed else None,
            "confirmed_lcb": confirmed.lcb_pct if confirmed else None}


def _config(trial: Trial) -> dict[str, Any]:
    return {"trial": trial.number, "role": trial.role, "feasible": trial.feasible,
            "failure": trial.failure_class, "config": dict(trial.engine_config),
            "engine_args": EngineConfig(**trial.engine_config).to_cli_args(),
            "latency": dict(trial.latency or {})}


def campaign_result(session: Session, campaign: Campaign, *,
                    already_completed: bool = False) -> dict[str, Any]:
    """A campaign's outcome: what `tune --json` prints, and `result` of `quarterly --json`."""
    trials = repo.measured_trials(campaign)
    measured = [t for t in trials if t.state != RecordState.REJECTED]
    chosen = repo.choose_winner(campaign)
    winner: dict[str, Any] | None = None
    win_conf = _confirmation(campaign, chosen.trial) if chosen.trial is not None else None
    if chosen.trial is not None:
        winner = {**_config(chosen.trial),
                  "capacity_output_tok_s": _capacity(chosen.trial, win_conf),
                  "accuracy_affecting": [c.as_json() for c in accuracy.campaign_changes(
                      campaign, chosen.trial.engine_config)]}
    baselines = []
    for role in BASELINES:
        base = next((t for t in trials if t.role == role), None)
        if base is None:
            continue
        conf = _confirmation(campaign, base)
        baselines.append({
            **_config(base), "capacity_output_tok_s": _capacity(base, conf),
            "winner_gain_pct": (_gains(chosen.trial, win_conf, base, conf)
                                if chosen.trial is not None else None)})
    pub = session.scalars(select(Publication).where(Publication.campaign_id == campaign.id)
                          .order_by(Publication.id.desc())).first()
    budget = campaign.budget or {}
    return {
        "campaign": campaign.name,
        "deployment": campaign.deployment.name,
        "study": campaign.study_name,
        "status": campaign.status,
        "already_completed": already_completed,
        "backend": campaign.backend,
        "screen_backend": campaign.screen_backend,
        "search_space": campaign.search_space,
        "slo_ms": dict(campaign.slo),
        "trace": campaign.trace_ref,
        "trace_digest": campaign.trace_digest,
        "trials": {"measured": len(measured), "rejected": len(trials) - len(measured),
                   "screened": len(campaign.trials) - len(trials),
                   "max_trials": campaign.max_trials},
        "spent": {"gpu_hours": campaign.gpu_hours or 0.0, "wall_s": campaign.wall_s or 0.0,
                  "stop_reason": campaign.stop_reason,
                  "budget": {k: v for k, v in budget.items() if v is not None}},
        "winner_basis": chosen.basis,
        "winner": winner,
        "baselines": baselines,
        "confirmations": [{
            "trial": c.trial.number, "role": c.role, "runs": c.n,
            "search_output_tok_s": c.trial.capacity_output_tok_s,
            "mean_output_tok_s": c.mean_output_tok_s, "std_output_tok_s": c.std_output_tok_s,
            "cv": c.cv, "lcb_output_tok_s": c.lcb_output_tok_s, "winner": c.winner}
            for c in campaign.confirmations],
        "decision": ({"outcome": campaign.decision, "note": campaign.decision_note}
                     if campaign.decision else None),
        "published": pub is not None,
        "published_trial": pub.trial.number if pub is not None else None,
    }


def path_result(row: Any) -> dict[str, Any]:
    """One path of `tune --per-path --json` (an autotune.campaign.per_path.PathSummary)."""
    return {"path": row.path, "deployment": row.deployment, "requests": row.requests,
            "of_requests": row.of_requests, "skipped": row.skipped, "search_space": row.space,
            "slo": row.slo, "winner_trial": row.winner_trial,
            "winner_config": row.winner_config,
            "winner_output_tok_s": row.winner_output_tok_s,
            "single_output_tok_s": row.single_output_tok_s, "gain_pct": row.gain_pct,
            "winner_accuracy_affecting": [c.as_json() for c in row.winner_accuracy_affecting]}


def publication(pub: Publication) -> dict[str, Any]:
    return {"id": pub.id, "deployment": pub.deployment.name, "campaign": pub.campaign.name,
            "trial": pub.trial.number, "period": pub.period_label,
            "published_by": pub.published_by, "published_at": _time(pub.published_at),
            "note": pub.note, "config": dict(pub.engine_config),
            "engine_args": EngineConfig(**pub.engine_config).to_cli_args()}


def campaign_row(c: Campaign) -> dict[str, Any]:
    """One row of `campaigns --json`: the table's columns."""
    best = repo.best_trial(c)
    return {"deployment": c.deployment.name, "campaign": c.name, "study": c.study_name,
            "status": c.status, "backend": c.backend, "screen_backend": c.screen_backend,
            "trials": len(c.trials),
            "best_search_output_tok_s": best.capacity_output_tok_s if best else None,
            "gpu_hours": c.gpu_hours or 0.0, "stop_reason": c.stop_reason,
            "started_at": _time(c.started_at), "finished_at": _time(c.finished_at),
            "period": c.period, "decision": c.decision, "decision_note": c.decision_note}


def report_written(data: Any, index: Path) -> dict[str, Any]:
    return {"campaign": data.campaign, "deployment": data.deployment, "study": data.study_name,
            "trials": len(data.trials), "out_dir": str(index.parent), "index": str(index)}

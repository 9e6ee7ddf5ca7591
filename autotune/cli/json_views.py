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

from autotune.domain.engine_config import EngineConfig
from autotune.release.publish import utc
from autotune.release.result import CampaignResult, ConfigResult, Confirmed, WinnerGain
from autotune.storage import repo
from autotune.storage.models import Campaign, Publication


def _time(value: datetime | None) -> str | None:
    return utc(value).isoformat() if value is not None else None


def _capacity(c: ConfigResult) -> dict[str, float | None]:
    return {"search": c.search_output_tok_s, "confirmed_mean": c.confirmed_mean_output_tok_s,
            "confirmed_lcb": c.confirmed_lcb_output_tok_s}


def _gain_pct(g: WinnerGain | None) -> dict[str, float | None] | None:
    if g is None:
        return None
    return {"search": g.search_pct,
            "confirmed_mean": g.confirmed.mean_pct if g.confirmed else None,
            "confirmed_mean_ci": g.confirmed.mean_ci_pct if g.confirmed else None,
            "confirmed_lcb": g.confirmed.lcb_pct if g.confirmed else None}


def _config(c: ConfigResult) -> dict[str, Any]:
    return {"trial": c.trial_number, "role": c.role, "feasible": c.feasible,
            "failure": c.failure_class, "config": dict(c.config),
            "engine_args": list(c.engine_args), "latency": dict(c.latency),
            "capacity_output_tok_s": _capacity(c)}


def _confirmation(c: Confirmed) -> dict[str, Any]:
    return {"trial": c.trial_number, "role": c.role, "runs": c.n,
            "search_output_tok_s": c.search_output_tok_s,
            "mean_output_tok_s": c.mean_output_tok_s, "std_output_tok_s": c.std_output_tok_s,
            "cv": c.cv, "lcb_output_tok_s": c.lcb_output_tok_s, "winner": c.winner}


def campaign_result(result: CampaignResult, *, already_completed: bool = False) -> dict[str, Any]:
    """A campaign's outcome: what `tune --json` prints, and `result` of `quarterly --json`."""
    winner = None if result.winner is None else {
        **_config(result.winner),
        "accuracy_affecting": [c.as_json() for c in result.winner_accuracy_affecting]}
    spent = result.spent
    return {
        "campaign": result.campaign,
        "deployment": result.deployment,
        "study": result.study,
        "status": result.status,
        "already_completed": already_completed,
        "backend": result.backend,
        "screen_backend": result.screen_backend,
        "search_space": result.search_space,
        "slo_ms": dict(result.slo_ms),
        "trace": result.trace,
        "trace_digest": result.trace_digest,
        "trials": {"measured": result.measured, "rejected": result.rejected,
                   "screened": result.screened, "max_trials": result.max_trials},
        "spent": {"gpu_hours": spent.gpu_hours, "wall_s": spent.wall_s,
                  "stop_reason": spent.stop_reason, "budget": dict(spent.budget)},
        "winner_basis": result.winner_basis,
        "winner": winner,
        "baselines": [{**_config(b.config), "winner_gain_pct": _gain_pct(b.winner_gain)}
                      for b in result.baselines],
        "confirmations": [_confirmation(c) for c in result.confirmations],
        "decision": ({"outcome": result.decision, "note": result.decision_note}
                     if result.decision else None),
        "published": result.published_trial is not None,
        "published_trial": result.published_trial,
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

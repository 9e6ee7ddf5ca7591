"""A finished campaign's result: the one view of it that `autotune tune` shows in the terminal and
prints as --json (and `quarterly --json` as its `result`), built once from the database rows.

Capacities are output tokens per second, named by the figure they are: the search's one
measurement, and the confirmation runs (mean, sd and 90% lower confidence bound over re-runs with
other arrival seeds). The winner's gain over a baseline is in percent of the baseline: from the
two search measurements, and from the confirmed figures as autotune.release.gains computes them.
Nothing here formats: autotune.cli.report and autotune.cli.json_views render this object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from autotune.domain.engine_config import EngineConfig
from autotune.domain.trial_record import TrialRecord
from autotune.release import gains
from autotune.search.baselines import BASELINES
from autotune.search.spaces import accuracy
from autotune.storage import repo
from autotune.storage.models import Campaign, Confirmation, Publication, Trial
from autotune.vocabulary import RecordState

TOP_TRIALS = 10  # the trials the terminal summary lists, best first


@dataclass(frozen=True)
class Confirmed:
    """One confirmed config: its re-runs with other arrival seeds (autotune_confirmations)."""

    trial_number: int
    role: str
    search_output_tok_s: float  # the search's single measurement, for comparison
    samples: tuple[float | None, ...]  # capacity per re-run; 0 missed the SLO, None was lost
    failures: tuple[str | None, ...]
    n: int  # the re-runs that count (not lost to the infrastructure)
    mean_output_tok_s: float
    std_output_tok_s: float
    cv: float | None
    lcb_output_tok_s: float
    winner: bool

    @classmethod
    def of(cls, row: Confirmation) -> Confirmed:
        return cls(trial_number=row.trial.number, role=row.role,
                   search_output_tok_s=row.trial.capacity_output_tok_s,
                   samples=tuple(row.samples), failures=tuple(row.failures), n=row.n,
                   mean_output_tok_s=row.mean_output_tok_s,
                   std_output_tok_s=row.std_output_tok_s, cv=row.cv,
                   lcb_output_tok_s=row.lcb_output_tok_s, winner=row.winner)


@dataclass(frozen=True)
class ConfigResult:
    """One config of the result (the winner, a baseline): its search trial and its confirmation."""

    trial_number: int
    role: str
    feasible: bool
    failure_class: str | None
    config: dict[str, Any]
    engine_args: tuple[str, ...]
    latency: dict[str, Any]  # at capacity (the trial's stored latency summary)
    search_output_tok_s: float | None  # the search's one measurement; None: it was infeasible
    confirmed: gains.Runs | None  # its config's confirmation runs in this campaign
    not_confirmed: str | None  # why there are none, where `confirmed` is None

    @property
    def confirmed_mean_output_tok_s(self) -> float | None:
        return self.confirmed.mean_output_tok_s if self.confirmed is not None else None

    @property
    def confirmed_lcb_output_tok_s(self) -> float | None:
        return self.confirmed.lcb_output_tok_s if self.confirmed is not None else None


@dataclass(frozen=True)
class WinnerGain:
    """The winner's gain over another config, in percent of the other."""

    search_pct: float | None  # from the two search measurements; None: either was infeasible
    confirmed: gains.Gain | None  # from the confirmation runs; None: either was not confirmed


@dataclass(frozen=True)
class Baseline:
    config: ConfigResult
    winner_gain: WinnerGain | None  # None: there is no winner


@dataclass(frozen=True)
class Spent:
    gpu_hours: float  # trials and confirmation runs
    wall_s: float
    stop_reason: str | None  # why the search stopped; None: it has not
    budget: dict[str, Any]  # the limits that were set


@dataclass(frozen=True)
class CampaignResult:
    campaign: str
    deployment: str
    study: str
    status: str
    backend: str
    screen_backend: str | None
    search_space: str
    slo_ms: dict[str, float]
    trace: str
    trace_digest: str
    measured: int  # trials measured on the campaign's backend
    rejected: int  # by the interaction rules, never run
    screened: int  # a multi-fidelity campaign's trials on its screening backend
    max_trials: int
    top_trials: tuple[TrialRecord, ...]  # measured, best search capacity first
    spent: Spent
    winner_basis: str  # repo.CONFIRMED, BEST_SINGLE, NONE_CONFIRMED or NO_FEASIBLE
    winner: ConfigResult | None
    winner_accuracy_affecting: tuple[accuracy.NumericsChange, ...]
    baselines: tuple[Baseline, ...]  # in BASELINES order, those measured
    confirmations: tuple[Confirmed, ...]  # empty: confirmation did not run
    decision: str | None
    decision_note: str | None
    published_trial: int | None  # its latest publication's trial; None: not published


def campaign_result(session: Session, campaign: Campaign) -> CampaignResult:
    """The result of `campaign` as its rows stand now."""
    trials = repo.measured_trials(campaign)  # a screening's simulated ones are not ranked here
    measured = [t for t in trials if t.state != RecordState.REJECTED]
    top = sorted(measured, key=lambda t: -t.capacity_output_tok_s)[:TOP_TRIALS]
    chosen = repo.choose_winner(campaign)
    winner = _config(campaign, chosen.trial) if chosen.trial is not None else None
    pub = session.scalars(select(Publication).where(Publication.campaign_id == campaign.id)
                          .order_by(Publication.id.desc())).first()
    return CampaignResult(
        campaign=campaign.name, deployment=campaign.deployment.name,
        study=campaign.study_name, status=campaign.status, backend=campaign.backend,
        screen_backend=campaign.screen_backend, search_space=campaign.search_space,
        slo_ms=dict(campaign.slo), trace=campaign.trace_ref, trace_digest=campaign.trace_digest,
        measured=len(measured), rejected=len(trials) - len(measured),
        screened=len(campaign.trials) - len(trials), max_trials=campaign.max_trials,
        top_trials=tuple(repo.trial_record(t) for t in top), spent=spent(campaign),
        winner_basis=chosen.basis, winner=winner,
        winner_accuracy_affecting=tuple(accuracy.campaign_changes(
            campaign, chosen.trial.engine_config)) if chosen.trial is not None else (),
        baselines=tuple(_baselines(campaign, trials, winner)),
        confirmations=tuple(Confirmed.of(c) for c in campaign.confirmations),
        decision=campaign.decision, decision_note=campaign.decision_note,
        published_trial=pub.trial.number if pub is not None else None)


def spent(campaign: Campaign) -> Spent:
    """What the campaign spent, against which budget, and why its search stopped."""
    budget = campaign.budget or {}
    return Spent(gpu_hours=campaign.gpu_hours or 0.0, wall_s=campaign.wall_s or 0.0,
                 stop_reason=campaign.stop_reason,
                 budget={k: v for k, v in budget.items() if v is not None})


def winner_gain(winner: ConfigResult, other: ConfigResult) -> WinnerGain:
    """Like with like: search measurement over search measurement, confirmed over confirmed."""
    winner_search, other_search = winner.search_output_tok_s, other.search_output_tok_s
    return WinnerGain(
        search_pct=(gains.single_gain_pct(winner_search, other_search)
                    if winner_search and other_search else None),
        confirmed=(gains.gain(winner.confirmed, other.confirmed)
                   if winner.confirmed is not None and other.confirmed is not None else None))


def _baselines(campaign: Campaign, trials: list[Trial],
               winner: ConfigResult | None) -> list[Baseline]:
    """Each baseline's first trial, with the winner's gain over it."""
    found = []
    for role in BASELINES:
        trial = next((t for t in trials if t.role == role), None)
        if trial is not None:
            config = _config(campaign, trial)
            found.append(Baseline(config, winner_gain(winner, config)
                                  if winner is not None else None))
    return found


def _config(campaign: Campaign, trial: Trial) -> ConfigResult:
    # A baseline equal to a finalist shares its runs: found by config (repo.confirmation_of).
    conf = repo.confirmation_of(campaign, dict(trial.engine_config))
    return ConfigResult(
        trial_number=trial.number, role=trial.role, feasible=trial.feasible,
        failure_class=trial.failure_class, config=dict(trial.engine_config),
        engine_args=tuple(EngineConfig(**trial.engine_config).to_cli_args()),
        latency=dict(trial.latency or {}),
        search_output_tok_s=trial.capacity_output_tok_s if trial.feasible else None,
        confirmed=gains.Runs.of(conf) if conf is not None else None,
        not_confirmed=None if conf is not None else gains.not_confirmed(
            trial.state, trial.feasible, trial.failure_class, bool(campaign.confirmations)))

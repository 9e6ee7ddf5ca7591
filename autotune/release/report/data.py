"""What a campaign report shows, gathered from the database into frozen records.

Nothing here draws or formats: `plots` and `html` read these records only, so the report can be
rendered (and tested) without a session open.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from autotune.domain import optuna_keys as keys
from autotune.domain import step_model
from autotune.domain.engine_config import EngineConfig
from autotune.domain.parallelism import Strategy
from autotune.domain.trial_record import TrialRecord
from autotune.domain.vllm_defaults import effective_values
from autotune.errors import NotFoundError
from autotune.release import gains
from autotune.release.result import Confirmed
from autotune.search.baselines import BASELINES
from autotune.search.spaces import accuracy
from autotune.storage import repo
from autotune.storage.models import Campaign, Publication, Trial
from autotune.vocabulary import Role

log = logging.getLogger("autotune.report")
LATENCY_KEYS = ("ttft_p99_ms", "tpot_p99_ms", "itl_p99_ms", "e2e_p99_ms")
# The percentiles each replay of the capacity search keeps (autotune.measure.capacity), and that the
# at-capacity latency columns of the exports carry.
SWEEP_METRICS = ("ttft", "tpot", "e2e")
SWEEP_PCTS = ("p50", "p90", "p99")
SWEEP_KEYS = tuple(f"{m}_{p}_ms" for m in SWEEP_METRICS for p in SWEEP_PCTS)
CAPACITY_LATENCY_KEYS = tuple(f"{m}_{p}_ms" for m in ("ttft", "tpot", "itl", "e2e")
                              for p in SWEEP_PCTS)
# The sweep views draw the winner, the baselines (and incumbent) and this many more of the best
# feasible configs.
TOP_CONFIGS = 3
# fANOVA on fewer complete trials says nothing useful (and raises on one).
MIN_TRIALS_FOR_IMPORTANCE = 4


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _p99s(latency: dict[str, Any] | None) -> dict[str, float | None]:
    """The LATENCY_KEYS of a stored latency summary, None where it has no number."""
    lat = latency or {}
    return {k: _float(lat.get(k)) for k in LATENCY_KEYS}


@dataclass(frozen=True)
class ReportReplay:
    """One replay of a trial's capacity search (a rung of its ladder or a bisection step).

    Replays stored before each kept its percentiles and offered rate have None there (and
    P90s, E2E P99 and the concurrency); `quantiles` is kept for the replay at capacity only."""

    index: int  # its place in the search, from 0
    rate_scale: float
    output_tok_s: float
    slo_ok: bool
    client_bound: bool
    at_capacity: bool
    offered_request_s: float | None = None
    request_s: float | None = None  # completed requests per second
    error_rate: float | None = None
    mean_concurrent_requests: float | None = None  # time average of requests in flight
    max_concurrent_requests: float | None = None
    send_lag_p99_ms: float | None = None
    latency_ms: dict[str, float | None] = field(default_factory=dict)  # SWEEP_KEYS
    # {"pcts": [...], "ttft_ms": [...], "tpot_ms": [...], "e2e_ms": [...]} (the replay at capacity)
    quantiles: dict[str, tuple[float | None, ...]] | None = None

    @property
    def tokens_per_user(self) -> float | None:
        """Output tok/s per user as `vllm bench sweep plot_pareto` takes it: output throughput
        over the number of users, here the mean number of requests in flight."""
        c = self.mean_concurrent_requests
        return self.output_tok_s / c if c else None


@dataclass(frozen=True)
class ReportTrial(TrialRecord):
    """A trial as the report shows it: the finished-trial record (repo.trial_record), whose
    `latency` is the stored summary at the point measured (capacity for a feasible trial, the
    recorded rate for one that missed the SLO there; None when nothing was measured), and what
    only the report draws: its capacity search."""

    capacity_rate_scale: float = 0.0
    replays: tuple[ReportReplay, ...] = ()

    @classmethod
    def of(cls, record: TrialRecord, **extra: Any) -> ReportTrial:
        """The record's fields, and the report's (`extra`)."""
        return cls(**{f.name: getattr(record, f.name) for f in fields(TrialRecord)}, **extra)

    def figure(self, key: str) -> float | None:
        """A stored latency figure at the point measured (P50/P90/P99/P99.9, goodput,
        output_tok_s...); None where it was not measured or is no number."""
        return _float((self.latency or {}).get(key))

    @property
    def measured_output_tok_s(self) -> float | None:
        return self.figure("output_tok_s")

    @property
    def latency_p99_ms(self) -> dict[str, float | None]:
        return _p99s(self.latency)

    @property
    def at_capacity(self) -> ReportReplay | None:
        return next((r for r in self.replays if r.at_capacity), None)


@dataclass(frozen=True)
class ConfigColumn:
    """One config of the comparison table (winner, incumbent, a baseline)."""

    label: str
    source: str  # e.g. "trial 7" or "2026Q3 trial 12 (published 2026-07-01)"
    feasible: bool
    capacity_output_tok_s: float
    latency_p99_ms: dict[str, float | None]
    effective_config: dict[str, Any]  # vLLM's defaults filled in, so only real differences show
    failure_class: str | None = None
    # Its config's confirmation runs in this campaign (None: not confirmed here, and why).
    confirmed: gains.Runs | None = None
    not_confirmed: str | None = None
    # The winner's gain over it: from confirmed figures where the winner was confirmed (None
    # over an unconfirmed column), else single_gain_pct from the search measurements.
    gain: gains.Gain | None = None
    single_gain_pct: float | None = None


@dataclass(frozen=True)
class Importances:
    """Parameter importances, or why there are none."""

    values: dict[str, float] = field(default_factory=dict)
    note: str | None = None


@dataclass(frozen=True)
class CampaignReport:
    campaign_id: int
    campaign: str
    deployment: str
    study_name: str
    model: str
    gpu: str
    gpu_count: int
    tensor_parallel_size: int
    max_model_len: int
    traffic_profile: str
    slo_ms: dict[str, float]
    trace_ref: str
    trace_digest: str
    backend: str
    executor: str
    search_space: str
    max_trials: int
    seed: int
    status: str
    message: str | None
    started_at: datetime
    finished_at: datetime | None
    wall_s: float | None
    trials: tuple[ReportTrial, ...]
    winner: ReportTrial | None  # what publish takes (repo.choose_winner)
    winner_basis: str  # repo.CONFIRMED, BEST_SINGLE, NONE_CONFIRMED or NO_FEASIBLE
    confirmations: tuple[Confirmed, ...]  # empty: confirmation did not run
    period: str | None
    budget: dict[str, Any]  # max_trials, max_gpu_hours, deadline, as asked
    gpu_hours: float  # spent: trials and confirmation runs
    stop_reason: str | None
    decision: str | None  # the quarterly decision: published, kept_incumbent, no_feasible
    decision_note: str | None
    comparison: tuple[ConfigColumn, ...]  # winner first, when there is one
    importances: Importances
    screen_backend: str | None = None  # multi-fidelity: the simulator that screened
    # The winner's values that change the model's numerics (autotune.search.spaces.accuracy), as text.
    winner_numerics: tuple[str, ...] = ()
    # What priced the simulated trials' GPU steps (autotune.domain.step_model.summary); None
    # where no trial was simulated.
    step_model: str | None = None

    def by_state(self, state: str) -> int:
        return sum(1 for t in self.trials if t.state == state)

    def sweep_configs(self) -> list[tuple[str, ReportTrial]]:
        """The configs the sweep views draw, labelled: the winner, the incumbent and baselines
        measured in this campaign, then the TOP_CONFIGS best other feasible ones; only trials
        the campaign's backend measured, and no repeat (its replays are another trial's)."""
        measured = [t for t in self.trials if t.fidelity in ("", self.backend)
                    and t.repeat_of is None and t.replays]
        picked: list[tuple[str, ReportTrial]] = []
        if self.winner is not None and any(t is self.winner for t in measured):
            role = "" if self.winner.role == Role.PROPOSED else f" ({self.winner.role})"
            picked.append((f"winner #{self.winner.number}{role}", self.winner))
        for role in (Role.INCUMBENT, *BASELINES):
            t = next((t for t in measured if t.role == role), None)
            if t is not None and all(t is not p for _, p in picked):
                picked.append((f"{role} #{t.number}", t))
        rest = sorted((t for t in measured if t.feasible and all(t is not p for _, p in picked)),
                      key=lambda t: (-t.capacity_output_tok_s, t.number))
        picked += [(f"#{t.number}", t) for t in rest[:TOP_CONFIGS]]
        return picked

    def pareto_trials(self) -> list[ReportTrial]:
        """The trials whose replays the tokens/s-per-GPU Pareto draws: every one the campaign's
        backend measured, repeats left out."""
        return [t for t in self.trials if t.fidelity in ("", self.backend)
                and t.repeat_of is None and t.replays]


def find_campaign(session: Session, campaign: str, deployment: str | None = None) -> Campaign:
    """By name (optionally within a deployment); a number that names no campaign is an id."""
    try:
        return repo.find_campaign(session, campaign, deployment)
    except NotFoundError:
        if not campaign.isdigit():
            raise
        found = session.get(Campaign, int(campaign))
        if found is None or (deployment and found.deployment.name != deployment):
            raise NotFoundError(f"no campaign named or numbered {campaign!r}; list them with "
                                "`autotune campaigns`") from None
        return found


def _quantiles(value: Any) -> dict[str, tuple[float | None, ...]] | None:
    if not isinstance(value, dict) or not isinstance(value.get("pcts"), list):
        return None
    return {k: tuple(_float(x) for x in v) for k, v in value.items() if isinstance(v, list)}


def _replay(index: int, r: dict[str, Any], t: Trial) -> ReportReplay:
    # Before replays were marked, the one at capacity is the passing one at its multiplier.
    at_capacity = r.get("at_capacity")
    if at_capacity is None:
        at_capacity = (t.feasible and bool(r.get("slo_ok")) and
                       r.get("rate_scale") == t.capacity_rate_scale and
                       r.get("output_tok_s") == t.capacity_output_tok_s)
    return ReportReplay(
        index=index, rate_scale=float(r.get("rate_scale") or 0.0),
        output_tok_s=float(r.get("output_tok_s") or 0.0), slo_ok=bool(r.get("slo_ok")),
        client_bound=bool(r.get("client_bound")), at_capacity=bool(at_capacity),
        offered_request_s=_float(r.get("offered_request_s")), request_s=_float(r.get("request_s")),
        error_rate=_float(r.get("error_rate")),
        mean_concurrent_requests=_float(r.get("mean_concurrent_requests")),
        max_concurrent_requests=_float(r.get("max_concurrent_requests")),
        send_lag_p99_ms=_float(r.get("send_lag_p99_ms")),
        latency_ms={k: _float(r.get(k)) for k in SWEEP_KEYS},
        quantiles=_quantiles(r.get("quantiles")))


def _trial(t: Trial) -> ReportTrial:
    return ReportTrial.of(repo.trial_record(t), capacity_rate_scale=t.capacity_rate_scale,
                          replays=tuple(_replay(i, r, t) for i, r in enumerate(t.replays or [])))


def _column(label: str, source: str, t: Trial, config: dict[str, Any],
            campaign: Campaign, *, other_campaign: bool = False) -> ConfigColumn:
    """`other_campaign`: `t` was measured by another campaign (the incumbent's publication);
    only this campaign's own confirmation of the config compares like for like."""
    spec = repo.spec_of(campaign.deployment)
    conf = repo.confirmation_of(campaign, config)
    why = None
    if conf is None:
        why = ("not re-measured in this campaign" if other_campaign
               else gains.not_confirmed(t.state, t.feasible, t.failure_class,
                                        bool(campaign.confirmations)))
    return ConfigColumn(label=label, source=source, feasible=t.feasible,
                        capacity_output_tok_s=t.capacity_output_tok_s,
                        latency_p99_ms=_p99s(t.latency),
                        effective_config=_with_layout(effective_values(EngineConfig(**config),
                                                                       spec)),
                        failure_class=t.failure_class,
                        confirmed=gains.Runs.of(conf) if conf is not None else None,
                        not_confirmed=why)


def _with_gains(columns: list[ConfigColumn]) -> tuple[ConfigColumn, ...]:
    """The winner's (first column's) gain over each other column."""
    if not columns or columns[0].label != "winner":
        return tuple(columns)
    win, out = columns[0], [columns[0]]
    for c in columns[1:]:
        if win.confirmed is not None:
            c = replace(c, gain=gains.gain(win.confirmed, c.confirmed)
                        if c.confirmed is not None else None)
        elif c.feasible:
            c = replace(c, single_gain_pct=gains.single_gain_pct(win.capacity_output_tok_s,
                                                                 c.capacity_output_tok_s))
        out.append(c)
    return tuple(out)


def _with_layout(effective: dict[str, Any]) -> dict[str, Any]:
    """The effective arguments led by the parallel layout they make (TP8, DP8+EP, ...)."""
    return {"parallel_layout": Strategy.of(effective).name, **effective}


def _incumbent(session: Session, campaign: Campaign) -> Publication | None:
    try:
        return repo.current_publication(session, campaign.deployment)
    except NotFoundError:
        return None


def _comparison(session: Session, campaign: Campaign) -> tuple[ConfigColumn, ...]:
    columns = []
    chosen = repo.choose_winner(campaign)
    best = chosen.trial
    if best is not None:
        source = (f"trial {best.number}, confirmed LCB "
                  f"{chosen.confirmation.lcb_output_tok_s:,.0f} output tok/s"
                  if chosen.confirmation is not None
                  else f"trial {best.number}, best single measurement (not confirmed)")
        columns.append(_column("winner", source, best, best.engine_config, campaign))
    pub = _incumbent(session, campaign)
    if pub is not None:
        # Its figures are those measured when it was tuned, possibly on other traffic.
        where = "this campaign" if pub.campaign_id == campaign.id else f"campaign {pub.campaign.name}"
        source = (f"{pub.period_label}: {where}, trial {pub.trial.number}, published "
                  f"{pub.published_at:%Y-%m-%d}")
        columns.append(_column(Role.INCUMBENT, source, pub.trial, pub.engine_config, campaign,
                               other_campaign=pub.campaign_id != campaign.id))
    for role in BASELINES:
        base = next((t for t in repo.measured_trials(campaign) if t.role == role), None)
        if base is not None:
            columns.append(_column(role, f"trial {base.number}", base, base.engine_config,
                                   campaign))
    return _with_gains(columns)


def importances(storage_url: str, study_name: str, fidelity: str | None = None) -> Importances:
    """fANOVA importances of the study's parameters for the objective the sampler saw: with
    `fidelity` (a multi-fidelity campaign's screening backend), over its trials only."""
    import optuna

    from autotune.storage.studies import load_study

    try:
        study = load_study(storage_url, study_name)
    except KeyError:
        return Importances(note=f"the Optuna study {study_name!r} is not in this database")
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if fidelity is not None:  # one scale: the real trials' capacities are not comparable
        complete = [t for t in complete if t.user_attrs.get(keys.FIDELITY, fidelity) == fidelity]
        study = optuna.create_study(direction="maximize")
        study.add_trials(complete)
    if len(complete) < MIN_TRIALS_FOR_IMPORTANCE:
        return Importances(note=f"only {len(complete)} complete trial(s); parameter importances "
                                f"need at least {MIN_TRIALS_FOR_IMPORTANCE}")
    if len({t.value for t in complete}) < 2:
        return Importances(note="every trial has the same objective value, so no parameter "
                                "explains any of its variance")
    try:
        values = optuna.importance.get_param_importances(study)
    except (ValueError, RuntimeError) as exc:  # e.g. no parameter shared by all trials
        log.warning("%s: parameter importances failed: %s", study_name, exc)
        return Importances(note=f"parameter importances could not be computed: {exc}")
    return Importances(values={k: float(v) for k, v in values.items()})


def step_models(storage_url: str, study_name: str, layouts: dict[int, str]) -> str | None:
    """The step models of the study's simulated trials, from their notes (keys.BACKEND_NOTES),
    with each trial's parallel layout (`layouts`, by trial number)."""
    from autotune.storage.studies import load_study
    from autotune.storage.study_settings import step_model_label

    try:
        study = load_study(storage_url, study_name)
    except KeyError:
        return None
    return step_model.summary(
        (layouts.get(t.number), label) for t in study.get_trials(deepcopy=False)
        if (label := step_model_label(t)))


def gather(session: Session, campaign: Campaign, storage_url: str) -> CampaignReport:
    dep = campaign.deployment
    trials = tuple(_trial(t) for t in campaign.trials)
    chosen = repo.choose_winner(campaign)
    best = chosen.trial
    return CampaignReport(
        campaign_id=campaign.id, campaign=campaign.name, deployment=dep.name,
        study_name=campaign.study_name, model=dep.model, gpu=dep.gpu, gpu_count=dep.gpu_count,
        tensor_parallel_size=dep.tensor_parallel_size, max_model_len=dep.max_model_len,
        traffic_profile=dep.traffic_profile, slo_ms=dict(campaign.slo),
        trace_ref=campaign.trace_ref, trace_digest=campaign.trace_digest,
        backend=campaign.backend, executor=campaign.executor, search_space=campaign.search_space,
        max_trials=campaign.max_trials, seed=campaign.seed, status=campaign.status,
        message=campaign.message, started_at=campaign.started_at,
        finished_at=campaign.finished_at, wall_s=campaign.wall_s, trials=trials,
        winner=next((t for t in trials if best is not None and t.number == best.number), None),
        winner_basis=chosen.basis,
        confirmations=tuple(sorted((Confirmed.of(c) for c in campaign.confirmations),
                                   key=lambda c: (-c.lcb_output_tok_s, c.trial_number))),
        period=campaign.period, budget=dict(campaign.budget or {}),
        gpu_hours=campaign.gpu_hours or 0.0, stop_reason=campaign.stop_reason,
        decision=campaign.decision, decision_note=campaign.decision_note,
        comparison=_comparison(session, campaign),
        importances=importances(storage_url, campaign.study_name, campaign.screen_backend),
        screen_backend=campaign.screen_backend,
        winner_numerics=tuple(c.text() for c in accuracy.campaign_changes(
            campaign, best.engine_config)) if best is not None else (),
        step_model=step_models(storage_url, campaign.study_name, {
            t.number: Strategy.of(t.engine_config).name for t in campaign.trials}))

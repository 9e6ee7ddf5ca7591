"""The quarterly job's decisions: which campaign a quarter runs, what it is warm-started with,
and whether its winner replaces the incumbent.

One campaign per deployment and quarter, named after the quarter (2026Q4; a forced re-run in
the same quarter is 2026Q4.2, 2026Q4.3, ...). A quarter whose campaign has a decision is done:
running the job again only reports it, unless forced. A campaign without a decision (its job
died) is resumed. The incumbent (the deployment's current publication) is enqueued first, so it
is re-measured on the new traffic, then the previous campaign's winner and best configs.

The decision, after confirmation: the winner (best 90% lower confidence bound, autotune.campaign.confirm)
is published only if its LCB beats the incumbent's confirmed mean capacity by the margin, both
measured on this quarter's traffic; the gain must survive the noise, not just the point
estimates. An incumbent that missed the SLO on the new traffic counts as capacity 0.

Exit codes, for schedulers (also in `autotune quarterly --help` and the README):
0 published, kept the incumbent, or already decided this quarter (a no-op); 2 bad input;
3 another job is running this quarter's campaign; 4 no feasible config within the budget
(nothing published); 5 infrastructure failure (database, Ray cluster, workers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from autotune.campaign.study import Reference
from autotune.errors import AutotuneError, InfrastructureError, SettingError
from autotune.release.publish import publish_trial, quarter_label
from autotune.storage import repo
from autotune.storage.models import Campaign, Confirmation, Deployment, Trial
from autotune.vocabulary import Role

EXIT_OK, EXIT_BUSY, EXIT_NO_FEASIBLE = 0, 3, 4
EXIT_BAD_INPUT, EXIT_INFRA = AutotuneError.exit_code, InfrastructureError.exit_code
PUBLISHED, KEPT, NO_FEASIBLE = "published", "kept_incumbent", "no_feasible"
WARM_STARTS = 3  # best configs of the previous campaign enqueued besides its winner
_PERIOD = re.compile(r"\d{4}Q[1-4]")


def period_of(value: str | None, now: datetime) -> str:
    if value is None:
        return quarter_label(now)
    if not _PERIOD.fullmatch(value):
        raise SettingError("{period} {got!r} is not a quarter label; use e.g. 2026Q4", got=value)
    return value


def period_campaigns(session: Session, deployment: Deployment, period: str) -> list[Campaign]:
    """The deployment's quarterly campaigns for this quarter, oldest first."""
    return list(session.scalars(select(Campaign).where(
        Campaign.deployment_id == deployment.id, Campaign.period == period).order_by(Campaign.id)))


@dataclass(frozen=True)
class Plan:
    """What this run of the job does: report an earlier decision, decide a finished campaign,
    or run (or resume) a campaign."""

    campaign: str
    done: Campaign | None = None  # decided already: report it
    decide_only: bool = False  # completed but undecided (its job died after the search)


def plan_run(session: Session, deployment: Deployment, period: str, force: bool) -> Plan:
    runs = period_campaigns(session, deployment, period)
    latest = runs[-1] if runs else None
    if latest is not None and latest.decision is None:
        return Plan(latest.name, decide_only=latest.status == "completed")
    if latest is not None and not force:
        return Plan(latest.name, done=latest)
    # A new campaign: the quarter's label, or the first free re-run name (a `tune` campaign may
    # already hold the label).
    taken = set(session.scalars(select(Campaign.name).where(
        Campaign.deployment_id == deployment.id)))
    return Plan(next(n for n in (period, *(f"{period}.{k}" for k in range(2, 10_000)))
                     if n not in taken))


def _configs_equal(a: dict[str, object], b: dict[str, object]) -> bool:
    return sorted(a.items()) == sorted(b.items())


def references(session: Session, deployment: Deployment, campaign: str) -> tuple[Reference, ...]:
    """The incumbent, then the previous campaign's winner and best configs (each config once)."""
    refs: list[Reference] = []

    def add(tag: str, role: str, config: dict[str, object]) -> None:
        if not any(_configs_equal(r.config, config) for r in refs):
            refs.append(Reference(tag, role, dict(config)))

    pubs = repo.publications(session, deployment)
    if pubs:
        add(Role.INCUMBENT, Role.INCUMBENT, pubs[0].engine_config)
    earlier = [c for c in session.scalars(select(Campaign).where(
        Campaign.deployment_id == deployment.id, Campaign.status == "completed",
        Campaign.name != campaign).order_by(Campaign.id.desc()))]
    if earlier:
        prev = earlier[0]
        winner = repo.choose_winner(prev).trial
        if winner is not None:
            add(f"{prev.name}:winner", Role.WARM_START, winner.engine_config)
        best = sorted((t for t in repo.measured_trials(prev) if t.feasible and t.repeat_of is None),
                      key=lambda t: -t.capacity_output_tok_s)
        for t in best[:WARM_STARTS]:
            add(f"{prev.name}:trial{t.number}", Role.WARM_START, t.engine_config)
    return tuple(refs)


@dataclass(frozen=True)
class Decision:
    outcome: str  # PUBLISHED, KEPT, NO_FEASIBLE
    note: str
    campaign: str
    publication_id: int | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_NO_FEASIBLE if self.outcome == NO_FEASIBLE else EXIT_OK


def _incumbent(campaign: Campaign) -> tuple[Trial | None, Confirmation | None]:
    trial = next((t for t in repo.measured_trials(campaign) if t.role == Role.INCUMBENT), None)
    if trial is None:
        return None, None
    conf = next((c for c in campaign.confirmations
                 if _configs_equal(c.engine_config, trial.engine_config)), None)
    return trial, conf


def decide(session: Session, campaign: Campaign, *, margin_pct: float, period: str,
           published_by: str) -> Decision:
    """Publish the confirmed winner or keep the incumbent; the decision, its note and any
    publication are written in the caller's transaction, together."""
    # The decision compares confirmed capacities: a winner without a confirmation row (none
    # ran, or none held up) is no winner here.
    winner = repo.choose_winner(campaign).confirmation
    inc_trial, inc_conf = _incumbent(campaign)
    stop = (campaign.stop_reason or "the budget").replace("_", " ")
    publish = False
    if winner is None:
        outcome = NO_FEASIBLE
        note = (f"no config met the SLO {campaign.slo} within the budget (search stopped by "
                f"{stop}); nothing published"
                + ("; the incumbent stays" if inc_trial is not None else ""))
    elif inc_trial is None:
        outcome, publish = PUBLISHED, True
        note = (f"first publication (no incumbent): trial {winner.trial.number}, confirmed "
                f"mean {winner.mean_output_tok_s:,.0f}, LCB {winner.lcb_output_tok_s:,.0f} "
                "output tok/s")
    elif _configs_equal(winner.engine_config, inc_trial.engine_config):
        outcome = KEPT
        note = (f"the incumbent is still the best config on this traffic (confirmed LCB "
                f"{winner.lcb_output_tok_s:,.0f} output tok/s)")
    else:
        base = inc_conf.mean_output_tok_s if inc_conf is not None else 0.0
        lcb = winner.lcb_output_tok_s
        if base <= 0:  # not confirmed (missed the SLO in its re-measure) or 0 in every run
            outcome, publish = PUBLISHED, True
            note = (f"the incumbent missed the SLO on this traffic; trial {winner.trial.number} "
                    f"has a confirmed LCB of {lcb:,.0f} output tok/s")
        elif lcb >= base * (1 + margin_pct / 100):
            outcome, publish = PUBLISHED, True
            note = (f"trial {winner.trial.number}'s confirmed LCB {lcb:,.0f} output tok/s beats "
                    f"the incumbent's confirmed mean {base:,.0f} by {(lcb / base - 1) * 100:+.1f}% "
                    f"(margin {margin_pct:g}%)")
        else:
            outcome = KEPT
            note = (f"kept the incumbent: the winner (trial {winner.trial.number}) has a "
                    f"confirmed LCB of {lcb:,.0f} output tok/s, {(lcb / base - 1) * 100:+.1f}% "
                    f"against the incumbent's confirmed mean {base:,.0f}, under the margin of "
                    f"{margin_pct:g}%")
    pub_id = None
    if publish and winner is not None:
        pub = publish_trial(session, campaign, winner.trial, period_label=period,
                            published_by=published_by, note=note)
        pub_id = pub.id
    campaign.decision, campaign.decision_note, campaign.decided_at = outcome, note, repo.now()
    session.flush()
    return Decision(outcome, note, campaign.name, pub_id)


def reported(campaign: Campaign) -> Decision:
    """The decision a campaign holds (for the no-op run)."""
    assert campaign.decision is not None
    return Decision(campaign.decision, campaign.decision_note or "", campaign.name)

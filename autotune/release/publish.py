"""Publication: a campaign's winner becomes its deployment's current config. The winner is the
confirmed one (best lower confidence bound, autotune.campaign.confirm) where the campaign was confirmed,
else its best single measurement (repo.choose_winner)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from autotune.domain import catalogue
from autotune.domain.engine_config import EngineConfig
from autotune.errors import ConfigError, NotFoundError, SettingText
from autotune.search.spaces.accuracy import campaign_changes
from autotune.search.spaces.violations import engine_refusals
from autotune.storage import repo
from autotune.storage.models import Campaign, Publication, Trial


def quarter_label(when: datetime) -> str:
    return f"{when.year}Q{(when.month - 1) // 3 + 1}"


def default_period(campaign_name: str, when: datetime) -> str:
    """The campaign's name when it is a quarter label (2026Q4), else the quarter of `when`."""
    return campaign_name if re.fullmatch(r"\d{4}Q[1-4]", campaign_name) else quarter_label(when)


def utc(when: datetime) -> datetime:
    # SQLite hands back naive datetimes; everything autotune stores is UTC.
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def publish_campaign(session: Session, campaign_name: str, *, deployment: str | None,
                     trial_number: int | None, period_label: str | None, published_by: str,
                     note: str | None) -> Publication:
    campaign = repo.find_campaign(session, campaign_name, deployment)
    if campaign.status != "completed":
        raise ConfigError(f"campaign {campaign.name!r} is {campaign.status}, not completed; "
                          "publish only a finished campaign")
    if trial_number is None:
        winner = repo.choose_winner(campaign)
        if winner.basis == repo.NONE_CONFIRMED:
            raise NotFoundError(SettingText(
                "campaign {campaign!r} confirmed no config: none kept a lower confidence bound "
                "above 0 over its re-runs; publish a given {trial_number} or tune again",
                campaign=campaign.name))
        if winner.trial is None:
            raise NotFoundError(f"campaign {campaign.name!r} has no feasible trial to publish; "
                                "loosen the SLO or widen the search space and tune again")
        trial = winner.trial
    else:
        found = [t for t in campaign.trials if t.number == trial_number]
        if not found:
            raise NotFoundError(f"campaign {campaign.name!r} has no trial {trial_number}")
        trial = found[0]
        if trial.fidelity != campaign.backend:
            raise ConfigError(f"trial {trial_number} of campaign {campaign.name!r} was screened "
                              f"on the {trial.fidelity} simulator, not measured; publish one "
                              f"measured on {campaign.backend}")
        if not trial.feasible:
            raise ConfigError(f"trial {trial_number} of campaign {campaign.name!r} is not "
                              "feasible (it broke the SLO, a rule, or failed); pick another")
    refused = engine_refusals(EngineConfig(**trial.engine_config), repo.spec_of(campaign.deployment))
    if refused:
        v = refused[0]
        raise ConfigError(f"trial {trial.number} of campaign {campaign.name!r} breaks rule "
                          f"{v.rule} ({v.message}; {v.source}): vLLM would not start it, so it "
                          "is not published; tune again with this autotune's rules")
    period = period_label or default_period(campaign.name, repo.now())
    return publish_trial(session, campaign, trial, period_label=period,
                         published_by=published_by, note=note)


def publish_trial(session: Session, campaign: Campaign, trial: Trial, *, period_label: str,
                  published_by: str, note: str | None, served: str | None = None) -> Publication:
    """Record a trial as its deployment's current config, with its numerics changes judged now
    (by the campaign's space), so the publication's document never changes after."""
    changes = [c.as_json() for c in campaign_changes(campaign, trial.engine_config)]
    return repo.publish(session, campaign, trial, period_label=period_label,
                        published_by=published_by, note=note, accuracy_affecting=changes,
                        served=served)


CONFIRMED_MEAN, SEARCH_MEASUREMENT = "confirmed_mean", "search_measurement"


def capacity_figures(pub: Publication) -> dict[str, Any]:
    """The published config's capacity: its confirmed mean where its campaign confirmed it
    (so publications made before this was published read the same), else the search's single
    measurement, with `capacity_basis` saying which."""
    conf = repo.confirmation_of(pub.campaign, pub.trial.engine_config)
    search = pub.trial.capacity_output_tok_s
    return {
        "capacity_output_tok_s": conf.mean_output_tok_s if conf is not None else search,
        "capacity_basis": CONFIRMED_MEAN if conf is not None else SEARCH_MEASUREMENT,
        "search_output_tok_s": search,
        "confirmed_mean_output_tok_s": conf.mean_output_tok_s if conf is not None else None,
        "confirmed_std_output_tok_s": conf.std_output_tok_s if conf is not None else None,
        "confirmed_lcb_output_tok_s": conf.lcb_output_tok_s if conf is not None else None,
        "confirmed_runs": conf.n if conf is not None else None,
    }


def config_document(pub: Publication) -> dict[str, Any]:
    """The published config as services read it: engine args, the CLI list and the YAML."""
    config = EngineConfig(**pub.engine_config)
    # A publication from before served_model was recorded names its model's Hugging Face id
    # (not the deployment's model_path, which may change: the document and its ETag must not).
    served = pub.served_model or catalogue.model(pub.deployment.model).hf_id or None
    return {
        "deployment": pub.deployment.name,
        "period": pub.period_label,
        "campaign": pub.campaign.name,
        "trial": pub.trial.number,
        "published_at": utc(pub.published_at).isoformat(),
        "published_by": pub.published_by,
        "note": pub.note,
        **capacity_figures(pub),
        "slo": pub.campaign.slo,
        "model": pub.deployment.model,
        "served_model": served,
        "engine_args": config.explicit(),
        # null: published before autotune recorded it.
        "accuracy_affecting": pub.accuracy_affecting,
        "cli_args": config.to_cli_args(),
        "yaml": config.to_yaml(model=served),
    }

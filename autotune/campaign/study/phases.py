"""What runs around the search: the space and references it starts from, the Optuna study they
are enqueued in, and a multi-fidelity campaign's hand-off from screening to the real backend.

References are enqueued first: the incumbent and warm starts (a quarterly campaign's, each with
its exact config), then the baselines (vLLM's defaults and the tuning guide's heuristic)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.storages import BaseStorage

from autotune.campaign import multifidelity as mf
from autotune.campaign.resume_settings import sampler_change
from autotune.campaign.study.repair import ensure_baselines, ensure_references
from autotune.campaign.study.request import CampaignRequest
from autotune.domain import optuna_keys as keys
from autotune.domain.engine_config import EngineConfig
from autotune.domain.trial_record import TrialRecord
from autotune.errors import ConfigError, SearchSpaceError
from autotune.search.baselines import baseline_configs
from autotune.search.objective import OBJECTIVE_NAME
from autotune.search.samplers import SamplerPlan
from autotune.search.spaces import SearchSpace, accuracy
from autotune.search.spaces.deployment import deployment_space, hold_config, space_params
from autotune.storage.studies import create_or_load_study
from autotune.vocabulary import Role

log = logging.getLogger("autotune.study")
# A reference as enqueued: (tag, role, the space's parameters, its exact config).
ReferenceParams = tuple[str, str, dict[str, Any], dict[str, Any]]


def search_space(request: CampaignRequest) -> SearchSpace:
    """The deployment's space, refused if a reference or baseline needs a forbidden value, and
    widened to hold a path campaign's single config."""
    space = deployment_space(request.search_space, request.deployment)
    # Before a reference widens the space: one that needs a forbidden value is refused.
    accuracy.check_allowed(space, request.deployment, {
        **{ref.role if ref.tag == ref.role else f"{ref.role} {ref.tag}": ref.config
           for ref in request.references},
        **{f"baseline {role}": config.explicit()
           for role, config in baseline_configs(request.deployment).items()}})
    for ref in request.references:
        if ref.role == Role.SINGLE_CONFIG:  # a path's search starts from it, in its space or not
            space = hold_config(space, EngineConfig(**ref.config), request.deployment)
    return space


def reference_params(request: CampaignRequest, space: SearchSpace) -> list[ReferenceParams]:
    """The references the sampler's space can express; an incumbent it cannot is refused, a
    warm start left out."""
    out = []
    for ref in request.references:
        try:
            params = space_params(space, EngineConfig(**ref.config), request.deployment)
        except SearchSpaceError as exc:
            if ref.role == Role.INCUMBENT:  # the decision needs it measured: refuse to guess
                raise ConfigError(f"the incumbent config cannot be expressed in search space "
                                  f"{request.search_space!r} ({exc}); tune with a "
                                  "space that holds it") from None
            log.warning("%s: warm start %s left out: %s", request.study_name, ref.tag, exc)
            continue
        out.append((ref.tag, ref.role, params, dict(ref.config)))
    return out


def open_study(storage: BaseStorage, request: CampaignRequest, plan: SamplerPlan,
               references: list[ReferenceParams],
               baseline_params: dict[str, dict[str, Any]]) -> optuna.Study:
    """The campaign's study, created or (a resumed campaign) loaded, with its attributes set
    and the references, then the baselines, enqueued once."""
    # load_if_exists: a resumed campaign continues its study (the sampler starts afresh).
    study = create_or_load_study(storage, request.study_name, plan.sampler)
    change = sampler_change(study.user_attrs.get(keys.SAMPLER), plan.name, request.campaign,
                            completed=False)
    if change:  # resuming with another sampler: it proposes from here on
        log.warning("%s: %s", request.study_name, change)
    with warnings.catch_warnings():  # "experimental" since Optuna 3.2, unchanged since
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([OBJECTIVE_NAME])  # the dashboard's axis and column title
    study.set_user_attr(keys.SLO, str(request.slo))
    study.set_user_attr(keys.SAMPLER, plan.name)
    study.set_user_attr(keys.DEPLOYMENT, request.deployment.name)
    for key, value in request.study_attrs.items():
        study.set_user_attr(key, value)
    ensure_references(study, references)  # before the baselines
    ensure_baselines(study, baseline_params)
    return study


def enqueue_real_phase(storage: BaseStorage, study: optuna.Study, request: CampaignRequest,
                       records: Sequence[TrialRecord], references: list[ReferenceParams],
                       baseline_roles: Sequence[str], space: SearchSpace) -> None:
    """Close a multi-fidelity campaign's screening and enqueue its real phase: the incumbent,
    the baselines and the best screened configs, on the real backend."""
    screen = request.screen
    assert screen is not None
    if not mf.screening_closed(study):
        dropped = mf.close_screening(storage, study, screen.backend)
        if dropped:
            log.warning("%s: screening closed; waiting trials %s left unrun", request.study_name,
                        ", ".join(map(str, dropped)))
    screened = [t for t in records if t.fidelity == screen.backend]
    roles = [(tag, role) for tag, role, _, _ in references
             if role == Role.INCUMBENT] + [(role, role) for role in baseline_roles]
    runs = mf.plan(screened, screen.top, roles)
    added = mf.enqueue(study, [(run, space_params(space, EngineConfig(**run.config),
                                                  request.deployment)) for run in runs],
                       request.backend)
    log.info("%s: screening on %s done; %d configs to measure on %s (%d enqueued now)",
             request.study_name, screen.backend, len(runs), request.backend, added)

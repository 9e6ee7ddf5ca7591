"""After the search: the best configs, the incumbent and the baselines confirmed
(autotune.campaign.confirm) on the search's executor, all with the same seeds, and the comparison
configs measured beside them.

Comparison configs (`CampaignRequest.compare`, e.g. a per-path campaign's single whole-trace
config, autotune.campaign.per_path) are measured with the confirmation's seeds on this campaign's trace
and SLO, outside the search: they need not lie in its space and never win; their results go to
the study's user attribute `autotune:compare` (see `comparisons`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import optuna
from sqlalchemy import Engine

from autotune.campaign import confirm
from autotune.campaign.confirm import ConfirmPlan
from autotune.campaign.study.recorder import finite_json
from autotune.campaign.study.request import CampaignRequest
from autotune.domain import optuna_keys as keys
from autotune.domain.engine_config import EngineConfig
from autotune.domain.trial_record import TrialRecord
from autotune.domain.vllm_defaults import deployment_args
from autotune.measure.executors import Executor
from autotune.measure.trial_spec import TrialSpec
from autotune.search.baselines import BASELINES
from autotune.storage.db import session_scope
from autotune.storage.lease import Lease
from autotune.storage.models import Campaign
from autotune.vocabulary import Role


def _compare_doc(c: confirm.Confirmed) -> dict[str, Any]:
    return finite_json({"role": c.candidate.role, "engine_config": dict(c.candidate.config),
                        "seeds": list(c.seeds), "samples": list(c.samples),
                        "failures": list(c.failures), "n": c.stats.n,
                        "mean_output_tok_s": c.stats.mean, "std_output_tok_s": c.stats.std,
                        "lcb_output_tok_s": c.stats.lcb, "gpu_hours": c.gpu_hours})


def comparisons(study: optuna.Study) -> list[dict[str, Any]]:
    """What `confirm_and_compare` stored on a finished study (empty if it compared nothing)."""
    return list(study.user_attrs.get(keys.COMPARE, []))


def _template(r: CampaignRequest) -> TrialSpec:
    """The campaign's trace, SLO, backend and capacity search, for runs outside the search."""
    return TrialSpec(study_name=r.study_name, trial_number=0,
                     config=EngineConfig(**deployment_args(r.deployment)),
                     deployment=r.deployment, trace=r.trace, slo=r.slo,
                     backend=r.backend, seed=r.seed, search=r.search,
                     backend_options=r.backend_options)


def _compare(executor: Executor, r: CampaignRequest,
             template: TrialSpec) -> list[confirm.Confirmed]:
    """Measure the comparison configs with the confirmation's seeds (without confirmation,
    once with the search's seed, beside the best single measurement)."""
    if not r.compare:
        return []
    plan = r.confirm or ConfirmPlan(top=0, repeats=1, base_seed=r.seed - 1)
    chosen = [confirm.Candidate(trial_number=-1 - i, role=ref.role, config=dict(ref.config),
                                search_output_tok_s=0.0) for i, ref in enumerate(r.compare)]
    ran = confirm.run(executor, template, chosen, plan)
    return [dataclasses.replace(c, winner=False) for c in ran]  # a comparison never wins


def confirm_and_compare(engine: Engine, executor: Executor, study: optuna.Study,
                        campaign_id: int, r: CampaignRequest, records: Sequence[TrialRecord],
                        stop_reason: str | None, lease: Lease | None) -> None:
    """Re-run the best configs, the incumbent and the baselines with the same other seeds,
    then measure the comparison configs; store the results and why the search stopped in
    one transaction."""
    confirmed: list[confirm.Confirmed] = []
    template = _template(r)
    if r.confirm is not None:
        rows = [t for t in records if t.fidelity == r.backend]  # never a screening one
        # The baselines too, with the same seeds: every gain is then confirmed against
        # confirmed (autotune.release.gains), never against one search draw.
        chosen = confirm.candidates(rows, r.confirm.top,
                                    include_roles=(Role.INCUMBENT, Role.SINGLE_CONFIG,
                                                   *BASELINES))
        confirmed = confirm.run(executor, template, chosen, r.confirm)
    compared = _compare(executor, r, template)
    if lease is not None:
        lease.check()
    if r.compare:  # before our row: a job killed in between confirms and compares afresh
        study.set_user_attr(keys.COMPARE, [_compare_doc(c) for c in compared])
    with session_scope(engine) as s:
        row = s.get(Campaign, campaign_id)
        assert row is not None
        row.stop_reason = stop_reason
        if r.confirm is not None:
            confirm.save(s, row, confirmed)
        row.gpu_hours = (row.gpu_hours or 0.0) + sum(c.gpu_hours for c in compared)

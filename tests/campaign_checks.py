"""What a finished campaign must look like however many times its job was killed."""

from __future__ import annotations

from collections import Counter

import optuna
import sqlalchemy as sa
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.orm import Session

from autotune.domain import optuna_keys as keys
from autotune.search.baselines import BASELINES
from autotune.storage.models import Campaign, Deployment, Trial


def check_complete(url: str, deployment: str, campaign: str, max_trials: int
                   ) -> tuple[dict[int, Trial], list[FrozenTrial]]:
    """Every Optuna trial has one row, or failed and was re-queued with its parameters; the
    budget is met exactly; nothing was measured twice. Returns the rows and Optuna's trials."""
    engine = sa.create_engine(url)
    try:
        with Session(engine) as s:
            c = s.scalars(sa.select(Campaign).join(Deployment).where(
                Campaign.name == campaign, Deployment.name == deployment)).one()
            assert c.status == "completed" and c.lease_owner is None, (c.status, c.message)
            study_name = c.study_name
            rows = {t.number: t for t in c.trials}
    finally:
        engine.dispose()
    trials = optuna.load_study(study_name=study_name, storage=url).get_trials()
    by_number = {t.number: t for t in trials}
    for t in trials:
        if t.state == TrialState.COMPLETE:
            assert t.number in rows, f"trial {t.number} told to Optuna but not stored"
            assert t.value == rows[t.number].capacity_output_tok_s
        elif t.state == TrialState.FAIL:
            assert t.number not in rows, f"trial {t.number} stored but failed in Optuna"
            retry = by_number[t.system_attrs[keys.REQUEUED_AS]]
            assert retry.system_attrs[keys.RETRY_OF] == t.number
            wanted = t.system_attrs.get("fixed_params") or t.params
            assert {k: retry.params[k] for k in wanted} == wanted, "re-queued other parameters"
        else:
            raise AssertionError(f"trial {t.number} left {t.state.name}")
    assert set(rows) <= set(by_number)
    counted = [r for r in rows.values() if r.state != "rejected" and r.repeat_of is None]
    assert len(counted) == max_trials, sorted((r.number, r.state) for r in counted)
    measured = [tuple(sorted(r.engine_config.items())) for r in counted if r.state == "measured"]
    assert len(measured) == len(set(measured)), "a config was measured twice"
    for r in rows.values():
        if r.repeat_of is not None:
            assert rows[r.repeat_of].state == "measured"
    roles = Counter(r.role for r in rows.values())
    assert roles["vllm-default"] == roles["guide-heuristic"] == 1, roles
    assert roles["vllm-recipe"] <= 1, roles  # only where vLLM has a recipe for the model
    assert set(roles) <= {*BASELINES, "proposed", "incumbent", "warm-start", "single-config"}
    return rows, trials

"""Resuming a campaign whose job died, and keeping a second live job off it.

The claim. A job that finds its campaign held by another (autotune.storage.lease) watches the
holder's counter for one lease period: if it moves, the holder is alive and the job is
refused; if it does not, the holder is dead and the job takes the campaign over
(storage.claims.take_over). The campaign it resumes must have been started with the same
settings (`differences`).

Repair. Only the owner asks Optuna for trials, so after a takeover every RUNNING trial belongs
to the dead job. Each result is written in the order Optuna attributes, our row, Optuna's tell,
so a RUNNING trial that has our row died between the row and the tell: the tell is replayed
from the row. One without a row never finished: its parameters are enqueued as a new WAITING
trial first (system attr `autotune:retry_of`), and only then is the old trial failed and marked
`autotune:requeued_as` (a crash between the two steps is seen and not enqueued twice). Every
Optuna trial number therefore has one row in autotune_trials, or is FAIL with `requeued_as`.
Optuna's own `fail_stale_trials` fails first and re-queues after, losing the trial if the job
dies in between, and its heartbeats do not run for ask/tell trials; hence this explicit sweep.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import Engine

from autotune.domain import optuna_keys as keys
from autotune.domain import step_model
from autotune.domain.slo import SLO
from autotune.errors import CampaignBusyError, ConfigError, SettingError, SettingText, StorageError
from autotune.storage import claims
from autotune.storage.lease import Lease, owner_token
from autotune.storage.models import Campaign, Trial
from autotune.vocabulary import Role

if TYPE_CHECKING:
    from autotune.campaign.study.request import CampaignRequest

log = logging.getLogger("autotune.resume")
# What a resumed job must share with the dead one; the executor and parallelism may change.
_SAME = ("trace_digest", "backend", "search_space", "max_trials", "seed", "screen_backend",
         "screen_top")


@dataclass
class Claim:
    campaign_id: int
    lease: Lease
    created: bool  # a new campaign (False: a resumed one)

    def abandon(self) -> None:
        """Undo the claim when the job cannot start: a new campaign leaves no trace."""
        claims.release(self.lease.engine, self.campaign_id, self.lease.owner,
                       delete=self.created)


def differences(c: Campaign, request: CampaignRequest) -> list[str]:
    """What the request would change in a stored campaign, each as `what stored (asked ...)`;
    empty if it asks for the same campaign (the executor and parallelism may change)."""
    asked = {"trace_digest": request.trace.digest, "backend": request.backend,
             "search_space": request.search_space, "max_trials": request.max_trials,
             "seed": request.seed,
             "screen_backend": request.screen.backend if request.screen else None,
             "screen_top": request.screen.top if request.screen else None}
    diffs = []
    if c.slo != request.slo.to_dict():
        diffs.append(f"SLO {SLO.from_dict(c.slo)} (asked {request.slo})")
    if c.trace_digest != request.trace.digest:
        same_file = c.trace_ref == request.trace_ref
        diffs.append(f"trace {c.trace_ref} (asked "
                     + ("the same file, whose contents have changed" if same_file
                        else request.trace_ref) + ")")
    diffs += [f"{f} {getattr(c, f)!r} (asked {asked[f]!r})" for f in _SAME
              if f != "trace_digest" and getattr(c, f) != asked[f]]
    return diffs


def roofline_profile_change(stored: set[str], labels: list[str], campaign: str
                            ) -> SettingText | None:
    """What differs when a campaign is resumed with other roofline coefficients than its
    trials were priced with (a refit, a calibration: generic and table-fitted coefficients
    differ about twofold on the demo); labels: the simulator's step-model labels today. `tune`
    refuses it; `autotune quarterly` warns and goes on, since its decision rests on
    confirmation runs, which all run today."""
    now = {p for label in labels if (p := step_model.profile(label))}
    if not stored or not now or stored <= now:
        return None
    return SettingText("campaign {name!r} priced its roofline steps with profile {stored}; "
                       "this autotune prices them with {now}", name=campaign,
                       stored=", ".join(sorted(stored)), now=", ".join(sorted(now)))


def step_model_change(stored: str | None, request: CampaignRequest, *,
                      new_campaign: bool = True) -> SettingError | None:
    """The refusal for a campaign resumed with another simulator step model: its measurements
    would not be comparable (on the demo the two differ about fivefold). new_campaign: the
    command can start another campaign instead (`tune --new-campaign`)."""
    sims = [request.options_of(b) for b in (request.backend, request.screen and
                                            request.screen.backend) if b == "sim"]
    asked = sims[0].get("step_model", "measured") if sims else None
    if stored is None or asked is None or stored == asked:
        return None
    return SettingError("campaign {name!r} simulated its trials with the {stored} step model; "
                        "resume it with AUTOTUNE_SIM__STEP_MODEL={stored}"
                        + (", or give {new_campaign} to start another" if new_campaign else ""),
                        name=request.campaign, stored=stored)


def sampler_change(stored: str | None, asked: str, campaign: str,
                   completed: bool) -> SettingText | None:
    """The warning for a campaign run again with another --sampler, None for the same one.
    Not a refusal: the sampler decides which configs are proposed, not what a measurement
    means, and Optuna continues a study with another sampler."""
    if stored is None or stored == asked:
        return None
    if completed:
        return SettingText("campaign {name!r} was run with {sampler} {stored}; its result is "
                           "shown as it is (give {new_campaign} to search with {sampler} "
                           "{asked})", name=campaign, stored=stored, asked=asked)
    return SettingText("campaign {name!r} was started with {sampler} {stored}; its remaining "
                       "trials are proposed by {sampler} {asked}", name=campaign, stored=stored,
                       asked=asked)


def _check_same(c: Campaign, request: CampaignRequest) -> None:
    diffs = differences(c, request)
    if diffs:
        raise SettingError("campaign {name!r} of deployment {deployment!r} was started with "
                           "{diffs}; resume it with the same settings or choose another "
                           "{campaign} name", name=request.campaign,
                           deployment=request.deployment.name, diffs=", ".join(diffs))


def _create(engine: Engine, request: CampaignRequest, owner: str) -> int | None:
    r = request
    return claims.create_campaign(
        engine, r.deployment, owner, r.backend_options.get("model_path"),
        name=r.campaign, slo=r.slo.to_dict(), trace_ref=r.trace_ref,
        trace_digest=r.trace.digest, backend=r.backend, executor=r.executor,
        search_space=r.search_space, study_name=r.study_name, max_trials=r.max_trials,
        seed=r.seed, screen_backend=r.screen.backend if r.screen else None,
        screen_top=r.screen.top if r.screen else None)


def claim_campaign(engine: Engine, request: CampaignRequest, lease_s: float) -> Claim:
    """Create the campaign, or take over one whose job is dead; refuse one a live job runs."""
    owner = owner_token()
    created = _create(engine, request, owner)
    if created is not None:
        return Claim(created, Lease(engine, created, owner, lease_s), created=True)
    c = claims.find(engine, request.deployment.name, request.campaign)
    if c is None:
        raise StorageError(f"campaign {request.campaign!r} could neither be created nor "
                           "found; check the database")
    if c.status == "completed":
        raise ConfigError(f"campaign {request.campaign!r} of deployment "
                          f"{request.deployment.name!r} is already completed")
    _check_same(c, request)
    c_id, seen = c.id, (c.lease_owner, c.lease_renewals)
    if seen[0] is not None:
        # Owned: alive if its counter moves within one lease period, dead if it does not.
        deadline = time.monotonic() + lease_s
        while time.monotonic() < deadline:
            time.sleep(min(lease_s / 6, max(deadline - time.monotonic(), 0)))
            now = claims.holder(engine, c_id)
            assert now is not None
            if now != seen:
                break
    if not claims.take_over(engine, c_id, request.executor, owner, seen):
        now = claims.holder(engine, c_id)
        holder = now[0] if now is not None else None
        who = f"another live job ({holder})" if holder else "another job that has just let go"
        raise CampaignBusyError(f"campaign {request.campaign!r} of deployment "
                                f"{request.deployment.name!r} is being run by {who}; wait for it "
                                "to finish or stop it, then run this again")
    log.warning("%s: resuming the campaign (previous job %s)", request.study_name,
                seen[0] or "stopped")
    return Claim(c_id, Lease(engine, c_id, owner, lease_s), created=False)


# -- the study ---------------------------------------------------------------------------------
def ensure_baselines(study: optuna.Study, baseline_params: dict[str, dict[str, Any]]) -> None:
    """Enqueue the baselines a study does not hold yet (a job can die between enqueues)."""
    roles = {t.user_attrs.get(keys.ROLE) for t in study.get_trials(deepcopy=False)}
    for role, params in baseline_params.items():
        if role not in roles:
            study.enqueue_trial(params, user_attrs={keys.ROLE: role})


def ensure_references(study: optuna.Study,
                      references: list[tuple[str, str, dict[str, Any], dict[str, Any]]]) -> None:
    """Enqueue the (tag, role, params, exact config) references a study does not hold yet: the
    incumbent and the warm starts. Their exact config rides along as a user attribute, so a
    setting the space does not tune is kept too."""
    tags = {t.user_attrs.get(keys.ENQUEUE_TAG) for t in study.get_trials(deepcopy=False)}
    for tag, role, params, config in references:
        if tag not in tags:
            study.enqueue_trial(params, user_attrs={keys.ROLE: role, keys.ENQUEUE_TAG: tag,
                                                    keys.ENGINE_CONFIG: config})


def requeue(storage: BaseStorage, study: optuna.Study, trial: FrozenTrial) -> int:
    """Fail a trial that never finished, its parameters enqueued again first (or found
    enqueued by an earlier, interrupted requeue); returns the new trial's number."""
    trials = study.get_trials(deepcopy=False)
    earlier = [t.number for t in trials if t.system_attrs.get(keys.RETRY_OF) == trial.number]
    number: int | None = earlier[0] if earlier else None
    if number is None:
        params = dict(trial.system_attrs.get(keys.FIXED_PARAMS) or trial.params)
        template = optuna.trial.create_trial(
            state=TrialState.WAITING, system_attrs={keys.FIXED_PARAMS: params,
                                                    keys.RETRY_OF: trial.number},
            user_attrs={keys.ROLE: trial.user_attrs.get(keys.ROLE, Role.PROPOSED),
                        "retry_of": trial.number,
                        # A reference's exact config (see autotune.campaign.study.loop), and the backend and
                        # screening trial of a multi-fidelity campaign's real trial.
                        **{k: trial.user_attrs[k]
                           for k in (keys.ENGINE_CONFIG, keys.FIDELITY, keys.SCREEN_OF)
                           if k in trial.user_attrs}})
        study_id = storage.get_study_id_from_name(study.study_name)
        new_id = storage.create_new_trial(study_id, template_trial=template)
        number = storage.get_trial_number_from_id(new_id)
    storage.set_trial_system_attr(trial._trial_id, keys.REQUEUED_AS, number)
    storage.set_trial_user_attr(trial._trial_id, "requeued_as", number)
    storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
    log.warning("%s trial %d: its job died before it finished; re-queued as trial %d",
                study.study_name, trial.number, number)
    return number


def repair(storage: BaseStorage, study: optuna.Study, rows: dict[int, Trial]) -> list[int]:
    """Settle the trials a dead job left RUNNING; returns the numbers that were re-queued."""
    requeued = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        row = rows.get(t.number)
        if row is not None:  # died between our row and Optuna's tell: replay the tell
            log.warning("%s trial %d: stored but not told to Optuna; telling it now",
                        study.study_name, t.number)
            study.tell(t.number, row.capacity_output_tok_s)
        else:
            requeue(storage, study, t)
            requeued.append(t.number)
    return requeued

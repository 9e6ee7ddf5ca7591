"""What a resumed campaign must share with the stored one, and what it may change.

A campaign resumed with another trace, SLO, backend, search space, max_trials, seed or
screening is refused: its trials would not be comparable. Another simulator step model is refused, other
roofline coefficients refused by `tune` and warned of by `autotune quarterly`, another sampler
only warned of. The stored values are read by autotune.storage.study_settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.domain import step_model
from autotune.domain.slo import SLO
from autotune.errors import SettingError, SettingText

if TYPE_CHECKING:
    from autotune.campaign.study.request import CampaignRequest
    from autotune.storage.models import Campaign

# What a resumed job must share with the dead one; the executor and parallelism may change.
_SAME = ("trace_digest", "backend", "search_space", "max_trials", "seed", "screen_backend",
         "screen_top")


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


def check_same_settings(c: Campaign, request: CampaignRequest) -> None:
    """Refuse a request that would change a stored campaign (see `differences`)."""
    diffs = differences(c, request)
    if diffs:
        raise SettingError("campaign {name!r} of deployment {deployment!r} was started with "
                           "{diffs}; resume it with the same settings or choose another "
                           "{campaign} name", name=request.campaign,
                           deployment=request.deployment.name, diffs=", ".join(diffs))


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

"""Per-path configs: the tuning guide's hot / cold separation as an option of one campaign.

`autotune tune --per-path` for deployment D and campaign C runs, in this order:

1. campaign C of D on the whole trace, exactly as without the option. Its winner is the single
   config: what the per-path configs are compared with, and what serves a path left untuned.
2. per path P, campaign C of deployment `D.P` on P's sub-trace (autotune.traffic.split, the
   guide's rule: max_tokens <= 512 is hot; else warm if its first prefix block is a frequent
   one, else cold), with the path's SLO (`--slo-hot` ..., else `--slo`). `D.P` is D's hardware
   and model with the path's traffic profile: `chat` for hot (the guide's latency-sensitive
   tier), `batch` for warm and cold, so without `--space` hot searches the chat space and cold
   the batch space (autotune.search.spaces.deployment.space_name_for), and the guide-heuristic
   baseline follows.
   After its confirmation, the single config is measured on P's sub-trace with the same seeds
   (`CampaignRequest.compare`), so the two are compared on the same traffic and noise draws.

Why a deployment per path rather than a `path` column or `?path=` parameter: a serving stack
runs one engine pool per path (the guide isolates them on the GPU), and each pool reads its own
config from the unchanged contract, `GET /v1/deployments/D.hot/config`; history, rollback and
the quarterly job work per path as they are, and D's own config keeps its meaning. The path
campaigns keep the name C (so `publish --campaign C --deployment D.hot` works and a quarter
name still gives the period); they are linked to the parent by their trace_ref, `FILE#path=P`
(the parent's trace_ref plus the path), and the Optuna study attribute `autotune:path` (path,
rule, requests of the sub-trace, parent deployment and campaign).

Warm: folded into cold by default (`--paths hot,cold`). The guide isolates two pools (hot and
cold, MPS quotas 30/70); warm is a priority within the long-output traffic, whose shared
prefixes the cold pool's prefix cache serves. `--paths hot,warm,cold` tunes warm on its own.

Budget: `--trials` applies to each campaign (the whole trace's and every path's), so a
two-path run measures up to 3 x trials, plus confirmation runs, plus `--confirm-repeats` runs
of the single config per path. A path with fewer than `--min-path-requests` requests is skipped
with a note (its traffic keeps the single config); if no path has enough, the run is refused
before anything is written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from autotune.campaign.study import CampaignRequest, Reference
from autotune.domain import optuna_keys as keys
from autotune.domain.deployment import DeploymentSpec
from autotune.domain.slo import SLO
from autotune.errors import ConfigError, NotFoundError, SettingError, SettingText
from autotune.release.publish import publish_campaign
from autotune.search.spaces import accuracy
from autotune.search.spaces.deployment import space_name_for
from autotune.storage import repo
from autotune.storage.models import Campaign, Deployment, Publication
from autotune.traffic.split import PATH_NAMES, split_into
from autotune.traffic.trace import Trace
from autotune.vocabulary import Role

HOT_MAX_TOKENS = 512  # the tuning guide's hot-path bound (autotune.traffic.stats.paths)
WARM_MIN_SHARE = 0.01
PATH_SETS: dict[str, dict[str, tuple[str, ...]]] = {
    "hot,cold": {"hot": ("hot",), "cold": ("warm", "cold")},
    "hot,warm,cold": {"hot": ("hot",), "warm": ("warm",), "cold": ("cold",)},
}
DEFAULT_PATHS = "hot,cold"
PATH_PROFILES = {"hot": "chat", "warm": "batch", "cold": "batch"}
# Below 50 requests a P99 is one of the two slowest requests: one outlier would pick the config.
MIN_PATH_REQUESTS = 50
_RULES = {"hot": f"max_tokens (else output tokens) <= {HOT_MAX_TOKENS}",
          "warm": f"not hot, first prefix block shared by >= {WARM_MIN_SHARE:.0%} of requests",
          "cold": "not hot, not warm"}


def parse_paths(value: str) -> dict[str, tuple[str, ...]]:
    """The path set of the paths setting (`--paths`): {path: the guide's paths it holds}."""
    asked = {p.strip() for p in value.split(",") if p.strip()}
    key = ",".join(p for p in PATH_NAMES if p in asked)  # in the guide's order
    if key not in PATH_SETS or asked - set(PATH_NAMES):
        raise SettingError("{paths} {got!r} is not a path split; use hot,cold (warm folded "
                           "into cold) or hot,warm,cold", got=value)
    return PATH_SETS[key]


def rule_of(members: tuple[str, ...]) -> str:
    """How a router tells a request of this path (the split's rule, in words)."""
    return " | ".join(f"{m}: {_RULES[m]}" for m in members)


@dataclass(frozen=True)
class PathPlan:
    path: str
    members: tuple[str, ...]  # the guide's paths it holds (cold: warm and cold by default)
    requests: int
    of_requests: int  # the whole trace's
    trace: Trace | None  # None: skipped
    skipped: str | None = None  # why


def plan_paths(trace: Trace, groups: dict[str, tuple[str, ...]], *,
               min_requests: int = MIN_PATH_REQUESTS) -> list[PathPlan]:
    """One plan per path: its sub-trace, or why it is skipped. Refuses a split in which no
    path has `min_requests` requests (there is nothing to tune per path)."""
    if min_requests < 1:
        raise SettingError("{min_path_requests} must be at least 1")
    parts = split_into(trace, groups, hot_max_tokens=HOT_MAX_TOKENS, warm_min_share=WARM_MIN_SHARE)
    plans = []
    for name, members in groups.items():
        n = len(parts[name]) if name in parts else 0
        if n < min_requests:
            plans.append(PathPlan(name, members, n, len(trace), None,
                                  f"{n} requests, fewer than {min_requests} "
                                  "(--min-path-requests); its traffic keeps the single config"))
        else:
            plans.append(PathPlan(name, members, n, len(trace), parts[name]))
    if not any(p.trace is not None for p in plans):
        counts = ", ".join(f"{p.path} {p.requests}" for p in plans)
        raise SettingError("no path of trace {trace!r} has the {least} requests a per-path "
                           "campaign needs ({counts}); lower {min_path_requests} or tune "
                           "without {per_path}", trace=trace.name, least=min_requests,
                           counts=counts)
    return plans


def path_deployment_name(parent: str, path: str) -> str:
    return f"{parent}.{path}"


def path_deployment(spec: DeploymentSpec, path: str) -> DeploymentSpec:
    """The deployment a path's config is tuned and published for: the parent's hardware and
    model, the path's traffic profile."""
    return DeploymentSpec.build(**{**spec.model_dump(),
                                   "name": path_deployment_name(spec.name, path),
                                   "traffic_profile": PATH_PROFILES[path]})


def path_trace_ref(parent_ref: str, path: str) -> str:
    return f"{parent_ref}#path={path}"


def path_requests(parent: CampaignRequest, plans: list[PathPlan], *, slos: dict[str, SLO],
                  space: str | None) -> list[CampaignRequest]:
    """The tuned paths' campaign requests (without the single config to compare: the parent
    has not run yet). `space` is the one asked for (None: each path's profile's)."""
    out = []
    for plan in plans:
        if plan.trace is None:
            continue
        dep = path_deployment(parent.deployment, plan.path)
        attrs = {"path": plan.path, "rule": rule_of(plan.members), "requests": plan.requests,
                 "of_requests": plan.of_requests, "parent_deployment": parent.deployment.name,
                 "parent_campaign": parent.campaign}
        out.append(dataclasses.replace(
            parent, deployment=dep, slo=slos.get(plan.path, parent.slo), trace=plan.trace,
            trace_ref=path_trace_ref(parent.trace_ref, plan.path),
            search_space=space_name_for(dep, space), references=(), compare=(),
            study_attrs={keys.PATH: attrs}))
    return out


def with_single_config(request: CampaignRequest, config: dict[str, Any] | None) -> CampaignRequest:
    """The path's request starting its search from the whole trace's winner (its first trial,
    and a confirmation candidate, so the path's winner beats it under the same seeds, or is
    it), and measuring it beside the path's own winner (None: the parent found no feasible
    config, so there is nothing to start from or compare)."""
    if config is None:
        return request
    single = Reference(Role.SINGLE_CONFIG, Role.SINGLE_CONFIG, dict(config))
    return dataclasses.replace(request, references=(*request.references, single),
                               compare=(single,))


def single_config(campaign: Campaign) -> dict[str, Any] | None:
    """The whole trace's winner (confirmed where confirmation ran)."""
    winner = repo.choose_winner(campaign).trial
    return dict(winner.engine_config) if winner is not None else None


def path_campaigns(session: Session, parent: Campaign) -> dict[str, Campaign]:
    """The path campaigns of a parent campaign, by path: campaign `parent.name` of deployment
    `D.P` whose trace is the parent's trace's path P."""
    found: dict[str, Campaign] = {}
    for path in PATH_NAMES:
        campaign = session.scalar(select(Campaign).join(Deployment).where(
            Deployment.name == path_deployment_name(parent.deployment.name, path),
            Campaign.name == parent.name))
        if campaign is not None and campaign.trace_ref == path_trace_ref(parent.trace_ref, path):
            found[path] = campaign
    return found


def publish_paths(session: Session, campaign_name: str, *, deployment: str | None,
                  period_label: str | None, published_by: str,
                  note: str | None) -> list[Publication]:
    """Publish every path campaign's winner as its path deployment's config, all or none (the
    caller's transaction): a hot pool must never read a config from another run than the cold
    pool's."""
    parent = repo.find_campaign(session, campaign_name, deployment)
    paths = path_campaigns(session, parent)
    if not paths:
        raise NotFoundError(SettingText("campaign {campaign!r} of deployment {deployment!r} has "
                                        "no per-path campaigns; tune it with {per_path}",
                                        campaign=parent.name,
                                        deployment=parent.deployment.name))
    for path, c in paths.items():
        if c.status != "completed":
            raise ConfigError(f"path {path} (deployment {c.deployment.name!r}) of campaign "
                              f"{c.name!r} is {c.status}, not completed; finish it with the "
                              "same `autotune tune --per-path` command")
        if repo.choose_winner(c).trial is None:
            raise NotFoundError(f"path {path} (deployment {c.deployment.name!r}) of campaign "
                                f"{c.name!r} has no feasible trial; nothing was published")
    pubs = []
    for path, c in paths.items():
        winner = repo.choose_winner(c).trial
        assert winner is not None
        measured = (winner.latency_recorded_rate or {}).get("requests")
        pubs.append(publish_campaign(
            session, c.name, deployment=c.deployment.name, trial_number=None,
            period_label=period_label, published_by=published_by,
            note=note or f"path {path} of campaign {c.name!r} of {parent.deployment.name!r}"
                         + (f", tuned on its {measured} requests" if measured else "")))
    return pubs


@dataclass(frozen=True)
class PathSummary:
    """One path beside the single config, for the end-of-run table."""

    path: str
    deployment: str
    requests: int
    of_requests: int
    skipped: str | None = None
    space: str | None = None
    slo: str | None = None
    winner_trial: int | None = None
    winner_config: dict[str, Any] | None = None
    # Confirmed mean where confirmation ran, else the search measurement; the single config's
    # capacity on this path over the same seeds.
    winner_output_tok_s: float | None = None
    single_output_tok_s: float | None = None
    # The winner's values that change the model's numerics, flagged as the summary does.
    winner_accuracy_affecting: tuple[accuracy.NumericsChange, ...] = ()

    @property
    def gain_pct(self) -> float | None:
        if not self.winner_output_tok_s or not self.single_output_tok_s:
            return None
        return 100.0 * (self.winner_output_tok_s / self.single_output_tok_s - 1.0)


def summarise(campaign: Campaign | None, plan: PathPlan, parent_deployment: str,
              compared: list[dict[str, Any]]) -> PathSummary:
    """A path's result: `compared` is the study's `comparisons` (autotune.campaign.study)."""
    base = PathSummary(plan.path, path_deployment_name(parent_deployment, plan.path),
                       plan.requests, plan.of_requests, skipped=plan.skipped)
    if campaign is None:
        return base
    chosen = repo.choose_winner(campaign)
    winner, confirmed = chosen.trial, chosen.confirmation
    single = next((c for c in compared if c.get("role") == Role.SINGLE_CONFIG), None)
    slo = SLO.from_dict(campaign.slo)
    return dataclasses.replace(
        base, space=campaign.search_space, slo=str(slo),
        winner_trial=winner.number if winner else None,
        winner_config=dict(winner.engine_config) if winner else None,
        winner_output_tok_s=(confirmed.mean_output_tok_s if confirmed is not None
                             else winner.capacity_output_tok_s if winner else None),
        single_output_tok_s=single["mean_output_tok_s"] if single else None,
        winner_accuracy_affecting=tuple(accuracy.campaign_changes(
            campaign, winner.engine_config)) if winner else ())

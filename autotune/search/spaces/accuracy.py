"""Accuracy-affecting values: which of a config's engine arguments change the model's numerics
(an fp8 KV cache, speculative decoding; the built-in judgement of numerics.py and the spaces' own
`affects_accuracy` marks), for the summary, the report and `--json`, and the refusal of a
reference config that a deployment forbidding them would have to run.

A value the model requires (a pin of rules.yaml: DeepSeek-V4's fp8 cache on Hopper) is not a
change: it is the model's own numerics in vLLM, which every baseline runs too and no config can
leave, so there is nothing to flag or forbid.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.domain.deployment import DeploymentSpec
from autotune.errors import AutotuneError, SettingError
from autotune.search.spaces.deployment import load_search_space
from autotune.search.spaces.numerics import BUILTIN, builtin_changes
from autotune.search.spaces.pinned import pinned_values
from autotune.search.spaces.space import SearchSpace
from autotune.storage.repo import spec_of

if TYPE_CHECKING:
    from autotune.storage.models import Campaign


@dataclass(frozen=True)
class NumericsChange:
    name: str
    value: Any
    why: str

    @property
    def shown(self) -> str:
        value = self.value
        return json.dumps(value) if isinstance(value, dict) else str(value)

    def text(self) -> str:
        return f"{self.name}={self.shown} ({self.why})"

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "why": self.why}


def changes(config: Mapping[str, Any], space: SearchSpace | None,
            pinned: Mapping[str, Any]) -> list[NumericsChange]:
    """The config's values that change the model's numerics: judged by the space's marks
    where it has the parameter, else by the built-in judgement; pinned values left out."""
    found = []
    for name, value in config.items():
        if value is None or (name in pinned and pinned[name] == value):
            continue
        param = space.param(name) if space is not None and name in space.param_names else None
        if param.changes_numerics(value) if param is not None else builtin_changes(name, value):
            known = BUILTIN.get(name)
            why = known.why if known else f"marked in search space {space.name!r}"  # type: ignore[union-attr]
            found.append(NumericsChange(name, value, why))
    return found


def campaign_changes(campaign: Campaign, config: Mapping[str, Any]) -> list[NumericsChange]:
    """A campaign's stored config's numerics changes, judged by the campaign's space where it
    still loads (a space file may have moved since), else by the built-in judgement."""
    try:
        space: SearchSpace | None = load_search_space(campaign.search_space)
    except AutotuneError:
        space = None
    return changes(config, space, pinned_values(spec_of(campaign.deployment)))


def summary_line(found: list[NumericsChange]) -> str | None:
    """The line under the winner in the terminal summary; None when nothing changes."""
    if not found:
        return None
    return "Changes numerics: " + "; ".join(c.text() for c in found)


def check_allowed(space: SearchSpace, deployment: DeploymentSpec,
                  configs: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse, for a deployment that forbids accuracy-affecting values, a reference config
    (baseline, incumbent, warm start) that would run one; `configs` maps what each is to its
    explicit arguments."""
    if deployment.allow_accuracy_affecting:
        return
    pinned = pinned_values(deployment)
    for what, config in configs.items():
        found = changes(config, space, pinned)
        if found:
            raise SettingError(
                "deployment {name!r} forbids accuracy-affecting values, but the {what} runs "
                "{changes}; leave it out or tune another deployment that allows them "
                "({allow_accuracy_affecting})", name=deployment.name, what=what,
                changes="; ".join(c.text() for c in found))

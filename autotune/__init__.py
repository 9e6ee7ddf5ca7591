"""autotune: finds the vLLM engine arguments with the most capacity under a P99 latency SLO.

The library under the commands (docs/guides/library.md)::

    import autotune

    run = autotune.run_campaign(autotune.TuneRequest.of(campaign="q1", max_trials=30))

`run_campaign`, `TuneRequest`, `run_quarterly` and `QuarterlyRequest` are imported on first use,
so that `import autotune.<module>` and `autotune --version` do not load Optuna and the campaign
stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LIBRARY = {"run_campaign": "autotune.campaign.run",
            "TuneRequest": "autotune.campaign.requests",
            "run_quarterly": "autotune.campaign.quarterly_job",
            "QuarterlyRequest": "autotune.campaign.requests"}
__all__ = ["QuarterlyRequest", "TuneRequest", "__version__", "run_campaign", "run_quarterly"]

if TYPE_CHECKING:
    from autotune.campaign.quarterly_job import run_quarterly
    from autotune.campaign.requests import QuarterlyRequest, TuneRequest
    from autotune.campaign.run import run_campaign


def __getattr__(name: str) -> Any:
    if name in _LIBRARY:
        return getattr(importlib.import_module(_LIBRARY[name]), name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")

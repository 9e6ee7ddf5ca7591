"""Which simulator step model a campaign's simulated trials run on, layout by layout, said
before the first trial: the capacities a simulated campaign reports are only as good as its
step times, and the measured tables cover some GPU, model, layout and precision combinations,
not all (docs/guides/simulator.md, "Measured step times"). The simulator names its step model
in each engine's notes; autotune.domain.step_model reads them."""

from __future__ import annotations

from typing import Any

from autotune.domain import parallelism
from autotune.domain.deployment import DeploymentSpec
from autotune.domain.step_model import summary
from autotune.errors import EngineStartError
from autotune.measure.backends import load_backend
from autotune.search.baselines import vllm_defaults
from autotune.search.spaces import SearchSpace
from autotune.search.spaces.deployment import config_for

Runs = list[tuple[str | None, str]]  # (parallel layout, the simulator's step-model label)


def step_model_runs(space: SearchSpace, dep: DeploymentSpec, options: dict[str, Any]) -> Runs:
    """The step model each searched parallel layout runs on, as the simulator labels it (vLLM's
    defaults with the layout; a layout the simulator cannot start is left out: its trials fail
    anyway)."""
    layouts = (list(space.param(parallelism.PARAM).choices)
               if parallelism.PARAM in space.param_names else [None])
    backend = load_backend("sim", **options)
    runs: Runs = []
    for layout in layouts:
        params = {} if layout is None else {parallelism.PARAM: layout}
        try:
            backend.start(config_for(space, vllm_defaults(dep), params), dep, label="plan")
            runs.append((layout, backend.notes()["step_model"]))
        except EngineStartError:
            continue
        finally:
            backend.stop()
    return runs


def step_model_line(runs: Runs) -> str:
    """One line for people: `step_model_runs` summarised."""
    return f"Simulator step model: {summary(runs) or 'none (no layout starts)'}"

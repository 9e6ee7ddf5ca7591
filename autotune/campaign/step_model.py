"""Which simulator step model a campaign's simulated trials run on, layout by layout, said
before the first trial: the capacities a simulated campaign reports are only as good as its
step times, and the measured tables cover some GPU, model, layout and precision combinations,
not all (docs/guides/simulator.md, "Measured step times").

The simulator names its step model in each engine's notes (workers/sim/backend.py `notes`);
`kind` reads the name's kind, so the campaign layer needs no import of the simulator."""

from __future__ import annotations

from typing import Any

from autotune.domain import parallelism
from autotune.domain.deployment import DeploymentSpec
from autotune.errors import EngineStartError
from autotune.measure.backends import load_backend
from autotune.search.baselines import vllm_defaults
from autotune.search.space import config_for
from autotune.search_spaces import SearchSpace

MEASURED, ESTIMATED, FALLBACK, ROOFLINE = ("measured", "partly estimated", "no table",
                                           "roofline")


def kind(label: str) -> str:
    """The kind of step model a simulated engine's notes name: a measured table, a partly
    estimated one, the roofline where no table exists, or the roofline asked for."""
    if label.startswith("measured table"):
        return MEASURED
    if label.startswith("partly estimated table"):
        return ESTIMATED
    return FALLBACK if label.startswith("roofline (no measured table") else ROOFLINE


def step_model_line(space: SearchSpace, dep: DeploymentSpec, options: dict[str, Any]) -> str:
    """One line: the step model each searched parallel layout runs on (vLLM's defaults with
    the layout; a layout the simulator cannot start is left out: its trials fail anyway)."""
    layouts = (list(space.param(parallelism.PARAM).choices)
               if parallelism.PARAM in space.param_names else [None])
    backend = load_backend("sim", **options)
    by_kind: dict[str, list[str]] = {}
    missing = ""
    for layout in layouts:
        params = {} if layout is None else {parallelism.PARAM: layout}
        try:
            backend.start(config_for(space, vllm_defaults(dep), params), dep, label="plan")
            label = backend.notes()["step_model"]
        except EngineStartError:
            continue
        finally:
            backend.stop()
        found = kind(label)
        by_kind.setdefault(found, []).append(str(layout or "the deployment's layout"))
        if found == FALLBACK and not missing:
            missing = label[len("roofline ("):label.index(")")]
    if set(by_kind) == {ROOFLINE}:
        return ("Simulator step model: the roofline, as AUTOTUNE_SIM__STEP_MODEL asks (GPU "
                "coefficients uncalibrated: capacities can be several times off on a GPU)")
    parts = [f"measured kernel tables for {', '.join(by_kind[MEASURED])}"] if MEASURED in by_kind \
        else []
    if ESTIMATED in by_kind:
        parts.append(f"partly estimated tables for {', '.join(by_kind[ESTIMATED])} (each "
                     "trial's notes say which part, and by how much it may be off)")
    if FALLBACK in by_kind:
        parts.append(f"the roofline for {', '.join(by_kind[FALLBACK])} ({missing}; its GPU "
                     "coefficients are uncalibrated: capacities can be several times off)")
    return "Simulator step model: " + "; ".join(parts)

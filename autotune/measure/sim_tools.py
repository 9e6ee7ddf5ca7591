"""The simulator's offline tools as a front end reaches them.

`sim fit-cpu` (the CPU step cost fitted to a real sweep), `sim kernels build` (measured
step-time tables) and `sim kernels fit-roofline` (the roofline fitted to those tables) do their
work in the simulator's package (autotune.workers.sim.tools). The backend registered as "sim"
names that module as its `tools`, so the CLI finds them through the entry point, as it finds
`calibrate`, and never imports the workers. They return plain data for the front end to print.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from autotune.errors import ConfigError
from autotune.measure.backends import backend_class


@dataclass(frozen=True)
class StepPoint:
    """One batch size of a sweep's decode steps, as a CPU fit saw it."""

    batch: int
    kv_tokens: float
    measured_ms: float
    gpu_ms: float
    used: bool  # fitted (False: overlapped and GPU-bound, an upper bound only)
    cpu_ms: float = math.nan  # the fitted profile's CPU time at this batch


@dataclass(frozen=True)
class CpuFitResult:
    """A CPU step cost fitted to a real sweep, and where the profile holding it was written."""

    profile_path: Path
    gpu: str
    model: str
    step_model: str  # which GPU step model gave the GPU times (label)
    overlapped: bool  # CPU and GPU overlap (asynchronous scheduling) rather than add up
    points: tuple[StepPoint, ...]
    coefficients: dict[str, float]  # the fitted profile's CPU step terms, by name
    rms_ms: float
    tpot_check: list[dict[str, Any]]  # each concurrency's median TPOT: measured, before, after
    unmodelled_args: tuple[str, ...]  # the sweep's engine arguments the simulator did not see
    summary: dict[str, Any]  # all of the above but the path, as the profile records the fit


@dataclass(frozen=True)
class StepTableWritten:
    """A measured step-time table written, with its GPU step time at a few batches."""

    path: Path
    decode_context: int  # tokens of context of each sequence in decode_ms
    decode_ms: dict[int, float]  # sequences decoded -> step time
    prefill_ms: dict[int, float]  # prompt tokens prefilled -> step time


@dataclass(frozen=True)
class RooflineFit:
    """A GPU's roofline coefficients fitted to its measured tables, and the profile written."""

    gpu: str
    profile_path: Path
    coefficients: dict[str, Any]
    fit: dict[str, Any]  # the profile's record of the fit: tables, errors, models left out


@runtime_checkable
class SimulatorTools(Protocol):
    def fit_cpu_cost(self, sweep: Path, *, step_model: str, step_precision: str | None,
                     profile: Path | None, out: Path | None,
                     profile_dir: Callable[[], Path]) -> CpuFitResult:
        """Fit a profile's CPU step cost to the sweep file, check it against the sweep's TPOT
        and write the profile: to `out`, else to `profile_dir()` under the next version.
        profile_dir is called only where the fit needs the folder (no `profile`, or no `out`),
        so that a bad setting behind it stops only a command that uses it."""
        ...

    def build_step_tables(self, gpu: str, model: str, parallel: Sequence[str], *,
                          precision: str | None, backend_version: str, out: Path | None,
                          estimate_moe_from: str | None, kv_cache_dtype: str
                          ) -> list[StepTableWritten]:
        """Sample the measured kernels into one step-time table per layout and write them all
        (to `out`, else where the simulator reads them), or none."""
        ...

    def fit_roofline(self, gpus: Sequence[str], out: Path | None) -> list[RooflineFit]:
        """Fit the roofline to each GPU's measured tables (none given: every GPU with enough
        of them) and write one profile per GPU (to `out`, else the bundled ones), or none."""
        ...


def simulator_tools() -> SimulatorTools:
    """The offline tools of the backend registered as "sim"."""
    tools = getattr(backend_class("sim"), "tools", None)
    if not isinstance(tools, SimulatorTools):
        raise ConfigError("the sim backend has no offline tools (sim fit-cpu, sim kernels)")
    return tools

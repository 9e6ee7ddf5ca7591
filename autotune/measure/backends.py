"""The engine-backend plug-in point.

A backend runs one engine with one EngineConfig and replays traffic against it. Implementations
live outside the core (the `workers` package, or a third party) and are found by name through
the `autotune.backends` entry-point group.

Contract:
- `__init__(**options)` takes plain-data options (TrialSpec.backend_options) and no live
  resources, so a backend object stays picklable (Ray ships it).
- `start(config, deployment, label=...)` brings the engine up (`label` names it in logs and
  files: study and trial); it raises EngineStartError with a failure_class ("oom",
  "invalid_args", "start_timeout", "start_failed") if it cannot.
- `warmup(trace, seed)` may send a little traffic before measuring (default: nothing).
- `replay(trace, rate_scale, seed)` replays the trace with arrivals compressed by rate_scale
  (2.0 = twice the recorded rate) and returns a ReplayResult; it never raises for a request
  that failed, it records it.
- `replay_closed_loop(trace, max_concurrency, seed)` sends the trace's requests in order from
  `max_concurrency` clients, each sending its next when its last finished (`vllm bench serve
  --max-concurrency`; arrival times unused); the result's scheduled_s are the send times.
- `stop()` releases everything; it is safe to call twice or after a failed start.
- An engine that dies during a replay raises ReplayError.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from importlib.metadata import entry_points

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import CalibrationResult, Measurement, ReplayResult
from autotune.errors import ConfigError


class EngineBackend(ABC):
    name: str = ""
    simulated: bool = False  # a model of an engine: it may screen, its numbers are not published

    @abstractmethod
    def start(self, config: EngineConfig, deployment: DeploymentSpec, *,
              label: str = "engine") -> None: ...

    def warmup(self, trace: object, seed: int) -> None:
        return None

    def telemetry(self) -> dict[str, object]:
        """What the backend observed of its hardware (GPU memory and utilisation); {} if none."""
        return {}

    def notes(self) -> dict[str, str]:
        """How the started engine was modelled, for the trial record (a simulator names the
        approximations it used); {} for a real engine."""
        return {}

    @abstractmethod
    def replay(self, trace: object, rate_scale: float, seed: int) -> ReplayResult: ...

    def replay_closed_loop(self, trace: object, max_concurrency: int, seed: int) -> ReplayResult:
        raise ConfigError(f"the {self.name or type(self).__name__} backend has no closed-loop "
                          "replay; use sim or vllm")

    @abstractmethod
    def stop(self) -> None: ...

    @classmethod
    def calibrate(cls, measurements: list[Measurement], deployment: DeploymentSpec
                  ) -> CalibrationResult:
        """Fit the backend's model to real measurements (only models can be calibrated)."""
        raise ConfigError(f"the {cls.name or cls.__name__} backend has no model to calibrate")


def _group(group: str) -> dict[str, object]:
    return {ep.name: ep for ep in entry_points(group=group)}


def available_backends() -> list[str]:
    return sorted(_group("autotune.backends"))


def backend_class(name: str) -> type[EngineBackend]:
    eps = _group("autotune.backends")
    if name not in eps:
        raise ConfigError(f"unknown backend {name!r}; available: {', '.join(sorted(eps))}")
    return eps[name].load()  # type: ignore[attr-defined,no-any-return]


def load_backend(name: str, **options: object) -> EngineBackend:
    return backend_class(name)(**options)

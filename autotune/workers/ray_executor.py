"""The `ray` executor: one Ray actor per trial, asking for the trial's GPUs.

Ray's resource accounting is what keeps two engines off one GPU: an actor asks for
`num_gpus` = tensor x pipeline x data parallel size (TrialSpec.gpus), and Ray sets
CUDA_VISIBLE_DEVICES to the GPUs it grants; a trial that asks for more GPUs than the cluster
has fails as "invalid_args" at once instead of waiting forever.
On a machine without GPUs (the simulator, a laptop) a local Ray is started with logical GPUs,
`slots * gpus_per_trial` of them unless `logical_gpu_count` says otherwise; with `address` it
joins an existing cluster instead.

A worker process or node lost mid-trial (RayActorError, a worker crash) comes back as an
"infrastructure" outcome; the study controller runs that trial once more in a fresh actor,
wherever Ray places it, and counts only a config's own failures against it.

A trial's progress events (its capacity search's steps) come back through
autotune.workers.ray_progress and reach the driver's progress sink from `wait`, in the controller's
thread, as an inline trial's do.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from autotune.domain.records import TrialOutcome
from autotune.errors import ConfigError, InfrastructureError, SettingError, SettingText
from autotune.measure import progress
from autotune.measure.executors import Executor, execute_trial
from autotune.measure.trial_spec import TrialSpec
from autotune.vocabulary import FailureClass

try:
    import ray
    from ray._private import ray_constants
    from ray.exceptions import RayActorError, RayError
except ModuleNotFoundError as exc:  # Ray is the `ray` extra; a Ray broken inside still raises
    if exc.name != "ray":
        raise
    raise SettingError("the ray executor ({executor} ray, {ray_address}, AUTOTUNE_RAY_ADDRESS) "
                       "needs Ray, which is not installed: pip install 'autotune[ray]'") from None

# After the check above: it imports Ray too.
from autotune.workers.ray_progress import DriverInbox, WorkerRelay

log = logging.getLogger("autotune.executors.ray")


@ray.remote(num_cpus=0)
class TrialActor:
    """Runs one trial in its own worker process; the process ends with the actor."""

    def run(self, spec: TrialSpec, inbox: Any = None) -> TrialOutcome:
        if inbox is None:
            return execute_trial(spec)
        relay = WorkerRelay(inbox)
        with progress.reporting(relay.send):
            outcome = execute_trial(spec)
        relay.flush()
        return outcome


_SINGLE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def _loopback_only() -> tuple[str | None, bool]:
    """Keep a local Ray on 127.0.0.1. Ray 2.60 turns `_node_ip_address="127.0.0.1"` into the
    machine's network address (services.resolve_ip_for_localhost) and its servers listen on
    every interface (seen); its single-machine mode, the one it uses on macOS, binds loopback
    only (seen). Returns what it changed, for `_restore`."""
    before = os.environ.get(_SINGLE_MACHINE), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[_SINGLE_MACHINE] = "0"  # for the node's processes, which inherit it
    ray_constants.ENABLE_RAY_CLUSTER = False  # this process read it when ray was imported
    return before


def _restore(before: tuple[str | None, bool] | None) -> None:
    if before is None:
        return
    env, constant = before
    ray_constants.ENABLE_RAY_CLUSTER = constant
    if env is None:
        os.environ.pop(_SINGLE_MACHINE, None)
    else:
        os.environ[_SINGLE_MACHINE] = env


def _first_line(exc: BaseException) -> str:
    """Ray's messages run to a dozen lines; the first says what happened."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _infra_failure(spec: TrialSpec, message: str) -> TrialOutcome:
    return TrialOutcome.failed(spec.trial_number, FailureClass.INFRASTRUCTURE, message)


def _probe(address: str) -> None:
    """Fail fast on an unreachable cluster: ray.init itself retries for minutes."""
    if address == "auto":
        return
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"cannot read Ray address {address!r}; use host:port, ray://host:port "
                          "or auto")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise InfrastructureError(SettingText(
            "cannot reach the Ray cluster at {address} ({why}); check {ray_address} / "
            "AUTOTUNE_RAY_ADDRESS and that the head is up", address=address,
            why=exc.strerror or exc)) from None


class RayExecutor(Executor):
    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None,
                 logical_gpus: bool = True, logical_gpu_count: int | None = None,
                 **options: object) -> None:
        super().__init__(**options)
        self.address, self.num_cpus, self.logical_gpus = address, num_cpus, logical_gpus
        self.logical_gpu_count = logical_gpu_count
        self._started_ray = False
        self._env_before: tuple[str | None, bool] | None = None
        self._running: dict[Any, tuple[TrialSpec, Any]] = {}
        self._refused: list[TrialOutcome] = []  # trials no node group could ever host
        self._inbox: DriverInbox | None = None

    def open(self, slots: int, gpus_per_trial: int) -> None:
        self.gpus_per_trial = gpus_per_trial
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "logging_level": logging.WARNING,
                                      "configure_logging": True}
            if self.address:
                _probe(self.address)
                kwargs["address"] = self.address
            else:
                # A local Ray stays on loopback rather than the machine's network address.
                self._env_before = _loopback_only()
                kwargs["_node_ip_address"] = "127.0.0.1"
                kwargs["num_cpus"] = self.num_cpus or os.cpu_count() or 1
                if self.logical_gpus:
                    kwargs["num_gpus"] = self.logical_gpu_count or slots * gpus_per_trial
            try:
                ray.init(**kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                _restore(self._env_before)
                self._env_before = None
                where = self.address or "a local Ray"
                raise InfrastructureError(SettingText(
                    "cannot start or join Ray ({where}): {why}; check {ray_address} / "
                    "AUTOTUNE_RAY_ADDRESS", where=where,
                    why=str(exc).strip().splitlines()[0])) from None
            self._started_ray = True
        self._inbox = DriverInbox()
        gpus = int(ray.cluster_resources().get("GPU", 0))
        # Never more trials in flight than the cluster has GPU groups for.
        self.slots = max(1, min(slots, gpus // max(gpus_per_trial, 1))) if gpus else 1
        if gpus < gpus_per_trial:
            log.warning("the Ray cluster has %d GPUs, a trial needs %d: trials will wait", gpus,
                        gpus_per_trial)

    def submit(self, spec: TrialSpec) -> None:
        # A trial's parallel layout (tensor x pipeline x data) may ask for more GPUs than the
        # whole cluster has; Ray would keep it pending forever.
        total = int(ray.cluster_resources().get("GPU", 0))
        if spec.gpus > total:
            self._refused.append(TrialOutcome.failed(
                spec.trial_number, FailureClass.INVALID_ARGS,
                f"the config needs {spec.gpus} GPUs (tensor x pipeline x data parallel size); "
                f"the Ray cluster has {total}"))
            return
        actor = TrialActor.options(num_gpus=spec.gpus,  # type: ignore[attr-defined]
                                   name=f"trial-{spec.study_name}-{spec.trial_number}",
                                   max_restarts=0).remote()
        inbox = self._inbox.actor if self._inbox else None
        self._running[actor.run.remote(spec, inbox)] = (spec, actor)

    def wait(self) -> list[TrialOutcome]:
        if self._refused:
            refused, self._refused = self._refused, []
            return refused
        if not self._running:
            return []
        while True:  # the trials' progress events as they come, until a trial finishes
            events = self._inbox.pending() if self._inbox else []
            ready, _ = ray.wait([*self._running, *events], num_returns=1)
            if self._inbox:
                self._forward(self._inbox.received(ready))
            ready, _ = ray.wait(list(self._running), num_returns=len(self._running), timeout=0)
            if ready:
                break
        if self._inbox:  # the finished trials' last steps, before their outcomes
            self._forward(self._inbox.drain())
        outcomes = []
        for ref in ready:
            spec, actor = self._running.pop(ref)
            try:
                outcomes.append(ray.get(ref))
            except RayActorError as exc:
                log.error("%s trial %d: Ray worker lost: %s", spec.study_name, spec.trial_number,
                          exc)
                outcomes.append(_infra_failure(spec, f"Ray worker lost: {_first_line(exc)}"))
            except RayError as exc:
                outcomes.append(_infra_failure(spec, f"Ray error: {_first_line(exc)}"))
            finally:
                ray.kill(actor)
        return outcomes

    def _forward(self, events: list[progress.Event]) -> None:
        """To the driver's sink: the events of trials still in flight (a late one of a trial
        already returned would say it is running again)."""
        running = {(spec.study_name, spec.trial_number) for spec, _ in self._running.values()}
        for event in events:
            if (getattr(event, "study", None), getattr(event, "number", None)) in running:
                progress.emit(event)

    def close(self) -> None:
        for _, actor in self._running.values():
            ray.kill(actor)
        self._running.clear()
        if self._inbox is not None and ray.is_initialized():
            self._inbox.close()
        self._inbox = None
        if self._started_ray and ray.is_initialized():
            ray.shutdown()
        _restore(self._env_before)
        self._env_before = None
        self._started_ray = False

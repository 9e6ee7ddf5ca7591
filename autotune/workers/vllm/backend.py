"""The `vllm` engine backend: a real vLLM OpenAI server per trial, replayed open-loop (or from
closed-loop clients, `replay_closed_loop`).

The server command is a setting, so vLLM need not share the tuner's environment (another venv's
python, `vllm serve`, a container). On a CPU the vLLM CPU build runs the same command.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import ReplayResult
from autotune.domain.vllm_defaults import effective_values
from autotune.errors import ReplayError, SettingError
from autotune.measure.backends import EngineBackend
from autotune.traffic.prompts import prompt_token_ids
from autotune.traffic.trace import Trace
from autotune.vocabulary import FailureClass
from autotune.workers.replay import ReplayPlan, run_replay
from autotune.workers.telemetry import GpuMonitor, Watermarks, make_monitor
from autotune.workers.vllm.cpu_affinity import isolate_workers, on_cores
from autotune.workers.vllm.metrics import KvUsageSampler, engine_stats, scrape
from autotune.workers.vllm.process import EngineProcess, free_port

log = logging.getLogger("autotune.vllm")
DEFAULT_COMMAND = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
# Warm-up replays the trace's first requests at 4x their rate before anything is measured. A
# handful sent at once is not enough: the CPU build specialises kernels per batch and prompt
# shape (docs/benchmarks/simulator-fidelity.md); the same holds, less sharply, for the shapes
# CUDA graphs do not cover.
WARMUP_REQUESTS = 64
WARMUP_RATE_SCALE = 4.0


def _vocab_size(model_path: str) -> int:
    config = Path(model_path) / "config.json"
    try:
        return int(json.loads(config.read_text())["vocab_size"])
    except (OSError, KeyError, ValueError):
        return 32000  # a hub id or an unreadable config: ids below every common vocabulary


class VllmBackend(EngineBackend):
    """Options (all plain data, so the backend pickles to Ray workers):
    model_path, served_model_name, command, extra_args, env, startup_timeout_s, log_dir."""

    name = "vllm"

    def __init__(self, *, model_path: str | None = None, served_model_name: str = "autotune",
                 command: list[str] | None = None, extra_args: list[str] | None = None,
                 env: dict[str, str] | None = None, startup_timeout_s: float = 900.0,
                 log_dir: str = "runs/engine-logs",
                 watermarks: dict[str, float] | None = None) -> None:
        if not model_path:
            raise SettingError("the vllm backend needs a model: pass {model_path} (a local "
                               "model directory or a model id the engine can load)")
        self.model_path, self.served_model_name = model_path, served_model_name
        self.command = list(command or DEFAULT_COMMAND)
        self.extra_args = list(extra_args or [])
        self.env = dict(env or {})
        self.startup_timeout_s, self.log_dir = startup_timeout_s, log_dir
        self.watermarks = Watermarks(**(watermarks or {}))
        self._engine: EngineProcess | None = None
        self._config: EngineConfig | None = None
        self._monitor: GpuMonitor | None = None
        self._replays = 0  # since the engine started: each replay gets prompts of its own
        self._client_cores: set[int] = set()

    def _prompt_seed(self, seed: int) -> int:
        """A prompt seed no earlier replay on this engine used. With one seed for all, every
        replay after the first finds its prompts in the prefix cache: capacity measured on a
        warm cache that production, and the simulator, never have (see
        docs/benchmarks/simulator-fidelity.md). Shared prefixes (hash_ids) stay shared within a
        replay."""
        self._replays += 1
        return ((seed & 0xFFFF) << 16) | (self._replays & 0xFFFF)

    def start(self, config: EngineConfig, deployment: DeploymentSpec, *, label: str = "engine") -> None:
        port = free_port()
        cmd = [*self.command, "--model", self.model_path, "--served-model-name",
               self.served_model_name, "--host", "127.0.0.1", "--port", str(port),
               *config.to_cli_args(), *self.extra_args]
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label)
        log_path = Path(self.log_dir) / f"{safe}.log"
        env = dict(self.env)
        if deployment.gpu_info.device == "cpu":
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            # vLLM's own thread binding (VLLM_CPU_OMP_THREADS_BIND=auto) is kept on purpose:
            # unbound OpenMP threads were many times slower (docs/benchmarks/replay-client.md).
            # The other processes are then kept off the bound cores (cpu_affinity).
        self._engine = EngineProcess(cmd, port=port, log_path=log_path, env=env)
        self._config = config
        self._replays = 0
        reserved = (0.0 if deployment.gpu_info.device == "cpu"
                    else float(effective_values(config, deployment)["gpu_memory_utilization"]))
        self._monitor = make_monitor(self.watermarks, reserved_fraction=reserved)
        self._monitor.start()
        log.info("%s: starting %s", label, " ".join(cmd))
        seconds = self._engine.start(self.startup_timeout_s)
        log.info("%s: healthy after %.1f s", label, seconds)
        # The cores the engine's worker is not bound to: the rest of it and the client run there.
        self._client_cores = (isolate_workers(self._engine.proc.pid)
                              if deployment.gpu_info.device == "cpu" and self._engine.proc
                              else set())

    @property
    def base_url(self) -> str:
        """The running engine's OpenAI-compatible server, for requests of one's own."""
        assert self._engine is not None, "start() first"
        return self._engine.base_url

    def _plan(self, trace: Trace, rate_scale: float, seed: int, rows: slice | None = None,
              max_concurrency: int | None = None) -> ReplayPlan:
        assert self._engine is not None and self._config is not None, "start() first"
        index = range(len(trace))[rows] if rows is not None else range(len(trace))
        max_len = self._config.max_model_len or 1 << 30
        vocab = _vocab_size(self.model_path)
        prompts: list[list[int] | str] = []
        outputs = []
        for i in index:
            out = int(trace.output_tokens[i])
            out = max(1, min(out, max_len - 2))
            text = trace.text(i)  # real text goes to the chat endpoint, as production sent it
            prompts.append(text if text is not None else prompt_token_ids(
                trace, i, vocab_size=vocab, seed=seed, max_prompt_tokens=max_len - out - 1))
            outputs.append(out)
        arrivals = np.asarray([trace.arrival_s[i] for i in index], dtype=float)
        arrivals = (arrivals - arrivals[0]) / rate_scale if len(arrivals) else arrivals
        return ReplayPlan(base_url=self._engine.base_url, model=self.served_model_name,
                          scheduled_s=arrivals, prompts=prompts,
                          output_tokens=np.asarray(outputs), max_concurrency=max_concurrency,
                          prompt_tokens=np.asarray([len(p) if isinstance(p, list)
                                                    else int(trace.prompt_tokens[i])
                                                    for p, i in zip(prompts, index, strict=True)]))

    def warmup(self, trace: object, seed: int) -> None:
        """Traffic like the trace's before measuring, so kernel specialisation and caches do not
        land in a measured rung (other prompt ids: the prefix cache starts cold)."""
        assert isinstance(trace, Trace)
        plan = self._plan(trace, WARMUP_RATE_SCALE, self._prompt_seed(seed),
                          slice(0, WARMUP_REQUESTS))
        with on_cores(self._client_cores):
            run_replay(plan)

    def replay(self, trace: object, rate_scale: float, seed: int) -> ReplayResult:
        assert isinstance(trace, Trace) and self._engine is not None
        return self._measure(self._plan(trace, rate_scale, self._prompt_seed(seed)),
                             f"at x{rate_scale:.3g}")

    def replay_closed_loop(self, trace: object, max_concurrency: int, seed: int) -> ReplayResult:
        assert isinstance(trace, Trace) and self._engine is not None
        plan = self._plan(trace, 1.0, self._prompt_seed(seed), max_concurrency=max_concurrency)
        return self._measure(plan, f"at concurrency {max_concurrency}")

    def _measure(self, plan: ReplayPlan, load: str) -> ReplayResult:
        """Run the plan with the engine's counters read around it."""
        assert self._engine is not None
        before = scrape(self._engine.base_url)
        with on_cores(self._client_cores), KvUsageSampler(self._engine.base_url) as kv:
            result, errors = run_replay(plan)
        after = scrape(self._engine.base_url)
        if errors:
            log.info("replay %s: %d failed requests, e.g. %s", load,
                     int(result.failed.sum()), errors[0])
        if not self._engine.alive():
            raise ReplayError(f"the engine died during the replay {load} "
                              f"(log: {self._engine.log_path})")
        if self._monitor is not None and self._monitor.level == "abort":
            m = self._monitor
            raise ReplayError(f"GPU memory above the abort watermark: {m.peak_pressure:.0%} of the "
                              f"memory the engine did not reserve ({m.reserved_fraction:.0%}) in "
                              f"use, {m.peak_used_fraction:.0%} in all", FailureClass.MEMORY_PRESSURE)
        stats: dict[str, Any] = engine_stats(before, after, kv.peak)
        return ReplayResult(**{**result.__dict__, "engine_stats": stats})

    def telemetry(self) -> dict[str, object]:
        return self._monitor.summary() if self._monitor is not None else {}

    def stop(self) -> None:
        if self._monitor is not None:
            self._monitor.stop()
        if self._engine is not None:
            self._engine.stop()
            self._engine = None


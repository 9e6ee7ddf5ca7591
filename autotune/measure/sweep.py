"""A closed-loop concurrency sweep: one engine, started once, measured at several
`--max-concurrency` values in turn, as `vllm bench sweep serve` runs `vllm bench serve` once per
parameter combination against one server (`vllm/benchmarks/sweep/serve.py::run_benchmark`).

Each row holds vllm bench serve's figures (autotune.measure.bench_metrics) and, from a real engine, its
decode and prefill step times read off the token streams (autotune.domain.step_timings), which
`autotune sim fit-cpu` fits the simulator's CPU step cost to. The record is one JSON object
with stable keys (docs/reference/json-output.md, "bench sweep").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import ReplayResult
from autotune.domain.step_timings import steps_to_json
from autotune.errors import SettingError
from autotune.measure.backends import EngineBackend
from autotune.measure.bench_metrics import send_clump_mean, serve_metrics
from autotune.traffic.load import ClosedLoop
from autotune.traffic.trace import Trace

RECORD_KIND = "autotune.bench_sweep"
RECORD_VERSION = 1


def parse_concurrencies(text: str) -> list[int]:
    """"1,4,16,64" -> [1, 4, 16, 64]: distinct positive integers, run in the order given."""
    values = []
    for part in text.split(","):
        try:
            value = int(part.strip())
        except ValueError:
            raise SettingError("{max_concurrency} {text!r}: expected comma-separated client "
                               "counts, e.g. 1,4,16,64", text=text) from None
        if value < 1:
            raise SettingError("{max_concurrency} {text!r}: {value} clients; each value needs "
                               "at least 1", text=text, value=value)
        if value in values:
            raise SettingError("{max_concurrency} {text!r}: {value} is given twice", text=text,
                               value=value)
        values.append(value)
    return values


@dataclass(frozen=True)
class SweepLoad:
    """What each concurrency sends: `num_prompts` requests, or `prompts_per_client` times the
    concurrency (so every client sends as many requests at any concurrency), of fixed lengths or
    the trace's."""

    concurrencies: tuple[int, ...]
    num_prompts: int | None = None
    prompts_per_client: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    client_starts: str = "together"  # or "spread": simulated engines only (sim backend option)

    def __post_init__(self) -> None:
        if self.num_prompts is not None and self.prompts_per_client is not None:
            raise SettingError("give {num_prompts} or {prompts_per_client}, not both")
        if self.prompts_per_client is not None and self.prompts_per_client < 1:
            raise SettingError("{prompts_per_client} {value}: must be at least 1",
                               value=self.prompts_per_client)

    def loop(self, concurrency: int) -> ClosedLoop:
        n = (self.prompts_per_client * concurrency if self.prompts_per_client is not None
             else self.num_prompts)
        return ClosedLoop(concurrency, n, self.input_len, self.output_len)

    def requests(self, trace: Trace | None, max_model_len: int) -> list[Trace]:
        """Each concurrency's requests, all checked before any engine starts."""
        return [self.loop(c).requests(trace, max_model_len) for c in self.concurrencies]

    def describe(self) -> dict[str, Any]:
        return {"input_len": self.input_len, "output_len": self.output_len,
                "num_prompts": self.num_prompts, "prompts_per_client": self.prompts_per_client,
                "client_starts": self.client_starts}


def per_request(result: ReplayResult) -> dict[str, list[Any]]:
    """Each request of a run in send order: its send time (s after the run's first send), TTFT
    and E2E (ms; null where not reached), output tokens received and whether it failed. Enough
    to read the clients' clumping and TTFT round by round after the sweep."""
    order = np.argsort(result.scheduled_s, kind="stable")
    sent = result.scheduled_s[order]
    return {"sent_s": np.round(sent - sent[0], 6).tolist() if len(sent) else [],
            "ttft_ms": np.round(result.ttft_s[order] * 1e3, 3).tolist(),
            "e2el_ms": np.round(result.e2e_s[order] * 1e3, 3).tolist(),
            "output_tokens": result.output_tokens[order].astype(int).tolist(),
            "failed": result.failed[order].astype(bool).tolist()}


def run_sweep(backend: EngineBackend, config: EngineConfig, deployment: DeploymentSpec,
              load: SweepLoad, requests: list[Trace], seed: int,
              on_row: Callable[[dict[str, Any]], None] | None = None,
              with_requests: bool = False) -> list[dict[str, Any]]:
    """Start the engine once, warm it up on the first concurrency's requests (a real engine's
    first replay otherwise pays for its kernels' first use, `autotune.workers.vllm.backend.warmup`; `vllm
    bench sweep serve --warmup-num-prompts` likewise runs a warm-up it leaves out of its
    summary), then run each
    concurrency's closed loop; stop the engine whatever happens."""
    rows = []
    backend.start(config, deployment, label="bench-sweep")
    try:
        backend.warmup(requests[0], seed)
        for concurrency, trace in zip(load.concurrencies, requests, strict=True):
            result = backend.replay_closed_loop(trace, concurrency, seed)
            row: dict[str, Any] = {"max_concurrency": concurrency, "num_prompts": len(trace),
                                   **serve_metrics(result, trace.prompt_tokens),
                                   "send_clump_mean": send_clump_mean(result.scheduled_s,
                                                                      concurrency)}
            if result.step_times:
                row["step_times"] = steps_to_json(result.step_times)
            if with_requests:
                row["requests"] = per_request(result)
            rows.append(row)
            if on_row is not None:
                on_row(row)
    finally:
        backend.stop()
    return rows


def sweep_record(*, backend: str, deployment: DeploymentSpec, config: EngineConfig,
                 extra_engine_args: list[str], load: SweepLoad, trace_name: str | None,
                 seed: int, step_model: str | None, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The sweep as one JSON-ready object: what ran (enough for `autotune sim fit-cpu` to
    rebuild the engine's shape) and a row per concurrency."""
    return {
        "kind": RECORD_KIND, "version": RECORD_VERSION, "backend": backend,
        "model": deployment.model, "gpu": deployment.gpu_info.name,
        "gpu_count": deployment.gpu_count,
        "tensor_parallel_size": deployment.tensor_parallel_size,
        "max_model_len": deployment.max_model_len,
        "engine_args": config.explicit(), "extra_engine_args": list(extra_engine_args),
        "step_model": step_model, "load": {**load.describe(), "trace": trace_name},
        "seed": seed, "runs": rows,
    }

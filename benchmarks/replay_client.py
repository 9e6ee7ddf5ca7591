"""The replay client alone: how late it sends, with its pauses held off and without.

Two things in the client's own process can stop its event loop and make a replay client-bound:
a full cyclic garbage collection and the KV-cache sampler's parse of the whole /metrics text
(docs/benchmarks/replay-client.md). This replays a bursty slice of the Azure code trace against
a stand-in server that streams each request's tokens 5 ms apart and costs the client nothing
else, so only the client is measured. Two arms alternate, each in processes of its own running
its replays one after another, as a trial's ladder does:
- `shipped`: the replayer as it is (no collection while a replay sends; the sampler reads one
  gauge's lines);
- `before`: the collector left on and a thread parsing a vLLM-sized /metrics text (600 lines
  of counters and histograms, prometheus_client's parser) once a second.

Usage: PYTHONPATH=. .venv/bin/python benchmarks/replay_client.py [--rounds 3] [--replays 6]
       [--rate-scale 3]
The last line is one JSON object: per arm the send-lag P99 of each replay (ms), its median and
worst, and how many replays were client-bound (P99 over 5 ms).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import autotune.workers.replay as replay
from autotune.traffic.formats import load_trace
from autotune.traffic.prompts import prompt_token_ids
from autotune.traffic.shape import ShapeSpec, shape
from autotune.workers.vllm.metrics import KV_USAGE, kv_usage_in

ROOT = Path(__file__).resolve().parents[1]
AZURE_CODE = ROOT / "traces" / "azure_llm_2023_code.csv"
BOUND_MS = 5.0

STAND_IN = r"""
import asyncio, json, sys
from aiohttp import web

async def completions(request):
    n = int((await request.json())["max_tokens"])
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    chunk = json.dumps({"object": "text_completion", "choices": [{"index": 0, "text": "a"}]})
    for _ in range(n):
        await asyncio.sleep(0.005)
        await resp.write(b"data: " + chunk.encode() + b"\n\n")
    usage = json.dumps({"choices": [], "usage": {"completion_tokens": n}})
    await resp.write(b"data: " + usage.encode() + b"\n\ndata: [DONE]\n\n")
    return resp

app = web.Application(client_max_size=1 << 26)
app.router.add_post("/v1/completions", completions)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


def vllm_sized_metrics() -> str:
    """A /metrics text the size and shape of vLLM's (about 600 lines): histograms by engine."""
    registry = CollectorRegistry()
    buckets = [0.001 * 2 ** k for k in range(24)]
    for name in ("ttft", "itl", "e2e", "queue", "prefill", "decode", "inference", "prompt",
                 "generation", "iteration", "tpot", "max_tokens", "params_n", "best_of",
                 "request_prompt", "request_generation", "request_success", "kv_block_lifetime"):
        Histogram(f"vllm:{name}_seconds", name, ["engine", "model_name"], buckets=buckets,
                  registry=registry).labels("0", "autotune").observe(0.1)
    for name in ("prompt_tokens", "generation_tokens", "num_preemptions",
                 "prefix_cache_queries", "prefix_cache_hits"):
        Counter(f"vllm:{name}", name, ["engine", "model_name"],
                registry=registry).labels("0", "autotune").inc()
    Gauge(KV_USAGE, "KV-cache usage", ["engine", "model_name"],
          registry=registry).labels("0", "autotune").set(0.5)
    return generate_latest(registry).decode()


@contextlib.contextmanager
def sampling(read: Callable[[], object]) -> Iterator[None]:
    """`read` once a second in a thread beside the replays, as the KV-cache sampler runs."""
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            read()
            stop.wait(1.0)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def before_arm(text: str) -> Iterator[None]:
    """The client as it was: collector on during the replay, whole-text parse once a second."""
    shipped = replay._no_gc_pauses
    replay._no_gc_pauses = contextlib.nullcontext  # type: ignore[assignment]
    try:
        with sampling(lambda: list(text_string_to_metric_families(text))):
            yield
    finally:
        replay._no_gc_pauses = shipped  # type: ignore[assignment]


def shipped_arm(text: str) -> contextlib.AbstractContextManager[None]:
    """The client as shipped, with the sampler's one-gauge read beside it."""
    return sampling(lambda: kv_usage_in(text))


def run_arm(arm: str, url: str, replays: int, rate_scale: float) -> list[float]:
    """Replays in this process, one after another as a trial's ladder runs them; send-lag P99s.
    The process first imports what the tuner does, since a collection walks the whole heap."""
    import autotune.cli.main  # noqa: F401  (the tuner's heap: Optuna, SQLAlchemy, pandas)

    # Minutes 3-5 of the trace, 8x faster, shaped as scripts/gpu_check.sh shapes it for a GPU.
    trace = shape(load_trace(AZURE_CODE), ShapeSpec(start_s=180, end_s=300,
                                                     rate_scale=8 * rate_scale, max_model_len=2048))
    prompts: list[list[int] | str] = [prompt_token_ids(trace, i, vocab_size=2048)
                                      for i in range(len(trace))]
    sched = np.asarray(trace.arrival_s, dtype=float)
    plan = replay.ReplayPlan(base_url=url, model="m", scheduled_s=sched - sched[0],
                             prompts=prompts, output_tokens=np.asarray(trace.output_tokens),
                             processes=1)
    text = vllm_sized_metrics()
    replay.run_replay(plan)  # warm-up: connections, first-use costs
    p99s = []
    with (shipped_arm if arm == "shipped" else before_arm)(text):
        for _ in range(replays):
            result, errors = replay.run_replay(plan)
            if errors:
                raise SystemExit(f"the stand-in server failed requests: {errors[:3]}")
            assert result.send_lag_s is not None  # a real replay always records it
            p99s.append(float(np.percentile(result.send_lag_s, 99) * 1000))
    return p99s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="processes per arm, alternating")
    parser.add_argument("--replays", type=int, default=6, help="replays per process")
    parser.add_argument("--rate-scale", type=float, default=3.0)
    parser.add_argument("--port", type=int, default=18791)
    parser.add_argument("--arm", help=argparse.SUPPRESS)  # a child: one arm's replays
    args = parser.parse_args()
    url = f"http://127.0.0.1:{args.port}"
    if args.arm:
        print(json.dumps(run_arm(args.arm, url, args.replays, args.rate_scale)))
        return
    server = subprocess.Popen([sys.executable, "-c", STAND_IN, str(args.port)])
    lags: dict[str, list[float]] = {"shipped": [], "before": []}
    try:
        time.sleep(2.0)
        for _ in range(args.rounds):
            for arm in lags:
                child = subprocess.run([sys.executable, __file__, "--arm", arm, "--port",
                                        str(args.port), "--replays", str(args.replays),
                                        "--rate-scale", str(args.rate_scale)],
                                       capture_output=True, text=True, timeout=900)
                if child.returncode != 0:
                    raise SystemExit(f"{arm} arm failed:\n{child.stderr[-2000:]}")
                lags[arm] += json.loads(child.stdout.splitlines()[-1])
    finally:
        server.terminate()
        server.wait()
    print(f"the Azure code trace, minutes 3-5 at {8 * args.rate_scale:g}x; {args.rounds} "
          f"processes per arm, {args.replays} replays each")
    summary: dict[str, dict[str, object]] = {}
    for arm, values in lags.items():
        summary[arm] = {"send_lag_p99_ms": [round(v, 2) for v in values],
                        "median_ms": round(float(np.median(values)), 2),
                        "worst_ms": round(max(values), 2),
                        "client_bound": sum(v > BOUND_MS for v in values)}
        print(f"{arm:8s} send-lag P99 per replay (ms): "
              f"{', '.join(f'{v:.1f}' for v in values)}; client-bound {summary[arm]['client_bound']}"
              f" of {len(values)}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

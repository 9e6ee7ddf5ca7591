"""Closed loops of equal requests on a real vLLM engine against the simulator's two start states.

Clients each sending its next equal request as soon as its last one finished (`vllm bench serve
--max-concurrency`, the load of the GPU judge rows) stay, in a deterministic model, as they
started: all together (phase-locked) or spread over one request's time. This measures where a
real engine sits: `--passes` runs of the whole sweep on fresh vLLM CPU-build engines serving the
tiny model, beside the simulator (the bundled `cpu` profile, nothing fitted) with its clients
together and spread (`autotune.workers.sim.closed_loop.spread_starts`). What it prints and the
results: docs/benchmarks/gpu-fidelity.md ("Closed loops on a real engine").

Needs the vLLM CPU build: AUTOTUNE_ENGINE__PYTHON=.venv-engine/bin/python (`make engine-venv`).
Usage: PYTHONPATH=. .venv/bin/python benchmarks/closed_loop_sync.py [--concurrency 1,4,8,16,32]
           [--input-len 256] [--output-len 64] [--rounds 24] [--warmup-rounds 2] [--passes 2]
The last line is JSON: {"concurrency": [...], "real_ttft_ms": [[one per pass], ...],
"together_ttft_ms": [...], "spread_ttft_ms": [...], and the same for tpot_ms and clump}.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.errors import SettingError
from autotune.measure.backends import EngineBackend
from autotune.measure.bench_metrics import send_clump_mean
from autotune.measure.sweep import SweepLoad, parse_concurrencies, run_sweep
from autotune.measure.tiny_model import make_tiny_model
from autotune.settings import engine_python_env
from autotune.traffic.trace import Trace
from autotune.workers.sim.backend import SimulatorBackend
from autotune.workers.vllm.backend import VllmBackend

MAX_MODEL_LEN = 2048


def closed_loop_figures(requests: dict[str, list[Any]], concurrency: int, warmup_rounds: int
                        ) -> dict[str, float]:
    """Mean TTFT and TPOT (ms) of a run's requests after the warm-up, in send order (a sweep
    row's `requests`), and the mean clump size of their sends."""
    skip = warmup_rounds * concurrency
    ttft = np.array(requests["ttft_ms"][skip:], dtype=float)
    e2e = np.array(requests["e2el_ms"][skip:], dtype=float)
    out = np.array(requests["output_tokens"][skip:], dtype=float)
    return {"ttft_ms": float(np.mean(ttft)),
            "tpot_ms": float(np.mean((e2e - ttft) / np.maximum(out - 1, 1))),
            "clump": send_clump_mean(np.array(requests["sent_s"]), skip)}


def sweep(backend: EngineBackend, deployment: DeploymentSpec, load: SweepLoad,
          requests: list[Trace], warmup_rounds: int) -> list[dict[str, float]]:
    """The whole sweep on one engine, as `autotune bench sweep` runs it, each run's requests
    kept."""
    config = EngineConfig.from_mapping({"max_model_len": MAX_MODEL_LEN})
    rows = run_sweep(backend, config, deployment, load, requests, 0, with_requests=True)
    return [closed_loop_figures(row["requests"], row["max_concurrency"], warmup_rounds)
            for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,4,8,16,32")
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=24, help="requests per client")
    parser.add_argument("--warmup-rounds", type=int, default=2)
    parser.add_argument("--passes", type=int, default=2, help="real passes, each a fresh engine")
    args = parser.parse_args()
    engine_python = engine_python_env()
    if not engine_python or not Path(engine_python).exists():
        sys.exit("closed_loop_sync: set AUTOTUNE_ENGINE__PYTHON to the vLLM CPU venv's python "
                 "(make engine-venv)")
    try:
        concurrencies = parse_concurrencies(args.concurrency)
    except SettingError as exc:
        sys.exit(f"closed_loop_sync: --concurrency: {exc}")
    if args.rounds <= args.warmup_rounds or args.passes < 1:
        sys.exit("closed_loop_sync: --rounds must exceed --warmup-rounds and --passes must be "
                 "at least 1")
    load = SweepLoad(tuple(concurrencies), prompts_per_client=args.rounds,
                     input_len=args.input_len, output_len=args.output_len)
    requests = load.requests(None, MAX_MODEL_LEN)
    deployment = DeploymentSpec.build(name="closed-loop-sync", model="tiny-llama", gpu="cpu",
                                      gpu_count=1, tensor_parallel_size=1,
                                      max_model_len=MAX_MODEL_LEN)
    sim = {starts: sweep(SimulatorBackend(client_starts=starts), deployment, load, requests,
                         args.warmup_rounds) for starts in ("together", "spread")}
    real = []
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_model(Path(tmp) / "model")
        for p in range(args.passes):
            engine = VllmBackend(model_path=str(model),
                                 command=[engine_python, "-m", "vllm.entrypoints.openai.api_server"],
                                 extra_args=["--load-format", "dummy", "--enforce-eager"],
                                 log_dir=str(Path(tmp) / f"logs-{p}"))
            real.append(sweep(engine, deployment, load, requests, args.warmup_rounds))

    table = Table(title=f"closed loop, {args.input_len} in / {args.output_len} out, "
                        f"{args.rounds} requests per client ({args.warmup_rounds} warm-up)")
    for col in ("clients", "real TTFT ms (passes)", "sim together", "sim spread",
                "together / real", "spread / real", "real TPOT ms", "together / real",
                "spread / real", "real clump (passes)", "together clump", "spread clump"):
        table.add_column(col, justify="right")
    out: dict[str, object] = {"concurrency": concurrencies}
    for key in ("ttft_ms", "tpot_ms", "clump"):
        out[f"real_{key}"] = [[round(r[i][key], 2) for r in real] for i in range(len(concurrencies))]
        for starts in ("together", "spread"):
            out[f"{starts}_{key}"] = [round(row[key], 2) for row in sim[starts]]
    for i, c in enumerate(concurrencies):
        def passes(key: str, fmt: str, i: int = i) -> str:
            return " / ".join(fmt.format(r[i][key]) for r in real)

        mean = {k: float(np.mean([r[i][k] for r in real])) for k in ("ttft_ms", "tpot_ms")}
        t, s = sim["together"][i], sim["spread"][i]
        table.add_row(str(c), passes("ttft_ms", "{:.1f}"), f"{t['ttft_ms']:.1f}",
                      f"{s['ttft_ms']:.1f}", f"{t['ttft_ms'] / mean['ttft_ms']:.2f}",
                      f"{s['ttft_ms'] / mean['ttft_ms']:.2f}", passes("tpot_ms", "{:.2f}"),
                      f"{t['tpot_ms'] / mean['tpot_ms']:.2f}",
                      f"{s['tpot_ms'] / mean['tpot_ms']:.2f}", passes("clump", "{:.1f}"),
                      f"{t['clump']:.1f}", f"{s['clump']:.1f}")
    Console(width=220).print(table)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""Our replayer beside `vllm bench serve` on the same schedule against the same real server.

Starts one vLLM engine (the CPU build with a tiny local model, or whatever
AUTOTUNE_ENGINE__PYTHON's vLLM is), then replays one schedule (a slice of the Azure code trace
at a scaled rate) with each client in turn, alternating, each in its own process so that its
CPU time can be measured. Reports send-lag P99 (how late requests left the client), client CPU
seconds per request, and the TTFT and throughput each client measured.

Usage: AUTOTUNE_ENGINE__PYTHON=.venv-engine/bin/python .venv/bin/python benchmarks/replay_overhead.py
       [--requests 200] [--rate-scale 8] [--rounds 2]
The last line is one JSON object: send_lag_p99_ms and cpu_s_per_request, each with keys
autotune and vllm_bench, plus ttft_p50_ms, ttft_p99_ms and output_tok_s the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.measure.tiny_model import make_tiny_model
from autotune.settings import engine_python_env
from autotune.traffic.formats import load_trace
from autotune.workers.vllm.backend import VllmBackend

ROOT = Path(__file__).resolve().parents[1]
AZURE_CODE = ROOT / "traces" / "azure_llm_2023_code.csv"
MAX_MODEL_LEN = 2048
CHUNK = 16  # vllm bench's --timed-trace-chunk-hash-size default

OURS = r"""
import json, sys
import numpy as np
from autotune.traffic.formats import load_trace
from autotune.traffic.prompts import prompt_token_ids
from autotune.workers.replay import ReplayPlan, run_replay
args = json.loads(sys.argv[1])
trace = load_trace(args["trace"])
prompts = [prompt_token_ids(trace, i, vocab_size=args["vocab"], max_prompt_tokens=args["max_prompt"],
                           seed=args["seed"]) for i in range(len(trace))]
plan = ReplayPlan(base_url=args["url"], model="autotune",
                  scheduled_s=np.asarray(trace.arrival_s) / args["scale"], prompts=prompts,
                  output_tokens=np.asarray(trace.output_tokens))
result, errors = run_replay(plan)
ok = ~result.failed
print("RESULT " + json.dumps({
    "send_lag_s": [float(x) for x in result.send_lag_s],
    "ttft_s": [float(x) for x in result.ttft_s[ok]], "tokens": int(result.output_tokens[ok].sum()),
    "wall_s": result.wall_s, "failed": int(result.failed.sum())}))
"""

VLLM_BENCH = r"""
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def _run_child(cmd: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"client failed: {' '.join(cmd[:3])}...\n{proc.stderr[-3000:]}")
    return proc, cpu


def _schedule_lag(start_times: list[float], timed: Path) -> list[float]:
    """vllm bench's own queue_times start at the moment its generator hands a request over, so
    they miss how late its sleep woke up. Against the intended schedule instead: each send's
    offset from the first send, minus the scheduled offset (the earliest taken as on time)."""
    sched = [json.loads(line)["timestamp"] for line in timed.read_text().splitlines()]
    order = np.argsort(sched, kind="stable")
    sent = np.asarray(start_times, dtype=float)
    rel = (sent - sent.min()) - (np.asarray(sched)[order] - min(sched))
    return (rel - rel.min()).tolist()


def _pct_ms(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q) * 1000) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rate-scale", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    engine_python = engine_python_env()
    if not engine_python:
        raise SystemExit("set AUTOTUNE_ENGINE__PYTHON to the python of a vLLM venv (make engine-venv)")
    work = Path(tempfile.mkdtemp(prefix="replay-overhead-"))
    model = make_tiny_model(work / "tiny")
    trace = load_trace(AZURE_CODE).slice(3000, args.requests)
    rows = trace.to_rows()
    for r in rows:  # what fits the tiny model's context
        r["output_tokens"] = min(int(r["output_tokens"]), 256)  # type: ignore[call-overload]
        r["prompt_tokens"] = min(int(r["prompt_tokens"]), MAX_MODEL_LEN - int(r["output_tokens"]) - 1)  # type: ignore[call-overload]
    ours_trace = work / "trace.jsonl"
    ours_trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    def timed_trace(rnd: int) -> Path:
        """vllm bench serve's timed_trace format, same schedule. It builds a prompt from its
        hash ids, CHUNK tokens each: one unique id per chunk gives the same lengths and, like
        ours, no shared prefixes; fresh ids every round keep the prefix cache out of it (a
        repeated round hits the cache, and the faster engine then starves a client that shares
        its cores)."""
        path = work / f"timed_trace-{rnd}.jsonl"
        path.write_text("".join(json.dumps({
            "timestamp": float(r["arrival_s"]) / args.rate_scale,  # type: ignore[arg-type]
            "input_length": r["prompt_tokens"], "output_length": r["output_tokens"],
            "hash_ids": [(rnd * 1000 + i) * 10_000 + k
                         for k in range(-(-int(r["prompt_tokens"]) // CHUNK))],  # type: ignore[call-overload]
        }) + "\n" for i, r in enumerate(rows)))
        return path

    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    dep = DeploymentSpec(name="bench", model="tiny-llama", gpu="cpu", gpu_count=1,
                         tensor_parallel_size=1, max_model_len=MAX_MODEL_LEN)
    backend = VllmBackend(model_path=str(model), log_dir=str(work),
                          command=[engine_python, "-m", "vllm.entrypoints.openai.api_server"],
                          extra_args=["--load-format", "dummy", "--enforce-eager"])
    backend.start(EngineConfig(max_model_len=MAX_MODEL_LEN, block_size=32), dep, label="engine")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    figures: dict[str, dict[str, list[float]]] = {
        c: {"lag": [], "ttft": [], "cpu": [], "tok_s": []} for c in ("autotune", "vllm_bench")}
    try:
        url = backend._engine.base_url  # type: ignore[union-attr]
        backend.warmup(trace, 0)
        for rnd in range(args.rounds):
            proc, cpu = _run_child([sys.executable, "-c", OURS, json.dumps({
                "trace": str(ours_trace), "url": url, "scale": args.rate_scale, "vocab": vocab,
                "max_prompt": MAX_MODEL_LEN, "seed": 100 + rnd})], env)
            res = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[7:])
            f = figures["autotune"]
            f["lag"] += res["send_lag_s"]
            f["ttft"] += res["ttft_s"]
            f["cpu"].append(cpu / len(rows))
            f["tok_s"].append(res["tokens"] / res["wall_s"])
            out = work / f"vllm-{rnd}.json"
            timed = timed_trace(rnd)
            _, cpu = _run_child([engine_python, "-c", VLLM_BENCH, "--backend", "vllm",
                                 "--base-url", url, "--model", "autotune", "--tokenizer", str(model),
                                 "--dataset-name", "timed_trace", "--dataset-path", str(timed),
                                 "--num-prompts", str(len(rows)), "--disable-tqdm",
                                 "--save-result", "--save-detailed", "--result-dir", str(work),
                                 "--result-filename", out.name], env)
            bench = json.loads(out.read_text())
            assert bench["total_input_tokens"] == sum(int(r["prompt_tokens"]) for r in rows)  # type: ignore[call-overload]
            ok = [i for i, e in enumerate(bench["errors"]) if not e]
            f = figures["vllm_bench"]
            f["lag"] += _schedule_lag(bench["start_times"], timed)
            f["ttft"] += [bench["ttfts"][i] for i in ok]
            f["cpu"].append(cpu / len(rows))
            f["tok_s"].append(bench["output_throughput"])
    finally:
        backend.stop()
    table = Table(title=f"Replay clients on one vLLM CPU engine: {len(rows)} requests of the "
                        f"Azure code trace at x{args.rate_scale:g}, {args.rounds} rounds each")
    for col in ("client", "send lag p99 ms", "CPU s / request", "TTFT p50 ms", "TTFT p99 ms",
                "output tok/s"):
        table.add_column(col, justify="right")
    summary: dict[str, dict[str, float]] = {k: {} for k in ("send_lag_p99_ms", "cpu_s_per_request",
                                                            "ttft_p50_ms", "ttft_p99_ms",
                                                            "output_tok_s")}
    for client, f in figures.items():
        values = {"send_lag_p99_ms": _pct_ms(f["lag"], 99),
                  "cpu_s_per_request": float(np.mean(f["cpu"])),
                  "ttft_p50_ms": _pct_ms(f["ttft"], 50), "ttft_p99_ms": _pct_ms(f["ttft"], 99),
                  "output_tok_s": float(np.mean(f["tok_s"]))}
        for key, value in values.items():
            summary[key][client] = round(value, 5)
        table.add_row(client, f"{values['send_lag_p99_ms']:.2f}",
                      f"{values['cpu_s_per_request']:.4f}", f"{values['ttft_p50_ms']:.1f}",
                      f"{values['ttft_p99_ms']:.1f}", f"{values['output_tok_s']:.1f}")
    Console().print(table)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

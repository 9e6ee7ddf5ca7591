"""Does the judge rows' client keep equal requests in clumps? aiperf against a lockstep server.

The GPU rows (benchmarks/gpu_fidelity.py) were measured with aiperf in closed loop, every
request the same length; whether requests that finish in one engine step reach the engine in
one step again decides how far the measured TTFT lies from the simulator's phase-locked and
desynchronised bounds. This runs aiperf as the rows' harness does against a stand-in server
whose every token leaves on a global step boundary, so that only the client's own turnaround can
split a clump, once per step time. The method and results: docs/benchmarks/gpu-fidelity.md.

aiperf is not a dependency of autotune: install it anywhere (`python3 -m venv /tmp/aip &&
/tmp/aip/bin/pip install aiperf`) and pass its executable (--aiperf). The stand-in server needs
aiohttp (in autotune's dev environment).
Usage: PYTHONPATH=. .venv/bin/python benchmarks/client_clumping.py --aiperf /tmp/aip/bin/aiperf
           [--steps-ms 5,20] [--concurrency 8] [--rounds 20] [--osl 32]
Prints per step time the clump sizes after the warm-up and the client's turnaround
percentiles, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from autotune.measure.tiny_model import make_tiny_model

# The stand-in: each request's first token leaves on the next step boundary after it arrives,
# and each further token on the boundary after, so requests of one length that arrive in one
# step end together, as on a deterministic engine. It logs each request's arrival and end.
LOCKSTEP_SERVER = r"""
import asyncio, json, math, sys, time
from aiohttp import web

port, step_s, log_path = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
log = open(log_path, "a", buffering=1)

async def boundary():
    now = time.monotonic()
    await asyncio.sleep(math.ceil(now / step_s + 1e-9) * step_s - now)

async def completions(request):
    arrived = time.monotonic()
    n = int((await request.json()).get("max_tokens") or 16)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i in range(n):
        await boundary()
        chunk = {"object": "text_completion", "model": "m",
                 "choices": [{"index": 0, "text": "a ",
                              "finish_reason": "length" if i == n - 1 else None}]}
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    ended = time.monotonic()
    await resp.write(b"data: [DONE]\n\n")
    log.write(f"{arrived:.6f} {ended:.6f}\n")
    return resp

async def models(request):
    return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

app = web.Application()
app.add_routes([web.post("/v1/completions", completions), web.get("/v1/models", models)])
web.run_app(app, host="127.0.0.1", port=port, print=None)
"""


def clumps(arrived_s: np.ndarray, ended_s: np.ndarray, step_s: float, skip: int
           ) -> tuple[dict[int, int], list[float]]:
    """Arrivals per step slot (a clump: the requests one engine step would take together) after
    the first `skip` arrivals, and each arrival's delay after the latest end before it (ms):
    the client's turnaround where the predecessor is the request that just ended."""
    order = np.sort(arrived_s)[skip:]
    _, sizes = np.unique(np.floor(order / step_s).astype(np.int64), return_counts=True)
    ends = np.sort(ended_s)
    delays = [(t - ends[i - 1]) * 1e3 for t in order
              if (i := int(np.searchsorted(ends, t, side="right"))) > 0]
    return dict(sorted(Counter(sizes.tolist()).items())), delays


def run_aiperf(aiperf: str, port: int, tokenizer: Path, concurrency: int, rounds: int,
               osl: int, out: Path) -> None:
    cmd = [aiperf, "profile", "-m", "m", "--endpoint-type", "completions",
           "-u", f"http://127.0.0.1:{port}", "--tokenizer", str(tokenizer),
           "--isl", "64", "--isl-stddev", "0", "--osl", str(osl), "--osl-stddev", "0",
           "--extra-inputs", "ignore_eos:true", "--concurrency", str(concurrency),
           "--num-requests", str(rounds * concurrency),
           "--warmup-request-count", str(2 * concurrency), "--random-seed", "100",
           "--ui", "none", "--streaming", "--artifact-dir", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"client_clumping: aiperf failed (exit {done.returncode}):\n"
                         f"{(done.stdout + done.stderr)[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiperf", default="aiperf", help="the aiperf executable")
    parser.add_argument("--steps-ms", default="5,20", help="the stand-in's step times (ms)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=20, help="measured requests per client")
    parser.add_argument("--osl", type=int, default=32, help="output tokens per request")
    parser.add_argument("--port", type=int, default=18793)
    args = parser.parse_args()
    aiperf = shutil.which(args.aiperf)
    if aiperf is None:
        print(f"client_clumping: no aiperf at {args.aiperf!r}; install it (pip install aiperf) "
              "in any environment and pass --aiperf PATH", file=sys.stderr)
        sys.exit(2)
    try:
        steps_ms = [float(v) for v in args.steps_ms.split(",")]
        if not steps_ms or min(steps_ms) <= 0 or args.concurrency < 2 or args.rounds < 1:
            raise ValueError
    except ValueError:
        print("client_clumping: --steps-ms takes positive numbers (e.g. 5,20), --concurrency at "
              "least 2 and --rounds at least 1", file=sys.stderr)
        sys.exit(2)

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = make_tiny_model(Path(tmp) / "tokenizer")
        for step_ms in steps_ms:
            log = Path(tmp) / f"arrivals-{step_ms:g}.log"
            server = subprocess.Popen([sys.executable, "-c", LOCKSTEP_SERVER, str(args.port),
                                       str(step_ms / 1e3), str(log)])
            try:
                time.sleep(2.0)
                run_aiperf(aiperf, args.port, tokenizer, args.concurrency, args.rounds,
                           args.osl, Path(tmp) / f"aiperf-{step_ms:g}")
            finally:
                server.terminate()
                server.wait()
            times = np.loadtxt(log, ndmin=2)
            sizes, delays = clumps(times[:, 0], times[:, 1], step_ms / 1e3,
                                   skip=2 * args.concurrency)
            slots = sum(sizes.values())
            results[f"{step_ms:g}"] = {
                "clump_sizes": sizes,
                "clump_mean": round(sum(k * v for k, v in sizes.items()) / slots, 2),
                "turnaround_ms_p10_p50_p90": [round(float(v), 2)
                                              for v in np.percentile(delays, [10, 50, 90])]}
    print(f"aiperf at concurrency {args.concurrency}, {args.rounds} measured rounds, "
          f"{args.osl} output tokens, against a lockstep stand-in")
    for step, r in results.items():
        print(f"step {step:>4s} ms: clumps {r['clump_sizes']} (mean {r['clump_mean']} of "
              f"{args.concurrency}); turnaround p10/p50/p90 {r['turnaround_ms_p10_p50_p90']} ms")
    print(json.dumps({"concurrency": args.concurrency, "rounds": args.rounds,
                      "by_step_ms": results}))


if __name__ == "__main__":
    main()

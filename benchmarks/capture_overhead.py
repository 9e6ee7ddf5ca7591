"""The capture proxy's added latency per request, against a direct connection, in the same run.

A fast fake OpenAI server (tests/capture/fake_upstream.py: answers at once, 4 output tokens,
usage included; /tokenize too) runs in a process of its own, and `autotune capture` in another
in front of it. One open-loop client sends at a fixed rate, alternating direct and proxied
requests (and, within each, non-streamed and streamed completions), so both see the same
moment's machine; latency is to the last byte. The prompts are long enough (with
--hash-block-tokens 16) that every proxied request also costs a /tokenize call and hashing,
after its response. The added latency is proxied minus direct at each percentile.

Usage: PYTHONPATH=. .venv/bin/python benchmarks/capture_overhead.py [--rate 300] [--seconds 10]
The last line is one JSON object: added_p50_ms and added_p99_ms (overall), the same per mode
(stream, plain), direct and proxied p50/p99, the achieved rate, send lag P99, the records the
proxy wrote (it must write one per proxied request), the proxy's CPU ms per proxied request
(the figure that does not depend on what else the machine runs) and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
WARMUP_REQUESTS = 200
PROMPT = " ".join(f"word{i}" for i in range(48))  # 3 blocks of 16 "tokens" at the fake

UPSTREAM = r"""
import sys
from aiohttp import web
from tests.capture.fake_upstream import FakeUpstream
web.run_app(FakeUpstream(tokens_out=4).app(), host="127.0.0.1", port=int(sys.argv[1]),
            access_log=None, print=lambda *a: print("ready", flush=True))
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_processes(work: Path) -> tuple[list[subprocess.Popen[str]], str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    port = _free_port()
    upstream = subprocess.Popen([sys.executable, "-c", UPSTREAM, str(port)], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, text=True)
    assert upstream.stdout is not None and upstream.stdout.readline().strip() == "ready"
    proxy = subprocess.Popen([sys.executable, "-m", "autotune.cli.main", "capture", "--upstream",
                              f"http://127.0.0.1:{port}", "--listen", "127.0.0.1:0", "--out",
                              str(work), "--hash-block-tokens", "16"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, text=True)
    assert proxy.stdout is not None
    line = proxy.stdout.readline()
    if not line.startswith("capturing "):
        raise SystemExit(f"the proxy did not start: {line!r}")
    return [upstream, proxy], f"http://127.0.0.1:{port}", line.split()[1]


async def _one(session: aiohttp.ClientSession, url: str, stream: bool) -> float:
    body = {"model": "fake", "prompt": PROMPT, "max_tokens": 4, "stream": stream}
    t0 = time.perf_counter()
    async with session.post(url + "/v1/completions", json=body) as r:
        await r.read()
        if r.status != 200:
            raise RuntimeError(f"{url}: status {r.status}")
    return time.perf_counter() - t0


async def _run(direct: str, proxied: str, rate_rps: float, n: int
               ) -> tuple[dict[tuple[str, str], list[float]], float, list[float]]:
    """Open loop: request i leaves at i / rate, whatever the others are doing."""
    latencies: dict[tuple[str, str], list[float]] = {
        (t, m): [] for t in ("direct", "proxied") for m in ("plain", "stream")}
    lags: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for i in range(WARMUP_REQUESTS):  # connections, caches and the JIT-less warm path
            await _one(session, (direct, proxied)[i % 2], bool(i // 2 % 2))

        async def send(i: int, at: float) -> None:
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            lags.append(time.perf_counter() - at)
            target, mode = ("direct", "proxied")[i % 2], ("plain", "stream")[i // 2 % 2]
            latencies[target, mode].append(
                await _one(session, direct if target == "direct" else proxied, mode == "stream"))

        start = time.perf_counter() + 0.2
        await asyncio.gather(*(send(i, start + i / rate_rps) for i in range(n)))
        wall_s = time.perf_counter() - start
    return latencies, n / wall_s, lags


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ms(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q) * 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=300.0, help="requests/s, both kinds")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="capture-overhead-"))
    procs, direct, proxied = _start_processes(work)
    n = int(args.rate * args.seconds)
    try:
        cpu_before = _cpu_s(procs[1].pid)
        latencies, achieved_rps, lags = asyncio.run(_run(direct, proxied, args.rate, n))
        proxy_cpu_s = _cpu_s(procs[1].pid) - cpu_before
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
    written = sum(len(f.read_text().splitlines()) for f in work.glob("capture-*.jsonl"))
    table = Table(title=f"Capture proxy vs direct, one run: {n} requests at {args.rate:g}/s "
                        f"(achieved {achieved_rps:.0f}/s), alternating, fake upstream")
    for col in ("mode", "direct p50 ms", "proxied p50 ms", "added p50 ms", "direct p99 ms",
                "proxied p99 ms", "added p99 ms"):
        table.add_column(col, justify="right")
    summary: dict[str, float | int] = {}
    for mode in ("plain", "stream", "all"):
        direct_ms = [x for (t, m), v in latencies.items()
                     if t == "direct" and mode in (m, "all") for x in v]
        proxied_ms = [x for (t, m), v in latencies.items()
                      if t == "proxied" and mode in (m, "all") for x in v]
        row = {"direct_p50_ms": _ms(direct_ms, 50), "proxied_p50_ms": _ms(proxied_ms, 50),
               "direct_p99_ms": _ms(direct_ms, 99), "proxied_p99_ms": _ms(proxied_ms, 99)}
        row["added_p50_ms"] = row["proxied_p50_ms"] - row["direct_p50_ms"]
        row["added_p99_ms"] = row["proxied_p99_ms"] - row["direct_p99_ms"]
        suffix = "" if mode == "all" else f"_{mode}"
        for key, value in row.items():
            summary[key + suffix] = round(value, 3)
        table.add_row(mode, *(f"{row[k]:.2f}" for k in (
            "direct_p50_ms", "proxied_p50_ms", "added_p50_ms", "direct_p99_ms",
            "proxied_p99_ms", "added_p99_ms")))
    Console().print(table)
    proxied_sent = sum(len(v) for (t, _), v in latencies.items() if t == "proxied")
    summary.update({"rate_rps": args.rate, "achieved_rps": round(achieved_rps, 1),
                    "requests": n, "send_lag_p99_ms": round(_ms(lags, 99), 3),
                    "records_written": written,
                    "proxy_cpu_ms_per_request": round(
                        proxy_cpu_s * 1000 / (proxied_sent + WARMUP_REQUESTS // 2), 3),
                    "load_avg_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count() or 0,
                    "records_expected": proxied_sent + WARMUP_REQUESTS // 2})
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

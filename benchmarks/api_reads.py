"""Config reads against a real `autotune api` server: requests/s and latency by concurrency.

Starts `autotune api` (uvicorn, one process) on a free port over a migrated temporary SQLite
database holding one published config, then, at each concurrency level, keeps that many aiohttp
clients busy for a fixed time with `GET /v1/deployments/demo/config`, and again with the
config's ETag in `If-None-Match` (answered 304, no body). Client and server share this machine's
cores, so the figures are a floor for a dedicated server, and the 304/200 ratio is the
comparable figure across machines.

Usage: .venv/bin/python benchmarks/api_reads.py [--levels 1,8,32] [--seconds 3]
The last line is one JSON object: {"levels": [{"concurrency", "rps", "p50_ms", "p99_ms",
"not_modified": {"rps", "p50_ms", "p99_ms"}, "rps_ratio_304_to_200"}, ...]}.
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
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import numpy as np
from rich.console import Console
from rich.table import Table

from autotune.domain.deployment import DEMO
from autotune.release.publish import publish_trial
from autotune.storage import repo
from autotune.storage.db import open_database, session_scope, upgrade
from autotune.storage.models import Campaign
from autotune.workers.vllm.process import free_port

ROOT = Path(__file__).resolve().parents[1]
WARMUP_S = 0.5
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Cell:
    requests: int
    errors: int
    wall_s: float
    latencies_s: np.ndarray

    @property
    def rps(self) -> float:
        return self.requests / self.wall_s

    def pct_ms(self, q: float) -> float:
        return float(np.percentile(self.latencies_s, q) * 1000) if self.requests else float("nan")


def seed(url: str) -> None:
    """One deployment, one completed campaign with one measured trial, published."""
    upgrade(url)
    engine = open_database(url)
    try:
        with session_scope(engine) as s:
            dep = repo.ensure_deployment(s, DEMO)
            when = repo.now()
            campaign = Campaign(deployment_id=dep.id, name="2026Q4", slo={"ttft_p99_ms": 2000.0},
                                trace_ref="bench", trace_digest="0" * 16, backend="sim",
                                executor="inline", search_space="default", study_name="demo:bench",
                                max_trials=1, seed=0, status="completed", started_at=when,
                                finished_at=when, wall_s=1.0)
            s.add(campaign)
            s.flush()
            trial = repo.add_trial(
                s, campaign, number=0, role="proposed",
                engine_config={"max_num_seqs": 256, "max_num_batched_tokens": 8192,
                               "gpu_memory_utilization": 0.92, "enable_prefix_caching": True},
                state="measured", feasible=True, capacity_output_tok_s=1800.0,
                capacity_rate_scale=4.0, latency={"ttft_p99_ms": 900.0}, latency_recorded_rate=None,
                constraints={}, replays=[], failure_class=None, failure_message=None, start_s=1.0,
                measure_s=1.0, started_at=when, worker={}, telemetry={})
            publish_trial(s, campaign, trial, period_label="2026Q4", published_by="bench", note=None)
    finally:
        engine.dispose()


def start_server(url: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUTOTUNE_DATABASE_URL": url,
           "AUTOTUNE_LOG_LEVEL": "WARNING"}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "autotune.cli.main", "api", "--port",
                                 str(port)], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"autotune api exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"autotune api not ready after {START_TIMEOUT_S} s: {log.read_text()[-2000:]}")


async def measure(url: str, concurrency: int, seconds: float, headers: dict[str, str],
                  expect_status: int) -> Cell:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        latencies: list[float] = []
        errors = 0
        recording = False

        async def worker(stop_at: float) -> None:
            nonlocal errors
            while time.perf_counter() < stop_at:
                start = time.perf_counter()
                async with session.get(url, headers=headers) as r:
                    await r.read()
                    ok = r.status == expect_status
                if recording:
                    latencies.append(time.perf_counter() - start)
                    errors += not ok

        await asyncio.gather(*(worker(time.perf_counter() + WARMUP_S) for _ in range(concurrency)))
        recording = True
        start = time.perf_counter()
        await asyncio.gather(*(worker(start + seconds) for _ in range(concurrency)))
        wall_s = time.perf_counter() - start
    return Cell(requests=len(latencies), errors=errors, wall_s=wall_s,
                latencies_s=np.asarray(latencies))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,8,32", help="concurrency levels, comma-separated")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per cell")
    args = parser.parse_args()
    try:
        levels = [int(x) for x in args.levels.split(",")]
    except ValueError:
        parser.error(f"--levels must be integers separated by commas, not {args.levels!r}")
    if not levels or min(levels) < 1 or args.seconds <= 0:
        parser.error("--levels must be at least 1 each and --seconds positive")

    work = Path(tempfile.mkdtemp(prefix="api-reads-"))
    db_url = f"sqlite:///{work / 'bench.db'}"
    seed(db_url)
    port = free_port()
    proc = start_server(db_url, port, work / "api.log")
    config_url = f"http://127.0.0.1:{port}/v1/deployments/demo/config"
    try:
        with urllib.request.urlopen(config_url, timeout=5) as r:
            etag = r.headers["ETag"]
        rows = []
        for c in levels:
            full = asyncio.run(measure(config_url, c, args.seconds, {}, 200))
            cached = asyncio.run(measure(config_url, c, args.seconds, {"If-None-Match": etag}, 304))
            if full.errors or cached.errors:
                raise SystemExit(f"concurrency {c}: {full.errors} non-200 and {cached.errors} "
                                 f"non-304 answers; see {work / 'api.log'}")
            rows.append((c, full, cached))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    table = Table(title=f"Config reads, one `autotune api` process, {os.cpu_count()} cores shared "
                        f"with the client, {args.seconds:g} s per cell", title_justify="left")
    for col in ("concurrency", "200 req/s", "200 p50 ms", "200 p99 ms", "304 req/s",
                "304 p50 ms", "304 p99 ms", "304/200 req/s"):
        table.add_column(col, justify="right")
    levels_out = []
    for c, full, cached in rows:
        ratio = cached.rps / full.rps
        table.add_row(str(c), f"{full.rps:,.0f}", f"{full.pct_ms(50):.2f}", f"{full.pct_ms(99):.2f}",
                      f"{cached.rps:,.0f}", f"{cached.pct_ms(50):.2f}", f"{cached.pct_ms(99):.2f}",
                      f"{ratio:.2f}")
        levels_out.append({
            "concurrency": c, "rps": round(full.rps, 1), "p50_ms": round(full.pct_ms(50), 3),
            "p99_ms": round(full.pct_ms(99), 3),
            "not_modified": {"rps": round(cached.rps, 1), "p50_ms": round(cached.pct_ms(50), 3),
                             "p99_ms": round(cached.pct_ms(99), 3)},
            "rps_ratio_304_to_200": round(ratio, 3)})
    Console().print(table)
    print(json.dumps({"levels": levels_out}))


if __name__ == "__main__":
    main()

"""Real engine step times beside the simulator's, shape by shape: is the step model's form right?

The fidelity benchmark judges whole replays, where a wrong step-time form hides behind a fit
that trades one coefficient against another. This one times single steps of a real vLLM
CPU-build engine serving the tiny model (decode steps by batch size, prefill steps by prompt
length, a lone prompt's TTFT through the frontend) and prints each beside `PerfModel.step_s`
for the same shape under a profile (default: the bundled `cpu` one; --profile: a calibrated
one, e.g. from `autotune sim calibrate`). Compare shapes within one run: the host's own speed
drifts between runs. How each shape is timed: docs/benchmarks/simulator-fidelity.md.

Needs the vLLM CPU build: AUTOTUNE_ENGINE__PYTHON=.venv-engine/bin/python. About 2 minutes.
Usage: .venv/bin/python benchmarks/engine_steps.py [--profile FILE] [--repeats N]
                     [--block-size N]
Prints a table, then one JSON line: per shape, real and simulated milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import httpx

from autotune.domain.engine_config import EngineConfig
from autotune.errors import ConfigError
from autotune.measure.tiny_model import make_tiny_model
from autotune.settings import engine_python_env
from autotune.workers.sim.fidelity import CPU, cpu_engine
from autotune.workers.sim.perf import PerfModel
from autotune.workers.sim.profile import Profile, find_profile, load_profile
from autotune.workers.sim.shape import engine_shape

BATCHES, PROMPTS = (1, 2, 4, 8, 16), (200, 400, 700)
LONE_PROMPT, LONE_REQUESTS = 32, 5  # short prompts alone: their TTFT is mostly the frontend
LONE_SHAPE = f"TTFT, lone {LONE_PROMPT}-token prompt"
DECODE_PROMPT, DECODE_TOKENS = 400, 300  # the fidelity trace's mean prompt
SETTLE = 50  # tokens at each end of a stream left out: the batch is still forming or draining
MAX_NUM_SEQS = 16


def engine_config(block_size: int) -> EngineConfig:
    return EngineConfig(max_model_len=CPU.max_model_len, block_size=block_size,
                        max_num_seqs=MAX_NUM_SEQS)


def steady_gaps_s(streams: Sequence[Sequence[float]], settle: int = SETTLE) -> list[float]:
    """The gaps between consecutive tokens of each stream, its first and last `settle` left out."""
    gaps = []
    for times in streams:
        middle = times[settle:len(times) - settle]
        gaps += [b - a for a, b in pairwise(middle)]
    return gaps


def gap_spanning(times: Sequence[float], start: float, end: float) -> float:
    """The longest gap of a token stream that overlaps [start, end]."""
    spans = [b - a for a, b in pairwise(times) if b >= start and a <= end]
    if not spans:
        raise ValueError("the stream had no tokens around the prompt's prefill")
    return max(spans)


def _tokens(n: int, rng: random.Random) -> list[int]:
    return [rng.randrange(10, 2000) for _ in range(n)]  # random ids: no prefix-cache hits


async def _stream(client: httpx.AsyncClient, url: str, prompt: list[int],
                  max_tokens: int) -> tuple[float, list[float]]:
    body = {"model": "autotune", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
            "stream": True, "temperature": 0}
    sent, times = time.perf_counter(), []
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"engine answered {response.status_code}: "
                               f"{(await response.aread())[:200]!r}")
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                times.append(time.perf_counter())
    return sent, times


async def decode_step_s(url: str, batch: int, rng: random.Random) -> float:
    async with httpx.AsyncClient(timeout=120) as client:
        runs = await asyncio.gather(*(_stream(client, url, _tokens(DECODE_PROMPT, rng),
                                              DECODE_TOKENS) for _ in range(batch)))
    return statistics.median(steady_gaps_s([times for _, times in runs]))


async def lone_ttft_s(url: str, rng: random.Random) -> list[float]:
    """TTFTs of short prompts sent one after another to an idle engine: one small prefill step,
    plus each request's way through the serving frontend and back, which no engine step shows.
    One client and connection for all, as the replayer keeps (its first request opens it and
    is not counted)."""
    async with httpx.AsyncClient(timeout=120) as client:
        found = []
        for _ in range(LONE_REQUESTS + 1):
            sent, times = await _stream(client, url, _tokens(LONE_PROMPT, rng), 1)
            found.append(times[0] - sent)
    return found[1:]


async def prefill_step_s(url: str, prompt_tokens: int, rng: random.Random) -> float:
    async with httpx.AsyncClient(timeout=120) as client:
        decoder = asyncio.create_task(_stream(client, url, _tokens(DECODE_PROMPT, rng),
                                              DECODE_TOKENS))
        await asyncio.sleep(0.3)  # the decoder is running
        sent, first = await _stream(client, url, _tokens(prompt_tokens, rng), 1)
        _, times = await decoder
    return gap_spanning(times, sent, first[0])


def measure(config: EngineConfig, engine_python: str, work: Path,
            repeats: int) -> dict[str, float]:
    """Median seconds per shape over `repeats`, after one discarded pass (kernels per shape)."""
    backend = cpu_engine(make_tiny_model(work / "model"), engine_python, work)
    rng = random.Random(7)
    backend.start(config, CPU, label="engine-steps")
    try:
        url = backend.base_url
        found: dict[str, list[float]] = {}
        for attempt in range(repeats + 1):
            for b in BATCHES:
                found.setdefault(f"decode {b}", []).append(
                    asyncio.run(decode_step_s(url, b, rng)))
            for n in PROMPTS:
                found.setdefault(f"prefill {n} + decode 1", []).append(
                    asyncio.run(prefill_step_s(url, n, rng)))
            found.setdefault(LONE_SHAPE, []).extend(asyncio.run(lone_ttft_s(url, rng)))
            if attempt == 0:
                found.clear()
    finally:
        backend.stop()
    return {shape: statistics.median(values) for shape, values in found.items()}


def simulated(config: EngineConfig, profile: Profile) -> dict[str, float]:
    """The same shapes under the profile, each decode at its mid-stream context."""
    perf = PerfModel(CPU.gpu_info, CPU.model_info, engine_shape(config, CPU),
                     profile.with_coefficients(noise_cv=0.0))
    context = DECODE_PROMPT + DECODE_TOKENS // 2
    steps = {f"decode {b}": perf.step_s(b, b * context) for b in BATCHES}
    steps.update({f"prefill {n} + decode 1": perf.step_s(1, context, n, 1, n * n / 2)
                  for n in PROMPTS})
    steps[LONE_SHAPE] = (perf.step_s(0, 0.0, LONE_PROMPT, 1, LONE_PROMPT ** 2 / 2)
                         + perf.profile.coefficients.frontend_s)
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, help="a profile file (default: the bundled cpu)")
    parser.add_argument("--repeats", type=int, default=3, help="passes whose median is kept")
    parser.add_argument("--block-size", type=int, default=32,
                        help="KV block size in tokens (a multiple of 32 on the CPU build)")
    args = parser.parse_args()
    if args.repeats < 1:
        sys.exit(f"engine_steps: --repeats must be at least 1, not {args.repeats}")
    if args.block_size < 32 or args.block_size % 32:
        sys.exit(f"engine_steps: --block-size must be a multiple of 32 on the CPU build, not "
                 f"{args.block_size}")
    try:
        profile = (load_profile(args.profile) if args.profile
                   else find_profile("cpu", "tiny-llama", "cpu", None))
    except ConfigError as exc:
        sys.exit(f"engine_steps: {exc}")
    engine_python = engine_python_env()
    if not engine_python or not Path(engine_python).exists():
        sys.exit("engine_steps: set AUTOTUNE_ENGINE__PYTHON to the vLLM CPU venv's python "
                 "(make engine-venv)")
    config = engine_config(args.block_size)
    sim = simulated(config, profile)
    with tempfile.TemporaryDirectory() as tmp:
        real = measure(config, engine_python, Path(tmp), args.repeats)
    print(f"{'step':<24}{'real ms':>9}{'sim ms':>9}{'sim/real':>10}")
    for shape, seconds in real.items():
        print(f"{shape:<24}{seconds * 1e3:9.2f}{sim[shape] * 1e3:9.2f}{sim[shape] / seconds:10.2f}")
    print(json.dumps({"profile": str(args.profile or "bundled cpu"), "repeats": args.repeats,
                      "block_size": args.block_size,
                      "step_ms": {shape: {"real": round(real[shape] * 1e3, 3),
                                          "sim": round(sim[shape] * 1e3, 3)} for shape in real}}))


if __name__ == "__main__":
    main()

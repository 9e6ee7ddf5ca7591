"""Open-loop and closed-loop replay against an OpenAI-compatible server (real vLLM engines).

Open loop (the default): every request is sent at its scheduled time whether or not earlier
ones finished. Closed loop (`ReplayPlan.max_concurrency` N): N clients, each sending the next
request, in order, as soon as it has read the last token of its previous one, as `vllm bench
serve --max-concurrency N` does at its default request rate of inf
(`vllm/benchmarks/serve.py::benchmark`, a semaphore held around each whole streamed request);
there the send times are what happened and latencies count from them. Open loop: Latencies are
measured on the monotonic clock from the *intended* send time, so a client that falls behind
cannot hide queueing (coordinated omission); how far behind it fell is recorded per request as
the send lag, and a replay whose send-lag P99 exceeds a bound is client-bound, not a
measurement. Prompts go as token ids to /v1/completions with max_tokens = min_tokens = N and
ignore_eos, streamed with usage, so lengths are exact. A server error or a dropped connection is
recorded, never raised; the whole replay is bounded in time. When one event loop cannot keep
the schedule (a peak rate above REQUESTS_PER_LOOP_S), the schedule is dealt out round-robin to
several processes that share one start instant on the system-wide monotonic clock (a closed
loop stays on one: it sends only as fast as the engine finishes requests). The cyclic
garbage collector is held off while a replay sends (see `_no_gc_pauses`).
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import time
from array import array
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from multiprocessing import get_context

import aiohttp
import numpy as np

from autotune.domain.records import ReplayResult
from autotune.domain.step_timings import step_times


@dataclass(frozen=True)
class ReplayPlan:
    base_url: str  # http://127.0.0.1:PORT
    model: str  # the served model name
    scheduled_s: np.ndarray  # intended send offsets, already divided by the rate multiplier
    prompts: list[list[int] | str]  # token ids for /v1/completions; text for /v1/chat/completions
    output_tokens: np.ndarray
    drain_timeout_s: float = 300.0  # how long after the last send requests may still finish
    request_timeout_s: float = 600.0
    processes: int | None = None  # None: as many as the peak rate needs (see processes_for)
    # Prompt lengths, for the decode-step timings' context; None: the token-id prompts' lengths.
    prompt_tokens: np.ndarray | None = None
    # Closed loop: this many clients, each sending its next request when its last finished;
    # scheduled_s is then unused (the result's holds the actual send times). None: open loop.
    max_concurrency: int | None = None


REQUESTS_PER_LOOP_S = 200.0  # what one asyncio loop sends on time, with margin
START_MARGIN_S = 3.0  # time for worker processes to start before the first send


def processes_for(scheduled_s: np.ndarray) -> int:
    """Loops needed for the peak one-second request rate of a schedule."""
    if len(scheduled_s) == 0:
        return 1
    peak = int(np.bincount(np.floor(scheduled_s - scheduled_s.min()).astype(int)).max())
    return max(1, min(os.cpu_count() or 1, math.ceil(peak / REQUESTS_PER_LOOP_S)))


@dataclass
class _Gaps:
    """Every gap between two tokens of a stream: its end (seconds after the replay's start
    instant t0, shared by all processes) and its length; compact, a replay may hold millions."""

    end_s: array = field(default_factory=lambda: array("d"))
    length_s: array = field(default_factory=lambda: array("d"))

    def extend(self, other: _Gaps) -> None:
        self.end_s.extend(other.end_s)
        self.length_s.extend(other.length_s)


@dataclass
class _Outcome:
    ttft_s: float = float("nan")
    e2e_s: float = float("nan")
    tokens: int = 0
    failed: bool = True
    error: str | None = None
    send_lag_s: float = float("nan")


def _is_token(choice: dict[str, object], chat: bool) -> bool:
    """Whether a streamed choice carries a generated token (a chunk whose text decodes to ""
    still does; chat's opening role-only chunk and finish-only chunks do not)."""
    if chat:
        delta = choice.get("delta") or {}
        assert isinstance(delta, dict)
        if "role" in delta or "content" not in delta:
            return False
        return bool(delta["content"]) or choice.get("finish_reason") is None
    if "text" not in choice:
        return False
    return bool(choice["text"]) or choice.get("finish_reason") is None


async def _stream_one(session: aiohttp.ClientSession, plan: ReplayPlan, i: int, t0: float,
                      target: float, out: _Outcome, gaps: _Gaps) -> None:
    """Send request i at `target` (loop time) and stream its tokens into `out` and `gaps`."""
    loop = asyncio.get_running_loop()
    delay = target - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)
    out.send_lag_s = loop.time() - target
    n = int(plan.output_tokens[i])
    prompt = plan.prompts[i]
    chat = isinstance(prompt, str)
    body: dict[str, object] = {
        "model": plan.model, "max_tokens": n, "min_tokens": n, "ignore_eos": True,
        "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    endpoint = "/v1/chat/completions" if chat else "/v1/completions"
    first = last = None
    chunks = 0
    usage_tokens = None
    try:
        async with session.post(f"{plan.base_url}{endpoint}", json=body) as resp:
            if resp.status != 200:
                out.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                now = loop.time()
                if chunk.get("usage"):
                    usage_tokens = chunk["usage"].get("completion_tokens")
                choices = chunk.get("choices") or []
                if choices and _is_token(choices[0], chat):
                    chunks += 1
                    if first is None:
                        first = now
                    else:
                        gaps.end_s.append(now - t0)
                        gaps.length_s.append(now - last)  # type: ignore[operator]
                    last = now
    except (TimeoutError, aiohttp.ClientError, json.JSONDecodeError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"
        return
    if first is None:
        out.error = "no tokens received"
        return
    out.ttft_s, out.e2e_s = first - target, last - target  # type: ignore[operator]
    out.tokens = int(usage_tokens if usage_tokens is not None else chunks)
    out.failed = out.tokens < n
    if out.failed:
        out.error = f"received {out.tokens} of {n} tokens"


async def _client(session: aiohttp.ClientSession, plan: ReplayPlan, t0: float,
                  nxt: Iterator[int], outcomes: list[_Outcome], sent_s: np.ndarray,
                  gaps: _Gaps) -> None:
    """One closed-loop client: the next request in order, sent the moment the last finished."""
    loop = asyncio.get_running_loop()
    for i in nxt:  # one iterator shared by all clients: requests go out in order
        now = loop.time()
        sent_s[i] = now - t0
        await _stream_one(session, plan, i, t0, now, outcomes[i], gaps)


async def _replay(plan: ReplayPlan, t0: float | None = None
                  ) -> tuple[list[_Outcome], _Gaps, float, np.ndarray]:
    """Outcomes, gaps, wall seconds and each request's send time (seconds after t0)."""
    n = len(plan.prompts)
    outcomes = [_Outcome() for _ in plan.prompts]
    gaps = _Gaps()
    sent_s = np.asarray(plan.scheduled_s, dtype=float).copy()
    timeout = aiohttp.ClientTimeout(total=plan.request_timeout_s)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        loop = asyncio.get_running_loop()  # its clock is time.monotonic(), shared by processes
        if t0 is None:
            t0 = loop.time() + 0.05  # a moment to create the tasks before the first send
        if plan.max_concurrency is None:
            tasks = [asyncio.create_task(_stream_one(session, plan, i, t0,
                                                     t0 + float(plan.scheduled_s[i]),
                                                     outcomes[i], gaps))
                     for i in range(n)]
            bound = float(plan.scheduled_s[-1]) + plan.drain_timeout_s if n else 0.0
        else:
            sent_s = np.full(n, np.nan)
            await asyncio.sleep(max(0.0, t0 - loop.time()))
            nxt = iter(range(n))
            clients = min(plan.max_concurrency, n)
            tasks = [asyncio.create_task(_client(session, plan, t0, nxt, outcomes, sent_s, gaps))
                     for _ in range(clients)]
            # Each client's requests follow one another, each within request_timeout_s.
            bound = math.ceil(n / clients) * plan.request_timeout_s if n else 0.0
        _, pending = await asyncio.wait(tasks, timeout=bound + 0.05)
        for task in pending:  # still running at the bound: recorded as failed
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for o in outcomes:
            if o.failed and o.error is None:
                o.error = "not finished within the replay bound"
        wall = loop.time() - t0
    sent_s[np.isnan(sent_s)] = wall  # closed loop: never sent before the bound (failed)
    return outcomes, gaps, wall, sent_s


@contextmanager
def _no_gc_pauses() -> Iterator[None]:
    """No cyclic garbage collection while a replay runs; one after it. A full collection stops
    the event loop for as long as it walks the heap, long enough to make a replay client-bound
    (docs/benchmarks/replay-client.md), and the tuner's own process, where replays run, has a
    larger heap. Reference counting still frees the rest."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.collect()


def _run_loop(plan: ReplayPlan, t0: float | None = None
              ) -> tuple[list[_Outcome], _Gaps, np.ndarray]:
    with _no_gc_pauses():
        outcomes, gaps, _, sent_s = asyncio.run(_replay(plan, t0))
    return outcomes, gaps, sent_s


def _replay_spread(plan: ReplayPlan, processes: int) -> tuple[list[_Outcome], _Gaps]:
    t0 = time.monotonic() + START_MARGIN_S
    parts = [np.arange(k, len(plan.prompts), processes) for k in range(processes)]
    outcomes: list[_Outcome] = [_Outcome() for _ in plan.prompts]
    gaps = _Gaps()
    # spawn, not fork: the tuner may hold threads (Ray, samplers) that fork would copy broken.
    with ProcessPoolExecutor(processes, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(_run_loop, replace(
            plan, scheduled_s=plan.scheduled_s[idx], prompts=[plan.prompts[i] for i in idx],
            output_tokens=plan.output_tokens[idx], processes=1, prompt_tokens=None), t0)
            for idx in parts]
        for idx, future in zip(parts, futures, strict=True):
            part_outcomes, part_gaps, _ = future.result()
            for i, o in zip(idx, part_outcomes, strict=True):
                outcomes[i] = o
            gaps.extend(part_gaps)
    return outcomes, gaps


def run_replay(plan: ReplayPlan) -> tuple[ReplayResult, list[str]]:
    """Replay the plan; returns the measurements and the distinct error messages seen. In a
    closed loop the result's scheduled_s are the actual send times (seconds after the first)."""
    sched = np.asarray(plan.scheduled_s, dtype=float)
    if plan.max_concurrency is not None:
        if plan.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {plan.max_concurrency}")
        # One loop: its clients send only as fast as the engine finishes requests, far below
        # REQUESTS_PER_LOOP_S for a CPU engine (and most GPU ones). Splitting N clients between
        # processes would also split the in-order issue across them.
        outcomes, gaps, sched = _run_loop(plan)
    elif (processes := plan.processes or processes_for(sched)) > 1:
        outcomes, gaps = _replay_spread(plan, processes)
    else:
        outcomes, gaps, _ = _run_loop(plan)
    ttft = np.array([o.ttft_s for o in outcomes])
    e2e = np.array([o.e2e_s for o in outcomes])
    lag = np.array([o.send_lag_s for o in outcomes])
    prompt_tokens = (plan.prompt_tokens if plan.prompt_tokens is not None
                     else np.array([len(p) for p in plan.prompts]))
    gap_s = np.frombuffer(gaps.length_s, dtype=float)
    finished = sched + np.nan_to_num(e2e, nan=0.0)
    wall = float(np.max(finished) - sched[0]) if len(sched) else 0.0
    result = ReplayResult(
        scheduled_s=sched,
        ttft_s=ttft,
        e2e_s=e2e,
        output_tokens=np.array([o.tokens for o in outcomes]),
        failed=np.array([o.failed for o in outcomes]),
        itl_s=gap_s,
        itl_weight=np.ones(len(gap_s), dtype=np.int64),
        wall_s=max(wall, 1e-9),
        send_lag_s=lag,
        # Request times from t0, the gaps' clock: sent, first and last token.
        step_times=step_times(sched + lag, sched + ttft, sched + e2e, prompt_tokens,
                              np.array([o.tokens for o in outcomes]),
                              np.frombuffer(gaps.end_s, dtype=float), gap_s),
    )
    errors = sorted({o.error for o in outcomes if o.error})
    return result, errors

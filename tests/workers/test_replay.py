"""The open- and closed-loop replayer against a small local OpenAI-style streaming server.

The server here is a test fixture with known, controllable timing (a token every `gap` seconds,
errors on demand), so the replayer's own arithmetic can be checked exactly; the replayer against
a real vLLM engine is in the integration tests.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from aiohttp import web

from autotune.measure.metrics import summarize
from autotune.workers.replay import ReplayPlan, _no_gc_pauses, run_replay

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier

GAP_S = 0.02


class _Streams:
    """Completion requests the server is answering now, and the most at once."""

    now = peak = 0


async def _completions(request: web.Request) -> web.StreamResponse:
    _Streams.now += 1
    _Streams.peak = max(_Streams.peak, _Streams.now)
    try:
        return await _answer(request)
    finally:
        _Streams.now -= 1


async def _answer(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    prompt = body["prompt"]
    if prompt and prompt[0] == 500:
        return web.Response(status=500, text="boom")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await asyncio.sleep(0.1 if prompt and prompt[0] == 100 else 0.0)  # queueing before prefill
    n = body["max_tokens"]
    for i in range(n):
        await asyncio.sleep(GAP_S)
        if prompt and prompt[0] == 666 and i == 1:  # drop the connection mid-stream
            request.transport.close()  # type: ignore[union-attr]
            return resp
        chunk = {"choices": [{"index": 0, "text": f"t{i}", "finish_reason": None}]}
        await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
    usage = {"choices": [], "usage": {"prompt_tokens": len(prompt), "completion_tokens": n}}
    await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
    return resp


async def _chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                         "finish_reason": None}]}
    await resp.write(f"data: {json.dumps(role)}\n\n".encode())
    n = body["max_tokens"]
    for i in range(n):
        await asyncio.sleep(GAP_S)
        chunk = {"choices": [{"index": 0, "delta": {"content": "" if i == 2 else f"w{i}"},
                              "finish_reason": "length" if i == n - 1 else None}]}
        await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
    usage = {"choices": [], "usage": {"completion_tokens": n}}
    await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
    return resp


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/v1/chat/completions", _chat)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)


def plan(url: str, first_ids: list[int], sched: list[float], tokens: int = 5,
         drain: float = 10.0) -> ReplayPlan:
    return ReplayPlan(base_url=url, model="m", scheduled_s=np.array(sched),
                      prompts=[[i, 1, 2] for i in first_ids],
                      output_tokens=np.full(len(sched), tokens), drain_timeout_s=drain)


def test_latencies_count_from_the_intended_send_time(server_url: str) -> None:
    result, errors = run_replay(plan(server_url, [1, 100, 1], [0.0, 0.05, 0.3]))
    assert errors == [] and not result.failed.any()
    assert (result.output_tokens == 5).all()
    # Lower bounds only: the server waits at least this long, however busy the host (how
    # closely the replayer keeps time is benchmarks/replay_client.py's to measure). Request 1
    # waited 0.1 s in the server's queue: that is in its TTFT, as is any lag in sending it.
    assert result.send_lag_s is not None and (result.send_lag_s >= 0).all()
    assert (result.ttft_s >= result.send_lag_s + [GAP_S, 0.1 + GAP_S, GAP_S]).all()
    assert (result.e2e_s >= result.send_lag_s + 5 * GAP_S).all()
    # Four gaps after each first token; they add up to the request's time after it.
    assert len(result.itl_s) == 3 * 4
    assert float(np.sum(result.itl_s)) == pytest.approx(float(np.sum(result.e2e_s - result.ttft_s)))


def test_open_loop_sends_on_schedule_regardless_of_replies(server_url: str) -> None:
    # 40 requests 10 ms apart, each taking at least 0.1 s: a closed loop would have one in
    # flight at a time; the open loop sends the next before the last has answered.
    _Streams.peak = 0
    sched = [i * 0.01 for i in range(40)]
    result, _ = run_replay(plan(server_url, [1] * 40, sched))
    assert _Streams.peak >= 2
    assert result.send_lag_s is not None and np.isfinite(result.send_lag_s).all()
    summary = summarize(result)
    assert summary.completed == 40 and summary.send_lag_p99_ms is not None


def test_errors_are_recorded_not_raised(server_url: str) -> None:
    result, errors = run_replay(plan(server_url, [1, 500, 666], [0.0, 0.0, 0.0]))
    assert result.failed.tolist() == [False, True, True]
    assert any("HTTP 500" in e for e in errors)
    assert len(errors) == 2


def test_the_replay_is_bounded(server_url: str) -> None:
    result, errors = run_replay(plan(server_url, [1, 1], [0.0, 0.0], tokens=200, drain=0.3))
    assert result.failed.all() and errors == ["not finished within the replay bound"]


def test_unreachable_server_fails_every_request() -> None:
    result, errors = run_replay(plan("http://127.0.0.1:9", [1, 1], [0.0, 0.01]))
    assert result.failed.all() and errors and "ClientConnectorError" in errors[0]


def test_a_schedule_spread_over_processes_is_kept_and_merged(server_url: str) -> None:
    sched = [i * 0.01 for i in range(40)]
    single, _ = run_replay(plan(server_url, [1] * 40, sched))
    spread_plan = ReplayPlan(**{**plan(server_url, [1] * 40, sched).__dict__, "processes": 2})
    spread, errors = run_replay(spread_plan)
    assert errors == [] and not spread.failed.any()
    assert spread.scheduled_s.tolist() == single.scheduled_s.tolist()
    assert len(spread.itl_s) == len(single.itl_s) == 40 * 4
    assert spread.send_lag_s is not None and np.isfinite(spread.send_lag_s).all()
    assert (spread.ttft_s >= GAP_S).all() and (single.ttft_s >= GAP_S).all()


@pytest.mark.parametrize("processes", [1, 2])
def test_decode_step_timings_come_from_the_streams_on_one_clock(server_url: str,
                                                                processes: int) -> None:
    # One request alone, then two side by side: the fixture server streams a token every GAP_S
    # whatever the batch, so both bins time GAP_S. Gap ends and request times on different
    # clocks (or processes' clocks) would leave no gap clean or count the batch wrong.
    p = ReplayPlan(**{**plan(server_url, [1, 1, 1], [0.0, 1.0, 1.0], tokens=30).__dict__,
                      "processes": processes})
    result, errors = run_replay(p)
    assert errors == []
    steps = {s.batch: s for s in summarize(result).step_times}
    assert set(steps) == {1, 2}
    assert steps[1].gaps >= 25 and steps[2].gaps >= 2 * 25
    for s in steps.values():  # a busy host only lengthens gaps; a gap split across clocks
        assert s.step_ms >= GAP_S * 1000 * 0.5  # or processes would read near zero
    # Prompts of 3 tokens; 30 tokens generated along each stream.
    assert 3 < steps[1].kv_tokens < 33 and 6 < steps[2].kv_tokens < 66


def test_processes_follow_the_peak_rate() -> None:
    from autotune.workers.replay import REQUESTS_PER_LOOP_S, processes_for

    calm = np.arange(100) * 0.1  # 10 requests/s
    burst = np.concatenate([calm, np.full(int(REQUESTS_PER_LOOP_S * 1.5), 20.5)])
    assert processes_for(calm) == 1
    assert processes_for(burst) == min(2, __import__("os").cpu_count() or 1)


def test_text_prompts_go_to_the_chat_endpoint(server_url: str) -> None:
    p = ReplayPlan(base_url=server_url, model="m", scheduled_s=np.array([0.0, 0.01]),
                   prompts=["hello there", [1, 2, 3]], output_tokens=np.array([5, 5]))
    result, errors = run_replay(p)
    assert errors == [] and result.output_tokens.tolist() == [5, 5]
    # The role-only opening chunk is no token; an empty-text token still is.
    assert result.ttft_s[0] == pytest.approx(GAP_S, abs=0.015)
    assert len(result.itl_s) == 2 * 4


def test_no_collection_pauses_while_a_replay_sends() -> None:
    started: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    was_enabled = gc.isenabled()
    gc.enable()
    gc.callbacks.append(record)
    try:
        with _no_gc_pauses():
            junk = [[i] for i in range(200_000)]  # enough containers for several collections
            del junk
            assert started == [] and not gc.isenabled()
        assert started == [2] and gc.isenabled()  # one full collection, after the replay
    finally:
        gc.callbacks.remove(record)
        if not was_enabled:
            gc.disable()


def _closed(url: str, first_ids: list[int], n: int, tokens: int = 5) -> ReplayPlan:
    return replace(plan(url, first_ids, [0.0] * len(first_ids), tokens), max_concurrency=n)


@pytest.mark.parametrize("n", [1, 3])
def test_closed_loop_keeps_n_clients_busy_in_order(server_url: str, n: int) -> None:
    _Streams.peak = 0
    result, errors = run_replay(_closed(server_url, [1] * 12, n))
    assert errors == [] and not result.failed.any()
    assert _Streams.peak == n  # the server never saw more than n streams at once
    send, done = result.scheduled_s, result.scheduled_s + result.e2e_s
    assert (np.diff(send) >= 0).all()  # in order
    # The first n go out together; every later one only after an earlier one finished, which
    # the test measures as: at each send, at most n - 1 others are unfinished.
    assert send[n - 1] - send[0] < send[n] - send[0]
    for i in range(n, len(send)):
        assert int(((send[:i] <= send[i]) & (done[:i] > send[i])).sum()) <= n - 1
    # TTFT counts from the actual send: each request's own stream, not the time it waited for
    # a client (a request that waited for a client would otherwise show it as TTFT).
    assert result.ttft_s[-1] < send[-1] - send[0]


def test_closed_loop_a_failed_request_frees_its_client(server_url: str) -> None:
    result, errors = run_replay(_closed(server_url, [1, 500, 1, 1], 1))
    assert result.failed.tolist() == [False, True, False, False]
    assert errors == ["HTTP 500: boom"]
    assert np.isfinite(result.scheduled_s).all()


def test_closed_loop_needs_a_client() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        run_replay(_closed("http://127.0.0.1:9", [1], 0))

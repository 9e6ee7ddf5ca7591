"""Closed-loop load on the modelled engine: N clients, each sending its next request when its
last one has finished, requests issued in order.

As `vllm bench serve --max-concurrency N` does it at its default request rate of inf
(`vllm/benchmarks/serve.py::benchmark`: every request's task is created at once and
`limited_request_func` holds an `asyncio.Semaphore(max_concurrency)` around the whole streamed
request, so a slot frees when the client has read the last token and the next request, in
order, goes out at once; TTFT counts from the send, `RequestFuncOutput.start_time`), and as
GuideLLM's concurrent profile (`guidellm/scheduler/strategies.py::ConcurrentStrategy`: N
streams, each request at its stream's last completion). The client sees a token `frontend_s`
after the step that made it (`scheduler._result`), so a request's successor reaches the engine
`frontend_s` after its last step. A request longer than `max_model_len` is refused at once
(HTTP 400): its client sends the next one at the same instant.

Decode runs stay closed-form, but a run stops at the first finish (a run ends at one anyway,
`_Rank.run_steps`): the finish frees a client, whose request is an arrival the next run must
respect. Independent DP ranks advance on clocks of their own, so a rank's run also stops
before any other busy rank could release a client: no sooner than its clock plus, for each
token its closest request still has to emit, a floor on a step's time, plus `frontend_s`.
"""

from __future__ import annotations

import heapq

import numpy as np

from autotune.domain.records import ReplayResult
from autotune.workers.sim.perf import PerfModel
from autotune.workers.sim.scheduler import (
    INF,
    _lockstep_decode_runs,
    _lockstep_step,
    _Rank,
    _Req,
    _requests,
    _result,
    _Router,
)

CLIENT_STARTS = ("together", "spread")


def spread_starts(perf: PerfModel, prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                  concurrency: int) -> np.ndarray:
    """Each client's first send time, spread evenly over one request's service time (the mean
    output length in decode steps at the batch each DP rank holds, from the engine's own step
    model): the closed loop in the desynchronised state, not phase-locked.

    With every request the same length, clients that start together finish together and send
    together forever in a deterministic model. In vLLM concurrent requests reach the engine core
    one at a time (`vllm/v1/engine/async_llm.py::AsyncLLM.add_request`: each is processed by
    the front end and sent over ZMQ on its own) and the busy loop starts a step with whatever
    has arrived (`vllm/v1/engine/core.py::EngineCoreProc._process_input_queue`), so jitter in a
    request's round trip splits a group, and jitter can merge groups again. A real engine sits
    between the two start states, and not always at the same place
    (docs/benchmarks/gpu-fidelity.md, "Closed loops on a real engine")."""
    shape = perf.shape
    batch = min(max(1, -(-concurrency // shape.data_parallel_size)), shape.max_num_seqs)
    isl, osl = float(np.mean(prompt_tokens)), float(np.mean(output_tokens))
    step = perf.step_s(batch, batch * (isl + osl / 2))
    return np.arange(concurrency) * (osl * step / concurrency)


class _Clients:
    """The clients: when each is next free, and the requests still to send, in order."""

    def __init__(self, reqs: list[_Req], concurrency: int, reply_s: float,
                 start_s: np.ndarray | None = None) -> None:
        self.reqs, self.reply_s, self.nxt = reqs, reply_s, 0
        n = min(concurrency, len(reqs))
        # a heap; all start at once unless each client's first send time is given
        self.free_at = [0.0] * n if start_s is None else sorted(float(t) for t in start_s[:n])

    @property
    def more(self) -> bool:
        return self.nxt < len(self.reqs)

    def next_send(self) -> float:
        """When the next request goes out (INF: none left, or every client is waiting)."""
        return self.free_at[0] if self.free_at and self.nxt < len(self.reqs) else INF

    def send(self) -> _Req | None:
        """The next request, sent by the first free client; refused ones are answered at once
        and that client sends again. None: nothing accepted was left to send."""
        while self.nxt < len(self.reqs):
            t = heapq.heappop(self.free_at)
            r = self.reqs[self.nxt]
            self.nxt += 1
            r.arrival = t
            if r.target:
                return r
            heapq.heappush(self.free_at, t)  # refused (HTTP 400): the client is free again
        return None

    def release(self, count: int, clock: float) -> None:
        """`count` requests finished in the step that ended at `clock`: their clients read the
        last token a frontend delay later and send again then."""
        for _ in range(count):
            heapq.heappush(self.free_at, clock + self.reply_s)

    def send_rest(self) -> None:
        """After the last accepted request: the refused ones left still get their send times."""
        while self.more and self.free_at:
            self.send()


def simulate_closed_loop(perf: PerfModel, prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                         hash_ids: tuple[tuple[int, ...], ...], hash_block_tokens: int,
                         concurrency: int, rng: np.random.Generator,
                         skip_decode_runs: bool = True,
                         start_s: np.ndarray | None = None) -> ReplayResult:
    """Replay the requests in order from `concurrency` closed-loop clients against the modelled
    engine, all its DP ranks (lockstep for an MoE model, as `simulate_data_parallel`).
    scheduled_s of the result: each request's actual send time. start_s: when each client
    sends its first request (default: all at 0)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if start_s is not None and (len(start_s) < min(concurrency, len(prompt_tokens))
                                or np.any(np.asarray(start_s) < 0)):
        raise ValueError("start_s needs a non-negative first send time for every client")
    n = len(prompt_tokens)
    reqs, order, refused = _requests(np.zeros(n), prompt_tokens, output_tokens, hash_ids,
                                     perf.shape.enable_prefix_caching, perf.shape.max_model_len)
    noise = 1.0 + perf.profile.coefficients.noise_cv * rng.standard_normal()
    ranks = perf.shape.data_parallel_size
    group = [_Rank(perf, hash_block_tokens, noise) for _ in range(ranks)]
    clients = _Clients(reqs, concurrency, perf.profile.coefficients.frontend_s, start_s)
    lock_runs: list[tuple[np.ndarray, int]] = []
    if ranks == 1:
        _one_rank(perf, group[0], clients, len(order), noise, skip_decode_runs)
    elif perf.moe_token_factor > 1:
        _lockstep(perf, group, clients, len(order), noise, lock_runs, skip_decode_runs)
    else:
        _independent(perf, group, clients, len(order), noise, skip_decode_runs)
    clients.send_rest()
    return _result(perf, reqs, group, refused, lock_runs)


def _one_rank(perf: PerfModel, rank: _Rank, clients: _Clients, total: int, noise: float,
              skip: bool) -> None:
    step_s, waiting = perf.step_s, rank.waiting
    seen = 0
    while rank.finished < total:
        clock = rank.clock
        while clients.next_send() <= clock:
            r = clients.send()
            if r is not None:
                waiting.append(r)
        batch = rank.schedule(clock) if rank.busy else None
        if batch is None:  # idle, or blocked on memory with nothing running (see simulate)
            nxt = clients.next_send()
            if nxt == INF:
                return  # nothing in flight will ever free a client
            rank.clock = nxt
            continue
        rank.complete(batch, clock, clock + step_s(*batch) * noise)
        if rank.finished != seen:
            clients.release(rank.finished - seen, rank.clock)
            seen = rank.finished
        if skip:
            rank.decode_runs(clients.next_send(), clients.more, stop_at_finish=clients.more,
                             arrival_is_mine=True)
            if rank.finished != seen:
                clients.release(rank.finished - seen, rank.clock)
                seen = rank.finished


def _lockstep(perf: PerfModel, group: list[_Rank], clients: _Clients, total: int,
              noise: float, lock_runs: list[tuple[np.ndarray, int]], skip: bool) -> None:
    route = _Router(group)
    clock, seen = 0.0, 0

    def finished() -> int:
        return sum(rank.finished for rank in group)

    while seen < total:
        while clients.next_send() <= clock:
            r = clients.send()
            if r is not None:
                route(r)
        end = _lockstep_step(perf, group, clock, noise)
        if end is None:  # idle, or blocked on memory (see simulate)
            nxt = clients.next_send()
            if nxt == INF:
                return
            clock = nxt
            continue
        clock = end
        if (done := finished()) != seen:
            clients.release(done - seen, clock)
            seen = done
        if skip:
            clock = _lockstep_decode_runs(perf, group, clock, noise, lock_runs,
                                          clients.next_send(), clients.more,
                                          stop_at_finish=clients.more)
            if (done := finished()) != seen:
                clients.release(done - seen, clock)
                seen = done


def _independent(perf: PerfModel, group: list[_Rank], clients: _Clients, total: int,
                 noise: float, skip: bool) -> None:
    route = _Router(group)
    seen = [0] * len(group)
    reply_s = perf.profile.coefficients.frontend_s
    # No step is shorter than a one-token one; halved, a safe floor under the model's wiggles.
    floor_s = 0.5 * min(perf.step_s(1, 1.0), perf.step_s(0, 0.0, 1)) * noise

    def earliest_release(rank: _Rank) -> float:
        """The soonest a busy rank can free a client: its next finish is the end of the step in
        which its closest request emits its last token, at least `steps` steps away."""
        if rank.mid_prefill or (rank.waiting and len(rank.running) < rank.max_seqs):
            steps = 1  # a request admitted or mid-prefill may finish with its next step
        else:
            steps = max(1, min(rank.k, 1 << 20))
        return rank.clock + steps * floor_s + reply_s

    def release(j: int) -> None:
        rank = group[j]
        if rank.finished != seen[j]:
            clients.release(rank.finished - seen[j], rank.clock)
            seen[j] = rank.finished

    while sum(seen) < total:
        arrival = clients.next_send()
        busy = [j for j, rank in enumerate(group) if rank.busy]
        e = min(busy, key=lambda j: group[j].clock) if busy else None
        if e is None or arrival <= group[e].clock:
            if arrival == INF:
                return  # nothing in flight will ever free a client
            r = clients.send()
            if r is not None:
                target = route(r)
                if not target.running and len(target.waiting) == 1:  # it was idle until now
                    target.clock = max(target.clock, arrival)
            continue
        earliest = group[e]
        clock = earliest.clock
        batch = earliest.schedule(clock)
        if batch is None:  # blocked on memory: cannot happen, as in simulate
            earliest.clock = arrival
            continue
        earliest.complete(batch, clock, clock + perf.step_s(*batch) * noise)
        release(e)
        if skip:
            bound = min([earliest_release(group[j]) for j in busy if j != e], default=INF)
            earliest.decode_runs(min(clients.next_send(), bound), clients.more,
                                 stop_at_finish=clients.more)
            release(e)

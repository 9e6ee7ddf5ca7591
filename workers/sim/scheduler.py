"""A discrete-event model of vLLM V1's scheduler, first version.

Per engine step: running requests are scheduled first (decodes and unfinished prefill chunks),
then waiting ones are admitted while there are free sequence slots, token budget and KV blocks.
Chunked prefill splits prompts across steps; without it a prompt is admitted only whole. KV
blocks are allocated on demand; when they run out the newest running request is preempted
(recompute: it goes back to the front of the queue and must prefill prompt + generated tokens
again). Prefix caching skips prefill for leading prompt blocks whose hashes are cached.

Runs of decode-only steps in which nothing arrives, finishes or needs memory it cannot get are
advanced in one go (the step times of such a run are computed as an array).
"""

from __future__ import annotations

from collections import OrderedDict, deque

import numpy as np

from autotune.records import ReplayResult
from workers.sim.perf import PerfModel

MIN_RUN = 8  # decode runs shorter than this are stepped through


class _Req:
    __slots__ = ("i", "arrival", "prompt", "target", "hashes", "generated", "computed",
                 "prefill_len", "blocks", "first_s", "last_s", "done_s", "looked_up", "running")

    def __init__(self, i: int, arrival: float, prompt: int, target: int,
                 hashes: tuple[int, ...]) -> None:
        self.i, self.arrival, self.prompt, self.target, self.hashes = i, arrival, prompt, target, hashes
        self.generated = 0
        self.computed = 0  # tokens whose KV is in the cache
        self.prefill_len = prompt  # prompt, plus generated tokens after a preemption
        self.blocks = 0
        self.first_s = self.last_s = self.done_s = float("nan")
        self.looked_up = False
        self.running = False


def simulate(perf: PerfModel, arrival_s: np.ndarray, prompt_tokens: np.ndarray,
             output_tokens: np.ndarray, hash_ids: tuple[tuple[int, ...], ...],
             hash_block_tokens: int, rng: np.random.Generator,
             horizon_s: float, skip_decode_runs: bool = True) -> ReplayResult:
    """Replay arrivals against the modelled engine. skip_decode_runs=False steps one engine
    step at a time (the reference the fast path is benchmarked and tested against)."""
    s = perf.shape
    bs, budget_max, max_seqs = s.block_size, s.max_num_batched_tokens, s.max_num_seqs
    chunked, caching = s.enable_chunked_prefill, s.enable_prefix_caching
    n = len(arrival_s)
    reqs = [_Req(i, float(arrival_s[i]), min(int(prompt_tokens[i]), s.max_model_len - 1),
                 int(output_tokens[i]), hash_ids[i]) for i in range(n)]
    for r in reqs:  # a request never grows past max_model_len
        r.target = max(1, min(r.target, s.max_model_len - r.prompt))
    free = perf.num_blocks
    cache: OrderedDict[int, None] = OrderedDict()
    cache_cap = perf.num_blocks * bs // max(hash_block_tokens, 1)
    waiting: deque[_Req] = deque()
    running: list[_Req] = []
    itl_values: list[np.ndarray] = []
    itl_weights: list[np.ndarray] = []
    single_gaps: list[float] = []
    clock, nxt, finished, preemptions = 0.0, 0, 0, 0
    cache_queries = cache_hits = 0
    noise = 1.0 + 0.02 * rng.standard_normal()  # run-to-run jitter, fixed per replay

    def blocks_for(tokens: int) -> int:
        return -(-tokens // bs)

    def preempt(victim: _Req) -> None:
        nonlocal free, preemptions
        running.remove(victim)
        victim.running = False
        free += victim.blocks
        victim.blocks = victim.computed = 0
        victim.prefill_len = victim.prompt + victim.generated
        victim.looked_up = False
        waiting.appendleft(victim)
        preemptions += 1

    while finished < n and clock <= horizon_s:
        while nxt < n and reqs[nxt].arrival <= clock:
            waiting.append(reqs[nxt])
            nxt += 1
        if not running and not waiting:
            clock = reqs[nxt].arrival
            continue
        budget = budget_max
        scheduled: list[tuple[_Req, int]] = []
        preempted = False
        for r in list(running):  # a copy: preemption removes from `running` as we go
            if not r.running or budget <= 0:
                continue
            need = min(r.prefill_len - r.computed, budget) if r.computed < r.prefill_len else 1
            extra = blocks_for(r.computed + need) - r.blocks
            while extra > free and running:
                victim = running[-1]
                preempt(victim)
                preempted = True
                if victim is r:
                    break
            if not r.running:
                continue
            free -= extra
            r.blocks += extra
            budget -= need
            scheduled.append((r, need))
        while waiting and not preempted and len(running) < max_seqs and budget > 0:
            r = waiting[0]
            if caching and not r.looked_up and r.computed == 0:
                hit = 0
                for h in r.hashes:
                    if h not in cache:
                        break
                    cache.move_to_end(h)
                    hit += 1
                cache_queries += r.prefill_len
                hit_tokens = min((hit * hash_block_tokens) // bs * bs, r.prefill_len - 1)
                cache_hits += hit_tokens
                r.computed = hit_tokens
                r.looked_up = True
            remaining = r.prefill_len - r.computed
            if not chunked and remaining > budget:
                break
            need = min(remaining, budget)
            extra = blocks_for(r.computed + need) - r.blocks
            if extra > free:
                break
            waiting.popleft()
            free -= extra
            r.blocks += extra
            budget -= need
            running.append(r)
            r.running = True
            scheduled.append((r, need))
        if not scheduled:  # blocked on memory with nothing running: cannot happen if start succeeded
            clock = reqs[nxt].arrival if nxt < n else clock + 1.0
            continue
        decodes = [r for r, need in scheduled if r.computed >= r.prefill_len]
        prefill = [(r, need) for r, need in scheduled if r.computed < r.prefill_len]
        kv_read = float(sum(r.computed for r in decodes))
        blocks_read = float(sum(r.blocks for r in decodes))
        attn2 = float(sum(need * (r.computed + need / 2) for r, need in prefill))
        dt = float(perf.step_s(len(decodes), sum(need for _, need in prefill), attn2, kv_read,
                               blocks_read)) * noise
        clock += dt
        any_done = False
        for r, need in scheduled:
            r.computed += need
            if r.computed < r.prefill_len:
                continue  # a prefill chunk that does not finish the prompt emits nothing
            if r.generated == 0:
                r.first_s = clock
            else:
                single_gaps.append(clock - r.last_s)
            r.last_s = clock
            r.generated += 1
            if r.generated >= r.target:
                r.done_s = clock
                r.running = False
                any_done = True
                free += r.blocks
                r.blocks = 0
                finished += 1
                if caching:
                    for h in r.hashes:
                        cache[h] = None
                        cache.move_to_end(h)
                    while len(cache) > cache_cap:
                        cache.popitem(last=False)
        if any_done:
            running = [r for r in running if r.running]
        # Advance a run of decode-only steps in one go when nothing can change it.
        if (not skip_decode_runs or prefill or not running
                or any(r.computed < r.prefill_len for r in running)):
            continue
        can_admit = len(running) < max_seqs and (waiting or nxt < n)
        if waiting and can_admit:
            continue
        rem = min(r.target - r.generated for r in running)
        k = rem - 1  # stop one step before the first completion; a plain step handles it
        # Cheap checks first: a short run costs more to set up than to step through.
        if k < MIN_RUN or (can_admit and nxt < n and reqs[nxt].arrival - clock < MIN_RUN * dt):
            continue
        ctx = np.fromiter((r.computed for r in running), dtype=np.int64, count=len(running))
        held = np.fromiter((r.blocks for r in running), dtype=np.int64, count=len(running))

        def blocks_needed(steps: int, ctx: np.ndarray = ctx, held: np.ndarray = held) -> int:
            return int((-(-(ctx + steps) // bs) - held).clip(min=0).sum())

        if blocks_needed(k) > free:  # memory runs out inside the run: stop where it still fits
            lo, hi = 0, k
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if blocks_needed(mid) <= free else (lo, mid - 1)
            k = lo
            if k < MIN_RUN:
                continue
        j = np.arange(k)
        m = len(running)
        # Step j reads the KV of ctx + j tokens per sequence, in ceil((ctx + j + 1) / bs) blocks
        # (its new token's block is allocated before the step runs).
        residues, counts = np.unique(ctx % bs, return_counts=True)
        blocks = int((ctx // bs).sum()) + m + ((residues[None, :] + j[:, None]) // bs) @ counts
        times = np.asarray(perf.step_s(m, 0, 0.0, float(ctx.sum()) + m * j.astype(float),
                                       blocks.astype(float)), dtype=float) * noise
        ends = clock + np.cumsum(times)
        if can_admit and nxt < n:
            k = int(np.searchsorted(ends, reqs[nxt].arrival, side="left"))
            if k < 2:  # the arrival comes sooner than the last step suggested
                continue
            times, ends = times[:k], ends[:k]
        if ends[-1] > horizon_s:
            continue
        for r in running:
            r.computed += k
            r.generated += k
            r.last_s = float(ends[-1])
            grown = blocks_for(r.computed) - r.blocks
            r.blocks += grown
            free -= grown
        clock = float(ends[-1])
        itl_values.append(times)
        itl_weights.append(np.full(k, m, dtype=np.int64))

    first = np.array([r.first_s for r in reqs])
    done = np.array([r.done_s for r in reqs])
    arrival = np.array([r.arrival for r in reqs])
    failed = np.isnan(done)
    values = np.concatenate(itl_values + [np.asarray(single_gaps, dtype=float)])
    weights = np.concatenate(itl_weights + [np.ones(len(single_gaps), dtype=np.int64)])
    last = np.nanmax(done) if (~failed).any() else clock
    return ReplayResult(
        scheduled_s=arrival,
        ttft_s=first - arrival,
        e2e_s=done - arrival,
        output_tokens=np.array([r.generated if not np.isnan(r.done_s) else 0 for r in reqs]),
        failed=failed,
        itl_s=values,
        itl_weight=weights,
        wall_s=float(last - arrival[0]) if n else 0.0,
        engine_stats={"preemptions": float(preemptions), "kv_blocks": float(perf.num_blocks),
                      "prefix_cache_hit_rate": cache_hits / cache_queries if cache_queries else 0.0},
    )

"""A discrete-event model of vLLM V1's scheduler.

Per engine step, as vLLM V1's `Scheduler.schedule` does it: running requests are scheduled first
(one decode token each, or their next prefill chunk), then waiting ones are admitted while there
are free sequence slots (`max_num_seqs`), token budget (`max_num_batched_tokens`) and KV blocks.
Chunked prefill splits prompts across steps and `long_prefill_token_threshold` caps one
request's tokens per step while another request is running or waiting (alone, it has nobody to
starve and gets the whole budget, as in vLLM 0.32); without chunked prefill a prompt is admitted
only whole. KV blocks of `block_size` tokens are allocated on demand; when they run out the
newest running request is preempted (recompute: it goes back to the front of the queue and must
prefill prompt and generated tokens again), and no waiting request is admitted in that step.

Prefix caching works on the trace's block hashes: a prompt's leading blocks whose hashes are
cached are not computed again (the last prompt token always is) and share the cached blocks'
memory. Cached blocks nobody uses stay cached but count as free; allocation evicts them, least
recently used first. A request longer than `max_model_len` is refused, as vLLM answers 400.

Speed: runs of decode-only steps in which nothing arrives, finishes or needs memory it cannot get
are advanced in one go; their step times are evaluated as one array.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque

import numpy as np

from autotune.records import ReplayResult
from workers.sim.perf import PerfModel

MIN_RUN = 2  # a run of one step is just a step


class _Req:
    __slots__ = ("i", "arrival", "prompt", "target", "hashes", "generated", "computed",
                 "prefill_len", "private", "shared", "shared_blocks", "cap", "sched_s",
                 "first_s", "last_s", "done_s", "looked_up", "running", "registered", "chunk")

    def __init__(self, i: int, arrival: float, prompt: int, target: int,
                 hashes: tuple[int, ...]) -> None:
        self.i, self.arrival, self.prompt, self.target, self.hashes = i, arrival, prompt, target, hashes
        self.generated = 0
        self.computed = 0  # tokens whose KV is in the cache
        self.prefill_len = prompt  # prompt, plus generated tokens after a preemption
        self.private = 0  # blocks this request holds alone
        self.shared: list[int] = []  # cached hashes it references
        self.shared_blocks = 0.0
        self.cap = 0.0  # tokens the blocks it holds or shares can take
        self.sched_s = self.first_s = self.last_s = self.done_s = float("nan")
        self.looked_up = False
        self.running = False
        self.registered = not hashes  # nothing to cache for a request without hashes
        self.chunk = 0  # prompt tokens it computes in the step being built


class _PrefixCache:
    """Cached prompt blocks by hash, reference-counted; unreferenced ones are evictable."""

    def __init__(self, blocks_per_hash: float) -> None:
        self.blocks_per_hash = blocks_per_hash
        self.refs: dict[int, int] = {}
        self.evictable: OrderedDict[int, None] = OrderedDict()  # least recently used first
        self.evictable_blocks = 0.0

    def __contains__(self, h: int) -> bool:
        return h in self.refs or h in self.evictable

    def acquire(self, h: int) -> float:
        """Reference a cached hash; returns the blocks that stop being free."""
        if h in self.evictable:
            del self.evictable[h]
            self.evictable_blocks -= self.blocks_per_hash
            self.refs[h] = 1
            return self.blocks_per_hash
        self.refs[h] += 1
        return 0.0

    def release(self, h: int) -> float:
        """Drop a reference; returns the blocks that become free (but stay cached)."""
        left = self.refs[h] - 1
        if left:
            self.refs[h] = left
            return 0.0
        del self.refs[h]
        self.evictable[h] = None
        self.evictable_blocks += self.blocks_per_hash
        return self.blocks_per_hash

    def evict_until(self, truly_free: float) -> None:
        """Evict least recently used blocks until allocations no longer eat into them."""
        while truly_free < 0 and self.evictable:
            self.evictable.popitem(last=False)
            self.evictable_blocks -= self.blocks_per_hash
            truly_free += self.blocks_per_hash


def simulate(perf: PerfModel, arrival_s: np.ndarray, prompt_tokens: np.ndarray,
             output_tokens: np.ndarray, hash_ids: tuple[tuple[int, ...], ...],
             hash_block_tokens: int, rng: np.random.Generator,
             horizon_s: float, skip_decode_runs: bool = True) -> ReplayResult:
    """Replay arrivals against the modelled engine. skip_decode_runs=False steps one engine
    step at a time (the reference the fast path is benchmarked and tested against)."""
    s = perf.shape
    bs, budget_max, max_seqs = perf.block_size, s.max_num_batched_tokens, s.max_num_seqs
    chunked, caching = s.enable_chunked_prefill, s.enable_prefix_caching
    threshold = s.long_prefill_token_threshold if s.long_prefill_token_threshold > 0 else budget_max
    fixed = perf.fixed_blocks_per_seq
    hbt = max(hash_block_tokens, 1)
    n = len(arrival_s)
    # Python numbers once for the whole trace: indexing numpy arrays per request is slow.
    arrivals, prompts = np.asarray(arrival_s, dtype=float).tolist(), np.asarray(prompt_tokens).tolist()
    outputs = np.asarray(output_tokens).tolist()
    no_hashes: tuple[int, ...] = ()
    reqs = [_Req(i, arrivals[i], int(prompts[i]), max(1, int(outputs[i])),
                 hash_ids[i] if caching else no_hashes) for i in range(n)]
    refused = [r for r in reqs if r.prompt + r.target > s.max_model_len]
    for r in refused:  # vLLM answers 400: the request never reaches the scheduler
        r.target = 0
    order = [r for r in reqs if r.target]
    total = len(order)
    cache = _PrefixCache(hbt / bs)
    free = float(perf.num_blocks)  # includes evictable cached blocks
    low_free = [free]  # the fewest free blocks seen: peak KV-cache usage
    waiting: deque[_Req] = deque()
    running: list[_Req] = []
    runs: list[tuple[float, float, int, int]] = []  # decode-run pieces: a, b, steps, seqs
    single_gaps: list[float] = []  # inter-token gaps of one sequence each
    shared_gaps: list[float] = []  # ... and of shared_counts[i] sequences each (one step's)
    shared_counts: list[int] = []
    clock, nxt, finished, preemptions = 0.0, 0, 0, 0
    cache_queries = cache_hits = 0
    noise = 1.0 + perf.profile.coefficients.noise_cv * rng.standard_normal()
    step_s = perf.step_s
    horizon_steps = 1 << 62
    inf = float("inf")

    def extra_blocks(r: _Req, tokens: int) -> int:
        """Blocks r must add to hold `tokens` tokens (its first ones bring the fixed ones)."""
        over = tokens - r.cap
        grow = math.ceil(over / bs) if over > 0 else 0
        return grow + (fixed if not r.private else 0)

    def take(r: _Req, blocks: int) -> None:
        nonlocal free
        if blocks:
            r.cap += (blocks - (fixed if not r.private else 0)) * bs  # fixed blocks hold no tokens
            r.private += blocks
            free -= blocks
            if free < cache.evictable_blocks:
                cache.evict_until(free - cache.evictable_blocks)
            if free < low_free[0]:
                low_free[0] = free

    def release(r: _Req) -> None:
        nonlocal free
        free += r.private
        for h in r.shared:
            free += cache.release(h)
        r.private, r.shared, r.shared_blocks, r.cap = 0, [], 0.0, 0.0

    def preempt(victim: _Req) -> None:
        """Recompute: victim (already taken off `running`) goes back to the front of the queue."""
        nonlocal preemptions
        victim.running = False
        release(victim)
        victim.computed = 0
        victim.prefill_len = victim.prompt + victim.generated
        victim.looked_up = False
        waiting.appendleft(victim)
        preemptions += 1

    def register(r: _Req) -> None:
        """Its prompt is computed: its full hashed blocks become cached, shared from now on."""
        nonlocal free
        r.registered = True
        full = min(len(r.hashes), r.prompt // hbt)
        moved = 0.0
        for h in r.hashes[len(r.shared):full]:
            if h in cache:
                continue  # cached meanwhile by another request: this copy stays private
            cache.refs[h] = 1
            r.shared.append(h)
            moved += cache.blocks_per_hash
        if moved:  # those blocks are now the cache's; what stays private shrinks to match
            r.shared_blocks += moved
            keep = max(0, math.ceil(r.cap / bs - r.shared_blocks)) + fixed
            free += r.private - keep
            r.private = keep
            r.cap = ((keep - fixed) + r.shared_blocks) * bs

    def lookup(r: _Req) -> None:
        nonlocal free, cache_queries, cache_hits
        r.looked_up = True
        hit = 0
        for h in r.hashes:
            if h not in cache:
                break
            hit += 1
        hit_tokens = min(int(hit * hbt // bs) * bs, r.prefill_len - 1) if hit else 0
        cache_queries += r.prefill_len
        cache_hits += hit_tokens
        if hit_tokens:
            for h in r.hashes[:hit]:
                free -= cache.acquire(h)
            r.shared = list(r.hashes[:hit])
            r.shared_blocks = hit * cache.blocks_per_hash
            r.cap = r.shared_blocks * bs
            r.computed = hit_tokens

    def make_room(r: _Req, extra: int, running: list[_Req]) -> bool:
        """Give running request r `extra` more blocks, preempting the newest running requests
        (perhaps r itself) while they do not fit. Returns whether any was preempted."""
        preempted = False
        while extra > free and running:
            victim = running.pop()  # the newest running request
            preempt(victim)
            preempted = True
            if victim is r:
                break
        if r.running:
            take(r, extra)
        return preempted

    def run_state(running: list[_Req]) -> tuple[bool, int, int]:
        """Whether a running request is mid-prefill, the fewest tokens one has left to
        generate, and the context tokens of all (what the step loop tracks as it goes)."""
        k, kv = horizon_steps, 0
        for r in running:
            if r.computed < r.prefill_len:
                return True, 0, 0
            if r.target - r.generated < k:
                k = r.target - r.generated
            kv += r.computed
        return False, k, kv

    while finished < total and clock <= horizon_s:
        while nxt < total and order[nxt].arrival <= clock:
            waiting.append(order[nxt])
            nxt += 1
        if not running and not waiting:
            clock = order[nxt].arrival
            continue
        budget = budget_max
        long_cap = threshold if len(running) + len(waiting) > 1 else budget_max
        preempted = skipped = False
        decode_kv = decode_seqs = prefill_tokens = prefill_seqs = 0
        pairs = 0.0
        # Running requests first, in order. Preemption only takes running[-1], at or after r,
        # so the iteration stays valid and a victim is never one already scheduled: what this
        # step schedules is always a prefix of `running` (admitted requests are appended).
        for r in running:
            if budget <= 0:
                skipped = True  # out of tokens: the rest of `running` waits this step
                break
            computed = r.computed
            if computed >= r.prefill_len:  # a decode: one token
                if computed + 1 > r.cap:
                    preempted |= make_room(r, extra_blocks(r, computed + 1), running)
                    if not r.running:
                        break  # r was the last one left
                budget -= 1
                decode_seqs += 1
                decode_kv += computed
            else:
                need = min(r.prefill_len - computed, budget, long_cap)
                if computed + need > r.cap:
                    preempted |= make_room(r, extra_blocks(r, computed + need), running)
                    if not r.running:
                        break
                budget -= need
                prefill_seqs += 1
                prefill_tokens += need
                pairs += need * (computed + need / 2)
                r.chunk = need
        scheduled = decode_seqs + prefill_seqs
        while waiting and not preempted and len(running) < max_seqs and budget > 0:
            r = waiting[0]
            if not r.looked_up and r.computed == 0 and caching:
                lookup(r)
            remaining = r.prefill_len - r.computed
            if not chunked and remaining > budget:
                break
            need = min(remaining, budget, long_cap)
            extra = extra_blocks(r, r.computed + need)
            if extra > free:
                break
            waiting.popleft()
            take(r, extra)
            budget -= need
            running.append(r)
            r.running = True
            if r.sched_s != r.sched_s:  # NaN: first time scheduled
                r.sched_s = clock
            scheduled += 1
            prefill_seqs += 1  # a waiting request always has prompt left to compute
            prefill_tokens += need
            pairs += need * (r.computed + need / 2)
            r.chunk = need
        if not scheduled:  # blocked on memory with nothing running: cannot happen if start succeeded
            clock = order[nxt].arrival if nxt < total else clock + 1.0
            continue
        dt = step_s(decode_seqs, decode_kv, prefill_tokens, prefill_seqs, pairs) * noise
        step_start = clock
        clock += dt
        any_done = mid_prefill = False
        after_previous_step = 0  # decodes whose last token came at step_start: one shared gap
        # Over the requests still running after the step (see run_state): the fewest tokens
        # left, and the context tokens (each decode adds one; completions are taken off).
        k, kv = horizon_steps, decode_kv + decode_seqs
        for r in (running[:scheduled] if skipped else running):
            computed = r.computed
            if computed >= r.prefill_len:  # a decode: one token
                r.computed = computed = computed + 1
                last = r.last_s
                if last == step_start:
                    after_previous_step += 1
                else:
                    single_gaps.append(clock - last)
                r.last_s = clock
                r.generated = generated = r.generated + 1
                left = r.target - generated
                if left <= 0:
                    r.done_s = clock
                    r.running = False
                    any_done = True
                    release(r)
                    finished += 1
                    kv -= computed
                elif left < k:
                    k = left
                continue
            r.computed = computed = computed + r.chunk
            if computed < r.prefill_len:
                mid_prefill = True
                continue  # a prefill chunk that does not finish the prompt emits nothing
            if caching and not r.registered:
                register(r)
            if r.generated == 0:
                r.first_s = clock
            else:
                single_gaps.append(clock - r.last_s)
            r.last_s = clock
            r.generated = generated = r.generated + 1
            left = r.target - generated
            if left <= 0:
                r.done_s = clock
                r.running = False
                any_done = True
                release(r)
                finished += 1
            else:
                if left < k:
                    k = left
                kv += computed
        if after_previous_step:
            shared_gaps.append(clock - step_start)
            shared_counts.append(after_previous_step)
        if any_done:
            running = [r for r in running if r.running]
        if skipped and skip_decode_runs:  # some running requests were not in this step
            mid_prefill, k, kv = run_state(running)
        # Advance runs of decode-only steps in closed form while nothing can change them.
        while skip_decode_runs and running and not mid_prefill:
            can_admit = len(running) < max_seqs and (waiting or nxt < total)
            if waiting and can_admit:
                break
            if k < MIN_RUN:  # k: up to the first completion
                break
            m = len(running)
            # Memory: stop before the first step whose new blocks no longer fit (each sequence
            # needs at most k // bs + 1 new blocks; the exact count only when that may not fit).
            if m * (k // bs + 1) > free:
                k = _steps_that_fit([r.cap - r.computed for r in running], k, free, bs)
                if k < MIN_RUN:
                    break
            pieces = perf.decode_segments(m, float(kv), k)
            # A step that starts before the next arrival cannot see it: the run takes every step
            # that starts before it (the stepwise loop admits arrivals at a step's start).
            limit = (order[nxt].arrival - clock) if can_admit and nxt < total else inf
            done_steps, elapsed = 0, 0.0
            taken: list[tuple[float, float, int, int]] = []
            for first, end, a, b in pieces:
                a, b = a * noise, b * noise
                steps = end - first
                last_start = elapsed + a * (steps - 1) + b * (steps - 1) * (steps - 2) / 2
                c = steps if last_start < limit else _steps_starting_before(a, b, steps, limit - elapsed)
                if c:
                    taken.append((a, b, c, m))
                    elapsed += a * c + b * c * (c - 1) / 2
                    done_steps = first + c
                if c < steps:
                    break
            if done_steps < MIN_RUN:
                break
            runs.extend(taken)
            clock += elapsed
            run_k, k, kv = k, horizon_steps, kv + m * done_steps
            any_done = False
            for r in running:
                r.computed = computed = r.computed + done_steps
                r.generated = generated = r.generated + done_steps
                r.last_s = clock
                if computed > r.cap:  # a running request holds its fixed blocks already
                    grow = math.ceil((computed - r.cap) / bs)
                    r.cap += grow * bs
                    r.private += grow
                    free -= grow
                    if free < cache.evictable_blocks:
                        cache.evict_until(free - cache.evictable_blocks)
                    if free < low_free[0]:
                        low_free[0] = free
                left = r.target - generated
                if left <= 0:
                    r.done_s = clock
                    r.running = False
                    any_done = True
                    release(r)
                    finished += 1
                    kv -= computed
                elif left < k:
                    k = left
            if done_steps < run_k:
                break  # stopped by an arrival or by memory: a plain step comes next
            if any_done:
                running = [r for r in running if r.running]
            if nxt < total and order[nxt].arrival <= clock:
                break

    # Token times as the client sees them: each one a frontend's way after its step.
    frontend = perf.profile.coefficients.frontend_s
    first_token = np.array([r.first_s for r in reqs]) + frontend
    done = np.array([r.done_s for r in reqs]) + frontend
    arrival = np.array([r.arrival for r in reqs])
    queue = np.array([r.sched_s for r in reqs])
    failed = np.isnan(done)
    run_values, run_weights = _expand_runs(runs)
    values = np.concatenate([run_values, np.asarray(shared_gaps, dtype=float),
                             np.asarray(single_gaps, dtype=float)])
    weights = np.concatenate([run_weights, np.asarray(shared_counts, dtype=np.int64),
                              np.ones(len(single_gaps), dtype=np.int64)])
    last = np.nanmax(done) if (~failed).any() else clock
    return ReplayResult(
        scheduled_s=arrival,
        ttft_s=first_token - arrival,
        e2e_s=done - arrival,
        output_tokens=np.array([r.generated if r.done_s == r.done_s else 0 for r in reqs]),  # NaN: not done
        failed=failed,
        itl_s=values,
        itl_weight=weights,
        wall_s=float(last - arrival[0]) if n else 0.0,
        engine_stats={"preemptions": float(preemptions), "kv_blocks": float(perf.num_blocks),
                      "prefix_cache_hit_rate": cache_hits / cache_queries if cache_queries else 0.0,
                      "refused_requests": float(len(refused)),
                      "kv_cache_usage_peak": 1.0 - low_free[0] / perf.num_blocks},
        queue_s=queue - arrival,
    )


def _steps_that_fit(room: list[float], k: int, free: float, bs: int) -> int:
    """The most decode steps (<= k) whose new blocks fit in `free`, given the tokens each
    sequence can still add to the blocks it holds."""
    def blocks(steps: int) -> int:
        return sum(math.ceil((steps - r) / bs) for r in room if steps > r)

    if blocks(k) <= free:
        return k
    lo, hi = 0, k
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if blocks(mid) <= free else (lo, mid - 1)
    return lo


def _steps_starting_before(a: float, b: float, steps: int, limit: float) -> int:
    """How many of the steps a, a + b, a + 2b, ... start strictly before `limit` (cumulative):
    step c starts at a * c + b * c * (c - 1) / 2."""
    def start(c: int) -> float:
        return a * c + b * c * (c - 1) / 2

    if limit <= 0:
        return 0
    if b > 0:
        c = int((-(a - b / 2) + math.sqrt((a - b / 2) ** 2 + 2 * b * limit)) / b)
    else:
        c = int(limit / a) if a > 0 else steps
    c = max(0, min(c, steps - 1))
    while c > 0 and start(c) >= limit:
        c -= 1
    while c + 1 < steps and start(c + 1) < limit:
        c += 1
    return c + 1


def _expand_runs(runs: list[tuple[float, float, int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Every step time of the decode runs (a + b * j for j < steps), each weighted by the
    sequences that saw it as their inter-token gap."""
    if not runs:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    a, b, steps, seqs = (np.array(col) for col in zip(*runs, strict=True))
    steps = steps.astype(np.int64)
    starts = np.cumsum(steps) - steps
    j = np.arange(int(steps.sum())) - np.repeat(starts, steps)
    return np.repeat(a, steps) + np.repeat(b, steps) * j, np.repeat(seqs.astype(np.int64), steps)

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

With async scheduling (vLLM's GPU default; `PerfModel.overlap_cpu`) the engine core schedules
a step while the one before it runs (`vllm/v1/engine/core.py::EngineCore.step_with_batch_queue`,
a batch queue of two, `VllmConfig.max_concurrent_batches`): step k+1's batch is fixed when step
k starts, so a request that arrives during step k can join step k+2 at the earliest, one step
later than without. The lag holds while the engine has running requests to carry into the next
batch; an idle engine schedules an arrival at once (`_Rank.admit_cutoff`).

Prefix caching works on the trace's block hashes: a prompt's leading blocks whose hashes are
cached are not computed again (the last prompt token always is) and share the cached blocks'
memory. Cached blocks nobody uses stay cached but count as free; allocation evicts them, least
recently used first. A request longer than `max_model_len` is refused, as vLLM answers 400.

Data parallelism (`simulate_data_parallel`): each DP rank is an engine core of its own (its
queue, KV blocks and prefix cache, `_Rank` here); the front end sends each request to the
least-loaded rank. Dense models' ranks run independently. An MoE model's ranks step in
lockstep (`DPEngineCoreProc`): every MoE layer exchanges tokens between all ranks, so a step
lasts as long as the slowest rank's, and a rank with nothing to run takes a dummy step while
any rank has work.

Speed: runs of decode-only steps in which nothing arrives, finishes or needs memory it cannot get
are advanced in one go (`_Rank.decode_runs`): over such a run a rank's step time is piecewise
affine in the step (`PerfModel.decode_segments`), and ranks in lockstep get their step times as
one array (`PerfModel.lockstep_decode_s`). Within a step, the running requests that decoded in
the step before ("lazy decodes", `_LazyDecodes`) are not walked one by one: they advance
together by one token a step (a rank-wide `tick`), two heaps say which one finishes or needs a
new KV block at which tick, and only the prompts being computed are handled one at a time. A
saturated engine's step then costs O(prompts + finishes + block allocations) instead of
O(running requests). Where vLLM's order of the running requests could matter (a request would
be preempted or left out of the step for want of budget, or a prompt sits before a decode in
running order) the step is taken one request at a time, in that order; both ways give the same
result (tests/workers/sim/test_scheduler.py). A step's path is the simulator's hot loop: a
Python call or object more per step shows in a replay's time (benchmarks/sim_equivalence.py
--time).
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Sequence
from itertools import islice

import numpy as np

from autotune.domain.records import ReplayResult
from autotune.workers.sim.perf import PerfModel, RankBatch

MIN_RUN = 2  # a run of one step is just a step
HORIZON_STEPS = 1 << 62
INF = float("inf")


class _Req:
    __slots__ = ("i", "arrival", "prompt", "target", "hashes", "generated", "computed",
                 "prefill_len", "private", "shared", "shared_blocks", "cap", "sched_s",
                 "first_s", "last_s", "done_s", "looked_up", "running", "registered", "chunk",
                 "seq", "lazy", "t0", "stamp")

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
        self.seq = 0  # its place in `running` (admission order)
        # A lazy decode (see _LazyDecodes): computed, generated and last_s as of its rank's
        # tick t0; its heap entries carry `stamp` and go stale when it changes.
        self.lazy = False
        self.t0 = self.stamp = 0


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


class _KvBlocks:
    """One rank's KV blocks and prefix cache. A request holds `private` blocks (its own, the
    fixed ones among them) and shares the cached ones of the hashes in `shared`; `cap` is the
    tokens they can take."""

    __slots__ = ("bs", "fixed", "hbt", "cache", "free", "low_free", "queries", "hits")

    def __init__(self, perf: PerfModel, hash_block_tokens: int) -> None:
        self.bs, self.fixed = perf.block_size, perf.fixed_blocks_per_seq
        self.hbt = max(hash_block_tokens, 1)
        self.cache = _PrefixCache(self.hbt / self.bs)
        self.free = float(perf.num_blocks)  # includes evictable cached blocks
        self.low_free = self.free  # the fewest free blocks seen: peak KV-cache usage
        self.queries = self.hits = 0  # prompt tokens looked up in the prefix cache, and found

    def extra(self, r: _Req, tokens: int) -> int:
        """Blocks r must add to hold `tokens` tokens (its first ones bring the fixed ones)."""
        over = tokens - r.cap
        grow = math.ceil(over / self.bs) if over > 0 else 0
        return grow + (self.fixed if not r.private else 0)

    def take(self, r: _Req, blocks: int) -> None:
        """r takes `blocks` more blocks, as `extra` counts them."""
        if blocks:
            r.cap += (blocks - (self.fixed if not r.private else 0)) * self.bs  # fixed blocks hold no tokens
            r.private += blocks
            self.free -= blocks
            self._after_alloc()

    def _after_alloc(self) -> None:
        cache = self.cache
        if self.free < cache.evictable_blocks:
            cache.evict_until(self.free - cache.evictable_blocks)
        if self.free < self.low_free:
            self.low_free = self.free

    def grow_to(self, r: _Req, tokens: int) -> None:
        """Running request r takes the blocks its `tokens` context tokens have outgrown (it
        holds its fixed blocks already)."""
        extra = math.ceil((tokens - r.cap) / self.bs)
        r.cap += extra * self.bs
        r.private += extra
        self.free -= extra
        self._after_alloc()

    def release(self, r: _Req) -> None:
        """r gives back its blocks (cached ones stay cached)."""
        self.free += r.private
        for h in r.shared:
            self.free += self.cache.release(h)
        r.private, r.shared, r.shared_blocks, r.cap = 0, [], 0.0, 0.0

    def register(self, r: _Req) -> None:
        """Its prompt is computed: its full hashed blocks become cached, shared from now on."""
        cache, hbt = self.cache, self.hbt
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
            keep = max(0, math.ceil(r.cap / self.bs - r.shared_blocks)) + self.fixed
            self.free += r.private - keep
            r.private = keep
            r.cap = ((keep - self.fixed) + r.shared_blocks) * self.bs

    def lookup(self, r: _Req) -> None:
        """r's prompt (before it is computed) finds its leading blocks in the prefix cache:
        those it shares and need no computing."""
        cache = self.cache
        r.looked_up = True
        hit = 0
        for h in r.hashes:
            if h not in cache:
                break
            hit += 1
        hit_tokens = min(int(hit * self.hbt // self.bs) * self.bs, r.prefill_len - 1) if hit else 0
        self.queries += r.prefill_len
        self.hits += hit_tokens
        if hit_tokens:
            for h in r.hashes[:hit]:
                self.free -= cache.acquire(h)
            r.shared = list(r.hashes[:hit])
            r.shared_blocks = hit * cache.blocks_per_hash
            r.cap = r.shared_blocks * self.bs
            r.computed = hit_tokens


class _GapLog:
    """The inter-token gaps a rank has seen: decode runs as pieces (step j of a piece took
    a + b * j for each of its seqs sequences), gaps of one step seen by several sequences,
    and gaps of one sequence each."""

    __slots__ = ("runs", "shared", "shared_counts", "single")

    def __init__(self) -> None:
        self.runs: list[tuple[float, float, int, int]] = []  # a, b, steps, seqs
        self.shared: list[float] = []  # ... each seen by shared_counts[i] sequences
        self.shared_counts: list[int] = []
        self.single: list[float] = []

    def add_shared(self, gap: float, decodes: int) -> None:
        """One step's gap, seen by `decodes` sequences that decoded in the step before too."""
        self.shared.append(gap)
        self.shared_counts.append(decodes)


_Entry = tuple[int, int, int, _Req]  # (tick, seq, stamp, request): ties go in running order


class _LazyDecodes:
    """One rank's lazy decodes (module docstring, "Speed"): the running requests that decoded in
    the last step, advancing together by one token a step without being touched. A lazy
    decode's counters (computed, generated, last_s) are as of tick t0; its heap entries carry
    its stamp and go stale when that changes."""

    __slots__ = ("tick", "n", "kv", "last", "newest_seq", "_finishes", "_blocks")

    def __init__(self) -> None:
        self.tick = 0  # the steps they have taken
        self.n = self.kv = 0  # how many there are, and their context tokens
        self.last = float("nan")  # the end of their last step
        self.newest_seq = -1  # the newest one's seq (at least)
        self._finishes: list[_Entry] = []  # by the tick of its last token
        self._blocks: list[_Entry] = []  # by the tick it needs a block (join)

    def context(self, r: _Req) -> int:
        """r's context tokens now: a lazy decode's counters lag by the steps since it joined."""
        return r.computed + self.tick - r.t0 if r.lazy else r.computed

    def join(self, r: _Req) -> None:
        """r decoded in the step that just ended: from now on it advances without being touched.
        Its block entry's tick is the first at which it needs a block before a step
        (_Rank._schedule_lazily), and the last at which it needs none after a run of steps
        (_Rank.advance)."""
        r.lazy, r.t0 = True, self.tick
        r.stamp = stamp = r.stamp + 1
        heapq.heappush(self._finishes, (self.tick + r.target - r.generated, r.seq, stamp, r))
        self.push_block(r)
        self.n += 1
        self.kv += r.computed
        if r.seq > self.newest_seq:
            self.newest_seq = r.seq

    def leave(self, r: _Req) -> None:
        """Bring a lazy decode's counters up to date; its heap entries go stale."""
        d = self.tick - r.t0
        if d:
            r.computed += d
            r.generated += d
            r.last_s = self.last
        r.lazy = False
        r.stamp += 1
        self.n -= 1
        self.kv -= r.computed

    def settle(self, running: dict[_Req, None]) -> None:
        """Every lazy decode among `running` leaves: none is left."""
        for r in running:
            if r.lazy:
                self.leave(r)
        self._finishes.clear()
        self._blocks.clear()
        self.newest_seq = -1

    def step(self, steps: int, clock: float) -> list[_Req]:
        """They all took `steps` more steps, the last ending at `clock`: take out those whose
        last token that was, in running order."""
        self.tick = tick = self.tick + steps
        self.kv += self.n * steps
        self.last = clock
        heap = self._finishes
        return _pop_live(heap, tick) if heap and heap[0][0] <= tick else []

    def push_block(self, r: _Req) -> None:
        """r's block entry (join), unless the blocks it holds take it to its last token."""
        if r.computed + r.target - r.generated > r.cap:  # both counters lag alike
            heapq.heappush(self._blocks, (r.t0 + math.floor(r.cap - r.computed), r.seq, r.stamp, r))

    def pop_block_needs(self, through: int) -> list[_Req]:
        """Take out the lazy decodes whose block entry's tick is `through` or before."""
        heap = self._blocks
        return _pop_live(heap, through) if heap and heap[0][0] <= through else []

    def next_finish(self) -> int:
        """The fewest tokens a lazy decode has left (HORIZON_STEPS if none)."""
        heap = self._finishes
        while heap and (not heap[0][3].lazy or heap[0][2] != heap[0][3].stamp):
            heapq.heappop(heap)
        return heap[0][0] - self.tick if heap else HORIZON_STEPS


def _pop_live(heap: list[_Entry], through: int) -> list[_Req]:
    """Pop a heap's entries up to tick `through`: their requests, in order, where still live
    (stale entries are dropped)."""
    out = []
    while heap and heap[0][0] <= through:
        _, _, stamp, r = heapq.heappop(heap)
        if r.lazy and stamp == r.stamp:
            out.append(r)
    return out


class _Rank:
    """One engine core's scheduler (the whole engine, or one DP rank): its queue and running
    requests, its KV blocks (`_KvBlocks`) and the inter-token gaps it has seen (`_GapLog`).
    Each step is built and completed lazily where it can be (`_LazyDecodes`), else one request
    at a time."""

    lazy_decodes = True  # False: every step one request at a time (the reference, in tests)

    def __init__(self, perf: PerfModel, hash_block_tokens: int, noise: float) -> None:
        # Fewer than 30 attributes (KV blocks, lazy decodes and gaps kept apart): past 30,
        # CPython 3.11 stops sharing an instance's dict keys and every attribute access slows.
        s = perf.shape
        self.perf, self.noise = perf, noise
        self.budget_max, self.max_seqs = s.max_num_batched_tokens, s.max_num_seqs
        self.chunked, self.caching = s.enable_chunked_prefill, s.enable_prefix_caching
        self.threshold = (s.long_prefill_token_threshold if s.long_prefill_token_threshold > 0
                          else self.budget_max)
        self.blocks = _KvBlocks(perf, hash_block_tokens)
        self.waiting: deque[_Req] = deque()
        self.running: dict[_Req, None] = {}  # in admission order; the newest is preempted first
        self.clock = 0.0
        self.async_lag = perf.overlap_cpu  # async scheduling: batches formed one step ahead
        self.step_start = 0.0  # when the step that ended at `clock` started
        self.finished = self.preemptions = 0
        self.gaps = _GapLog()
        # The step being built and completed (see schedule and complete).
        self._scheduled = 0
        self._skipped = False
        # After a step, over the requests still running: whether one is mid-prefill, the fewest
        # tokens one has left to generate, and their context tokens (decode runs start from it).
        self.mid_prefill, self.k, self.kv = False, HORIZON_STEPS, 0
        # The running requests fall in three: the lazy decodes, the prompts being computed and
        # the stragglers (decodes that missed the last step, out of token budget).
        self.lazy = _LazyDecodes()
        self.prefilling: list[_Req] = []  # in running order
        self.stragglers = 0
        self._seq = 0
        self._lazy_step = False  # whether the step being built was built lazily

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting)

    def load_score(self) -> float:
        """How loaded the front end thinks this rank is (DPLBAsyncMPClient)."""
        waiting = len(self.waiting)
        score = float(waiting + len(self.running))
        if waiting:  # a queue on a rank short of KV drains slowly
            usage = 1.0 - self.blocks.free / self.perf.num_blocks
            score += waiting * 6.0 * max(0.0, usage - 0.5)
        return score

    # --- finishing and preempting -----------------------------------------------------------

    def _finish(self, r: _Req, clock: float) -> None:
        """r's last token came at `clock`: it leaves `running` and its blocks go back (cached
        ones stay cached)."""
        r.done_s = clock
        r.running = False
        del self.running[r]
        self.blocks.release(r)
        self.finished += 1

    def _preempt(self, victim: _Req) -> None:
        """Recompute: victim (already taken off `running`) goes back to the front of the queue."""
        victim.running = False
        self.blocks.release(victim)
        victim.computed = 0
        victim.prefill_len = victim.prompt + victim.generated
        victim.looked_up = False
        self.waiting.appendleft(victim)
        self.preemptions += 1

    def _make_room(self, r: _Req, extra: int) -> None:
        """Give running request r `extra` more blocks, preempting the newest running requests
        (perhaps r itself) while they do not fit."""
        running, blocks = self.running, self.blocks
        while extra > blocks.free and running:
            victim = running.popitem()[0]  # the newest running request
            self._preempt(victim)
            if victim is r:
                break
        if r.running:
            blocks.take(r, extra)

    def _run_state(self) -> None:
        """mid_prefill, k and kv recomputed over all running requests."""
        k, kv = HORIZON_STEPS, 0
        for r in self.running:
            if r.computed < r.prefill_len:
                self.mid_prefill, self.k, self.kv = True, 0, 0
                return
            if r.target - r.generated < k:
                k = r.target - r.generated
            kv += r.computed
        self.mid_prefill, self.k, self.kv = False, k, kv

    # --- lazy decodes ------------------------------------------------------------------------

    def _settle(self) -> None:
        """Every request up to date, for a step taken one request at a time."""
        self.lazy.settle(self.running)
        self.prefilling = []

    def _relazify(self) -> None:
        """After a step or run taken one request at a time: the decodes that took it go lazy
        again; those it skipped (out of token budget) are stragglers until they step."""
        lazy, clock = self.lazy, self.clock
        self.prefilling, self.stragglers = [], 0
        for r in self.running:
            if r.computed < r.prefill_len:
                self.prefilling.append(r)
            elif r.last_s == clock:
                lazy.join(r)
            else:
                self.stragglers += 1
        lazy.last = clock

    def _end(self, r: _Req, clock: float) -> None:
        """A lazy decode's last token came at `clock`."""
        self.lazy.leave(r)
        self._finish(r, clock)

    # --- one step --------------------------------------------------------------------------

    def admit_cutoff(self, clock: float) -> float:
        """The latest arrival the step starting at `clock` can admit: with async scheduling,
        where this rank stepped without a pause and has running requests, its batch was fixed
        when the step before it started (module docstring); else `clock`."""
        if self.async_lag and self.running and self.clock == clock:
            return self.step_start
        return clock

    def schedule(self, clock: float) -> RankBatch | None:
        """Build the step starting at `clock` (arrivals up to it are in `waiting`; those after
        `admit_cutoff` wait another step): the batch, or None if nothing could be scheduled."""
        cutoff = self.admit_cutoff(clock)
        long_cap = (self.threshold if len(self.running) + len(self.waiting) > 1
                    else self.budget_max)
        preemptions = self.preemptions
        self._skipped = False
        batch = self._schedule_lazily(long_cap)
        self._lazy_step = batch is not None
        if batch is None:
            self._settle()
            batch = self._schedule_one_by_one(long_cap)
        if self.waiting and self.preemptions == preemptions:  # a step that preempts admits nobody
            batch = self._admit(batch, clock, cutoff, long_cap)
        self._scheduled = scheduled = batch.decode_seqs + batch.prefill_seqs
        if not scheduled:
            if not self._lazy_step:
                self._relazify()
            return None
        return batch

    def _admit(self, batch: RankBatch, clock: float, cutoff: float, long_cap: int
               ) -> RankBatch:
        """Waiting requests that arrived by `cutoff` join the running requests' batch while
        seats, tokens and blocks last: the step's batch (the same one where none joins)."""
        running, waiting, blocks = self.running, self.waiting, self.blocks
        prefill_seqs, prefill_tokens = batch.prefill_seqs, batch.prefill_tokens
        pairs = batch.prefill_attn_pairs
        budget = self.budget_max - batch.decode_seqs - prefill_tokens  # one token a decode
        while waiting and len(running) < self.max_seqs and budget > 0:
            r = waiting[0]
            if r.arrival > cutoff:
                break
            if not r.looked_up and r.computed == 0 and self.caching:
                blocks.lookup(r)
            remaining = r.prefill_len - r.computed
            if not self.chunked and remaining > budget:
                break
            need = min(remaining, budget, long_cap)
            extra = blocks.extra(r, r.computed + need)
            if extra > blocks.free:
                break
            waiting.popleft()
            blocks.take(r, extra)
            budget -= need
            r.seq, self._seq = self._seq, self._seq + 1
            running[r] = None
            self.prefilling.append(r)
            r.running = True
            if r.sched_s != r.sched_s:  # NaN: first time scheduled
                r.sched_s = clock
            prefill_seqs += 1  # a waiting request always has prompt left to compute
            prefill_tokens += need
            pairs += need * (r.computed + need / 2)
            r.chunk = need
        if prefill_seqs == batch.prefill_seqs:
            return batch
        return RankBatch(batch.decode_seqs, batch.decode_kv_tokens, prefill_tokens, prefill_seqs,
                         pairs)

    def _schedule_lazily(self, long_cap: int) -> RankBatch | None:
        """The running requests' batch for the step where nothing needs them one by one: no
        stragglers, every lazy decode before every prompt in running order, the budget and the
        free blocks enough for all. None where the step must be taken one by one (nothing
        changed but the block heap, which _settle rebuilds)."""
        prefilling, lazy, blocks = self.prefilling, self.lazy, self.blocks
        if (not self.lazy_decodes or self.stragglers
                or (prefilling and prefilling[0].seq < lazy.newest_seq)):
            return None
        decodes, tick = lazy.n, lazy.tick
        budget = self.budget_max - decodes
        if budget < 0:
            return None
        # Decodes whose next token needs a new block, and each prompt's next chunk.
        due = lazy.pop_block_needs(tick)
        grow = [blocks.extra(r, r.computed + tick - r.t0 + 1) for r in due]
        need_blocks = sum(grow)
        chunks = []
        for r in prefilling:
            if budget <= 0:
                return None  # out of tokens: the rest of `running` would be skipped
            need = min(r.prefill_len - r.computed, budget, long_cap)
            extra = blocks.extra(r, r.computed + need) if r.computed + need > r.cap else 0
            chunks.append(extra)
            need_blocks += extra
            budget -= need
            r.chunk = need
        if need_blocks > blocks.free:
            return None  # someone would be preempted
        if due:
            for r, extra in zip(due, grow, strict=True):
                blocks.take(r, extra)
                lazy.push_block(r)
        pairs = 0.0
        tokens = 0
        for r, extra in zip(prefilling, chunks, strict=True):
            if extra:
                blocks.take(r, extra)
            tokens += r.chunk
            pairs += r.chunk * (r.computed + r.chunk / 2)
        return RankBatch(decodes, lazy.kv, tokens, len(prefilling), pairs)

    def _schedule_one_by_one(self, long_cap: int) -> RankBatch:
        """The running requests' batch for the step, one request at a time in running order, as
        vLLM's scheduler walks them (those it skips, out of tokens, set `_skipped`)."""
        running = self.running
        budget = self.budget_max
        decode_kv = decode_seqs = prefill_seqs = prefill_tokens = 0
        pairs = 0.0
        # Running requests first, in order. Preemption only takes the newest running request,
        # at or after r, so a victim is never one already scheduled: what this step schedules
        # is always a prefix of `running` (admitted requests are added at its end).
        for r in list(running):
            if not r.running:
                break  # preempted by one before it: so is every one after it
            if budget <= 0:
                self._skipped = True  # out of tokens: the rest of `running` waits this step
                break
            computed = r.computed
            if computed >= r.prefill_len:  # a decode: one token
                if computed + 1 > r.cap:
                    self._make_room(r, self.blocks.extra(r, computed + 1))
                    if not r.running:
                        break  # r was the last one left
                budget -= 1
                decode_seqs += 1
                decode_kv += computed
            else:
                need = min(r.prefill_len - computed, budget, long_cap)
                if computed + need > r.cap:
                    self._make_room(r, self.blocks.extra(r, computed + need))
                    if not r.running:
                        break
                budget -= need
                prefill_seqs += 1
                prefill_tokens += need
                pairs += need * (computed + need / 2)
                r.chunk = need
        return RankBatch(decode_seqs, decode_kv, prefill_tokens, prefill_seqs, pairs)

    def complete(self, batch: RankBatch, step_start: float, clock: float) -> None:
        """The step scheduled at step_start ends at `clock`: its tokens are out."""
        self.clock, self.step_start = clock, step_start
        if self._lazy_step:
            self._complete_lazily(step_start, clock)
        else:
            self._complete_one_by_one(batch, step_start, clock)
            self._relazify()

    def _complete_lazily(self, step_start: float, clock: float) -> None:
        """A step built by _schedule_lazily: every lazy decode took one token (one shared gap),
        those whose last token it was finish, and the prompts are handled one by one."""
        lazy = self.lazy
        decodes = lazy.n
        if decodes:
            if step_start == lazy.last:
                self.gaps.add_shared(clock - step_start, decodes)
            else:  # they missed the steps between (a lockstep rank that could not schedule)
                self.gaps.single.extend([clock - lazy.last] * decodes)
        for r in lazy.step(1, clock):
            self._end(r, clock)
        mid_prompt = []
        for r in self.prefilling:
            left = self._chunk_done(r, clock)
            if left is None:
                mid_prompt.append(r)
            elif left > 0:
                lazy.join(r)
        self.prefilling = mid_prompt
        self.mid_prefill, self.k, self.kv = bool(mid_prompt), lazy.next_finish(), lazy.kv

    def _complete_one_by_one(self, batch: RankBatch, step_start: float, clock: float) -> None:
        """A step built by _schedule_one_by_one, its requests walked in running order."""
        running, scheduled, skipped = self.running, self._scheduled, self._skipped
        mid_prefill = False
        after_previous_step = 0  # decodes whose last token came at step_start: one shared gap
        single_gaps = self.gaps.single
        # Over the requests still running after the step (see _run_state): the fewest tokens
        # left, and the context tokens (each decode adds one; completions are taken off).
        k, kv = HORIZON_STEPS, batch.decode_kv_tokens + batch.decode_seqs
        for r in list(islice(running, scheduled) if skipped else running):
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
                    self._finish(r, clock)
                    kv -= computed
                elif left < k:
                    k = left
                continue
            after_prompt = self._chunk_done(r, clock)
            if after_prompt is None:
                mid_prefill = True
            elif after_prompt > 0:
                if after_prompt < k:
                    k = after_prompt
                kv += r.computed
        if after_previous_step:
            self.gaps.add_shared(clock - step_start, after_previous_step)
        self.mid_prefill, self.k, self.kv = mid_prefill, k, kv
        if skipped:  # some running requests were not in this step
            self._run_state()

    def _chunk_done(self, r: _Req, clock: float) -> int | None:
        """r computed its prompt chunk in the step that ended at `clock`. None while its prompt
        is unfinished (such a chunk emits nothing). Once its prompt (or, after a preemption,
        its recomputation) is computed, its blocks join the prefix cache and it emits a token:
        the tokens it has left, and with none left it finishes."""
        r.computed = computed = r.computed + r.chunk
        if computed < r.prefill_len:
            return None
        if self.caching and not r.registered:
            self.blocks.register(r)
        if r.generated == 0:
            r.first_s = clock
        else:
            self.gaps.single.append(clock - r.last_s)
        r.last_s = clock
        r.generated = generated = r.generated + 1
        left = r.target - generated
        if left <= 0:
            self._finish(r, clock)
        return left

    def run_steps(self) -> int:
        """How many decode-only steps this rank can take in one go (0: none): nobody is
        mid-prefill or waits with room to be admitted; up to the first completion, and while
        every step's new blocks fit."""
        running = self.running
        if not running or self.mid_prefill:
            return 0
        if self.waiting and len(running) < self.max_seqs:
            return 0
        k = self.k
        if k < MIN_RUN:
            return 0
        # Memory: stop before the first step whose new blocks no longer fit (each sequence
        # needs at most k // bs + 1 new blocks; the exact count only when that may not fit).
        blocks = self.blocks
        if len(running) * (k // blocks.bs + 1) > blocks.free:
            context = self.lazy.context
            k = _steps_that_fit([r.cap - context(r) for r in running], k, blocks.free, blocks.bs)
        return k if k >= MIN_RUN else 0

    def advance(self, steps: int, clock: float, last_start: float) -> None:
        """Every running request decodes `steps` tokens, the last in the step from last_start
        to `clock`."""
        self.clock, self.step_start = clock, last_start
        if self.stragglers or not self.lazy_decodes:
            self._settle()
            self._advance_one_by_one(steps, clock)
            self._relazify()
            return
        lazy = self.lazy
        # Those that finished (all at the run's last tick: a run ends at the first finish) and
        # those that outgrew their blocks (join: past their entry's tick), each in running
        # order; where there are both, blocks are taken and freed in running order, as one by
        # one.
        done = lazy.step(steps, clock)
        grow = lazy.pop_block_needs(lazy.tick - 1)
        if grow and done:
            growing, ending = set(grow), set(done)
            for r in sorted(growing | ending, key=_by_seq):
                if r in growing:
                    self.blocks.grow_to(r, lazy.context(r))
                if r in ending:
                    self._end(r, clock)
                else:
                    lazy.push_block(r)
        else:
            for r in grow:
                self.blocks.grow_to(r, lazy.context(r))
                lazy.push_block(r)
            for r in done:
                self._end(r, clock)
        self.k, self.kv = lazy.next_finish(), lazy.kv

    def _advance_one_by_one(self, steps: int, clock: float) -> None:
        running, blocks = self.running, self.blocks
        k, kv = HORIZON_STEPS, self.kv + len(running) * steps
        for r in list(running):
            r.computed = computed = r.computed + steps
            r.generated = generated = r.generated + steps
            r.last_s = clock
            if computed > r.cap:
                blocks.grow_to(r, computed)
            left = r.target - generated
            if left <= 0:
                self._finish(r, clock)
                kv -= computed
            elif left < k:
                k = left
        self.k, self.kv = k, kv

    def decode_runs(self, next_arrival: float, more_arrivals: bool,
                    stop_at_finish: bool = False, arrival_is_mine: bool = False) -> None:
        """Advance runs of decode-only steps in closed form while nothing can change them (see
        run_steps; a step that starts at or after next_arrival could admit it). Moves clock.
        stop_at_finish: return after the run that finishes a request (closed loop: its client
        sends the next one, an arrival the caller must learn of before the next run).
        arrival_is_mine: the next arrival comes to this rank (one engine core), so with async
        scheduling the run also takes the first step starting at or after it, whose batch was
        fixed before it (`admit_cutoff`). Not for DP ranks: where an arrival goes depends on every
        rank's state when it arrives."""
        noise = self.noise
        finished = self.finished
        lag_step = arrival_is_mine and self.async_lag
        while k := self.run_steps():
            m = len(self.running)
            pieces = self.perf.decode_segments(m, float(self.kv), k)
            # A step that starts before the next arrival cannot see it: the run takes every step
            # that starts before it (the stepwise loop admits arrivals at a step's start).
            can_admit = m < self.max_seqs and more_arrivals
            limit = (next_arrival - self.clock) if can_admit else INF
            done_steps, elapsed = 0, 0.0
            taken: list[tuple[float, float, int, int]] = []
            for first, end, a, b in pieces:
                a, b = a * noise, b * noise
                steps = end - first
                last_start = elapsed + a * (steps - 1) + b * (steps - 1) * (steps - 2) / 2
                c = steps if last_start < limit else _steps_starting_before(a, b, steps, limit - elapsed)
                cut = c < steps
                if cut and lag_step:
                    c += 1
                if c:
                    taken.append((a, b, c, m))
                    elapsed += a * c + b * c * (c - 1) / 2
                    done_steps = first + c
                if cut:
                    break
            if done_steps < MIN_RUN:
                break
            self.gaps.runs.extend(taken)
            a, b, c, _ = taken[-1]
            self.advance(done_steps, self.clock + elapsed, self.clock + elapsed - (a + b * (c - 1)))
            if done_steps < k or next_arrival <= self.clock:
                break  # stopped by an arrival or by memory: a plain step comes next
            if stop_at_finish and self.finished != finished:
                break


def _requests(arrival_s: np.ndarray, prompt_tokens: np.ndarray, output_tokens: np.ndarray,
              hash_ids: tuple[tuple[int, ...], ...], caching: bool, max_model_len: int
              ) -> tuple[list[_Req], list[_Req], int]:
    """All requests, those the engine accepts in arrival order, and how many it refuses."""
    # Python numbers once for the whole trace: indexing numpy arrays per request is slow.
    arrivals, prompts = np.asarray(arrival_s, dtype=float).tolist(), np.asarray(prompt_tokens).tolist()
    outputs = np.asarray(output_tokens).tolist()
    no_hashes: tuple[int, ...] = ()
    reqs = [_Req(i, arrivals[i], int(prompts[i]), max(1, int(outputs[i])),
                 hash_ids[i] if caching else no_hashes) for i in range(len(arrivals))]
    refused = 0
    for r in reqs:
        if r.prompt + r.target > max_model_len:  # vLLM answers 400: it never reaches the scheduler
            r.target = 0
            refused += 1
    return reqs, [r for r in reqs if r.target], refused


def simulate(perf: PerfModel, arrival_s: np.ndarray, prompt_tokens: np.ndarray,
             output_tokens: np.ndarray, hash_ids: tuple[tuple[int, ...], ...],
             hash_block_tokens: int, rng: np.random.Generator,
             horizon_s: float, skip_decode_runs: bool = True) -> ReplayResult:
    """Replay arrivals against the modelled engine. skip_decode_runs=False steps one engine
    step at a time (the reference the fast path is benchmarked and tested against)."""
    reqs, order, refused = _requests(arrival_s, prompt_tokens, output_tokens, hash_ids,
                                     perf.shape.enable_prefix_caching, perf.shape.max_model_len)
    noise = 1.0 + perf.profile.coefficients.noise_cv * rng.standard_normal()
    rank = _Rank(perf, hash_block_tokens, noise)
    total, nxt = len(order), 0
    step_s, waiting = perf.step_s, rank.waiting
    while rank.finished < total and rank.clock <= horizon_s:
        clock = rank.clock
        while nxt < total and order[nxt].arrival <= clock:
            waiting.append(order[nxt])
            nxt += 1
        if not rank.busy:
            rank.clock = order[nxt].arrival
            continue
        batch = rank.schedule(clock)
        if batch is None:  # blocked on memory with nothing running: cannot happen if start succeeded
            rank.clock = order[nxt].arrival if nxt < total else clock + 1.0
            continue
        rank.complete(batch, clock, clock + step_s(*batch) * noise)
        if skip_decode_runs:
            rank.decode_runs(order[nxt].arrival if nxt < total else INF, nxt < total,
                             arrival_is_mine=True)
    return _result(perf, reqs, [rank], refused)


def simulate_data_parallel(perf: PerfModel, ranks: int, lockstep: bool, arrival_s: np.ndarray,
                           prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                           hash_ids: tuple[tuple[int, ...], ...], hash_block_tokens: int,
                           rng: np.random.Generator, horizon_s: float,
                           skip_decode_runs: bool = True) -> ReplayResult:
    """Replay arrivals against `ranks` data-parallel engine cores of the modelled shape (perf:
    one rank's). Each request goes to the least-loaded rank (score as the DP front end,
    `vllm/v1/engine/core_client.py::DPLBAsyncMPClient.get_core_engine_for_request`, counts it:
    unfinished requests, plus waiting ones weighted by KV pressure; ties rotate). lockstep: the
    ranks of an MoE model step together (`vllm/v1/engine/core.py::DPEngineCoreProc
    .run_busy_loop`), each step priced by `PerfModel.lockstep_step_s`; otherwise they run
    independently, as vLLM runs a dense model's ranks (`EngineCoreProc`)."""
    reqs, order, refused = _requests(arrival_s, prompt_tokens, output_tokens, hash_ids,
                                     perf.shape.enable_prefix_caching, perf.shape.max_model_len)
    noise = 1.0 + perf.profile.coefficients.noise_cv * rng.standard_normal()
    group = [_Rank(perf, hash_block_tokens, noise) for _ in range(ranks)]
    total, nxt = len(order), 0
    lock_runs: list[tuple[np.ndarray, int]] = []  # lockstep decode runs: step times, sequences
    route = _Router(group)

    def finished() -> int:
        return sum(rank.finished for rank in group)

    if lockstep:
        clock = 0.0
        while finished() < total and clock <= horizon_s:
            while nxt < total and order[nxt].arrival <= clock:
                route(order[nxt])
                nxt += 1
            if not any(rank.busy for rank in group):
                clock = order[nxt].arrival
                continue
            end = _lockstep_step(perf, group, clock, noise)
            if end is None:  # blocked on memory: cannot happen, as above
                clock = order[nxt].arrival if nxt < total else clock + 1.0
                continue
            clock = end
            if skip_decode_runs:
                clock = _lockstep_decode_runs(perf, group, clock, noise, lock_runs,
                                              order[nxt].arrival if nxt < total else INF,
                                              nxt < total)
    else:
        while finished() < total:
            arrival = order[nxt].arrival if nxt < total else INF
            busy = [rank for rank in group if rank.busy]
            earliest = min(busy, key=lambda g: g.clock) if busy else None
            if earliest is None or arrival <= earliest.clock:
                target = route(order[nxt])
                nxt += 1
                if not target.running and len(target.waiting) == 1:  # it was idle until now
                    target.clock = max(target.clock, arrival)
                continue
            if earliest.clock > horizon_s:
                break
            clock = earliest.clock
            batch = earliest.schedule(clock)
            if batch is None:  # blocked on memory: cannot happen, as above
                earliest.clock = arrival if nxt < total else clock + 1.0
                continue
            earliest.complete(batch, clock, clock + perf.step_s(*batch) * noise)
            if skip_decode_runs:
                earliest.decode_runs(arrival, nxt < total)
    return _result(perf, reqs, group, refused, lock_runs)


class _Router:
    """The DP front end: each request to the least-loaded rank (`_Rank.load_score`), ties
    rotating from where the last search started."""

    def __init__(self, group: list[_Rank]) -> None:
        self.group, self.start = group, 0

    def __call__(self, r: _Req) -> _Rank:
        group, start = self.group, self.start
        ranks = len(group)
        best, best_score = group[start], INF
        for j in range(ranks):
            rank = group[(start + j) % ranks]
            score = rank.load_score()
            if score < best_score:
                best, best_score = rank, score
        self.start = (start + 1) % ranks
        best.waiting.append(r)
        return best


def _lockstep_step(perf: PerfModel, group: list[_Rank], clock: float, noise: float
                   ) -> float | None:
    """One step of lockstep ranks from `clock`: each busy rank schedules, the step lasts as its
    slowest rank's batch (`PerfModel.lockstep_step_s`); its end, or None where no rank could
    schedule anything (idle, or blocked on memory)."""
    batches = [rank.schedule(clock) if rank.busy else None for rank in group]
    if all(b is None for b in batches):
        return None
    end = clock + perf.lockstep_step_s(batches) * noise
    for rank, batch in zip(group, batches, strict=True):
        if batch is not None:
            rank.complete(batch, clock, end)
    return end


def _lockstep_decode_runs(perf: PerfModel, group: list[_Rank], clock: float, noise: float,
                          lock_runs: list[tuple[np.ndarray, int]], next_arrival: float,
                          more_arrivals: bool, stop_at_finish: bool = False) -> float:
    """Ranks in lockstep: advance runs of steps in which every busy rank only decodes (see
    `_Rank.run_steps`) in one go, up to the first completion on any rank and before the next
    arrival (it may go to any rank). stop_at_finish: as `_Rank.decode_runs`. Returns the new
    clock."""
    finished = sum(rank.finished for rank in group) if stop_at_finish else 0
    while True:
        busy = [rank for rank in group if rank.busy]
        if not busy:
            return clock
        k = min(rank.run_steps() for rank in busy)
        if not k:
            return clock
        seqs = [len(rank.running) for rank in busy]
        times = perf.lockstep_decode_s(seqs, [rank.kv for rank in busy], len(group) - len(busy),
                                       k) * noise
        ends = np.cumsum(times)
        # Steps that start before the next arrival (step j starts at ends[j] - times[j]).
        c = int(np.searchsorted(ends - times, next_arrival - clock)) if more_arrivals else k
        if c < MIN_RUN:
            return clock
        lock_runs.append((times[:c], sum(seqs)))
        last_start = clock + float(ends[c - 1] - times[c - 1])
        clock += float(ends[c - 1])
        for rank in busy:
            rank.advance(c, clock, last_start)
        if c < k or next_arrival <= clock:
            return clock
        if stop_at_finish and sum(rank.finished for rank in group) != finished:
            return clock


def _result(perf: PerfModel, reqs: list[_Req], group: list[_Rank], refused: int,
            lock_runs: Sequence[tuple[np.ndarray, int]] = ()) -> ReplayResult:
    """The replay's result: per request times as the client sees them (each token a frontend's
    way after its step), and the inter-token gaps of all ranks."""
    frontend = perf.profile.coefficients.frontend_s
    first_token = np.array([r.first_s for r in reqs]) + frontend
    done = np.array([r.done_s for r in reqs]) + frontend
    arrival = np.array([r.arrival for r in reqs])
    queue = np.array([r.sched_s for r in reqs])
    failed = np.isnan(done)
    runs = [piece for rank in group for piece in rank.gaps.runs]
    run_values, run_weights = _expand_runs(runs)
    values = np.concatenate([run_values] + [times for times, _ in lock_runs]
                            + [np.asarray(rank.gaps.shared, dtype=float) for rank in group]
                            + [np.asarray(rank.gaps.single, dtype=float) for rank in group])
    weights = np.concatenate([run_weights]
                             + [np.full(len(times), seqs, dtype=np.int64) for times, seqs in lock_runs]
                             + [np.asarray(rank.gaps.shared_counts, dtype=np.int64) for rank in group]
                             + [np.ones(len(rank.gaps.single), dtype=np.int64) for rank in group])
    last = np.nanmax(done) if (~failed).any() else max(rank.clock for rank in group)
    queries = sum(rank.blocks.queries for rank in group)
    return ReplayResult(
        scheduled_s=arrival,
        ttft_s=first_token - arrival,
        e2e_s=done - arrival,
        output_tokens=np.array([r.generated if r.done_s == r.done_s else 0 for r in reqs]),  # NaN: not done
        failed=failed,
        itl_s=values,
        itl_weight=weights,
        wall_s=float(last - arrival[0]) if len(reqs) else 0.0,
        engine_stats={
            "preemptions": float(sum(rank.preemptions for rank in group)),
            "kv_blocks": float(perf.num_blocks * len(group)),
            # Tokens per block as the engine runs it: a hybrid model's is raised from the asked
            # --block-size (vllm_defaults.resolved_hybrid_block_size).
            "kv_block_tokens": float(perf.block_size),
            "prefix_cache_hit_rate": (sum(rank.blocks.hits for rank in group) / queries
                                      if queries else 0.0),
            "refused_requests": float(refused),
            # The fullest rank's peak (vLLM reports each engine's usage).
            "kv_cache_usage_peak": max(1.0 - rank.blocks.low_free / perf.num_blocks
                                       for rank in group)},
        queue_s=queue - arrival,
    )


def _by_seq(r: _Req) -> int:
    return r.seq


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

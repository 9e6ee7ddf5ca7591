"""Parameter roles: what an engine argument is to the samplers, whichever space offers it.

The line sweep (autotune/search/line_sweep.py) moves the parallel layout, the step budget and the
sequence count first, judges a layout whose DP ranks step in lockstep at each long-prefill cap,
and keeps the requests in flight when it changes layout: it finds those parameters by role. A
role is what vLLM does with the argument, so it follows from the name rather than being declared
in each space file: a user's file gets the roles the built-in ones get.
"""

from __future__ import annotations

from enum import StrEnum

from autotune.domain import parallelism


class ParamRole(StrEnum):
    LAYOUT = "layout"  # the parallel layout: TP, DP and EP in one (domain/parallelism.py)
    STEP_BUDGET = "step_budget"  # the tokens one engine step may schedule
    CONCURRENCY = "concurrency"  # the sequences one engine core runs at once
    PREFILL_CAP = "prefill_cap"  # the most tokens a long prompt prefills in one step (0: no cap)


ROLES: dict[str, ParamRole] = {
    parallelism.PARAM: ParamRole.LAYOUT,
    "max_num_batched_tokens": ParamRole.STEP_BUDGET,
    "max_num_seqs": ParamRole.CONCURRENCY,
    "long_prefill_token_threshold": ParamRole.PREFILL_CAP,
}

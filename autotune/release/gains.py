"""The winner's gain over another config (a baseline, the incumbent), from confirmed figures only.

Both configs are re-run with the same arrival seeds (autotune.campaign.confirm), so the gain compares
like with like; the search measurement, picked for being high, never enters it. Two figures,
both in percent of the other config's confirmed mean:

    on the mean:  mean_w / mean_o - 1, +- the half-width of a two-sided 90% confidence interval
                  from the per-seed differences w_i - o_i (paired: a seed's runs share its
                  arrivals), t(0.95, k-1) * sd(d) / sqrt(k) / mean_o over the k shared seeds
    at the LCB:   lcb_w / mean_o - 1, the winner's one-sided 90% lower bound (the figure that
                  chose it) against the other's mean, as the quarterly decision compares them
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Student's t quantile (what scipy.stats.t.ppf computes) without importing scipy.stats,
# which adds 0.4 s to every command that reaches this module.
import scipy.special

from autotune.vocabulary import FailureClass, RecordState

CI_LEVEL = 0.90  # two-sided


@dataclass(frozen=True)
class Runs:
    """One config's confirmation runs (an autotune_confirmations row)."""

    seeds: tuple[int, ...]
    samples: tuple[float | None, ...]  # output tok/s per run; None: lost to the infrastructure
    mean_output_tok_s: float
    std_output_tok_s: float
    lcb_output_tok_s: float
    n: int

    @classmethod
    def of(cls, row: Any) -> Runs:
        """From a Confirmation row (or anything with its fields)."""
        return cls(tuple(row.seeds), tuple(row.samples), row.mean_output_tok_s,
                   row.std_output_tok_s, row.lcb_output_tok_s, row.n)


@dataclass(frozen=True)
class Gain:
    mean_pct: float  # the winner's confirmed mean over the other's, in percent
    mean_ci_pct: float | None  # 90% CI half-width of mean_pct, percentage points; None: < 2 pairs
    lcb_pct: float  # the winner's LCB over the other's confirmed mean, in percent
    pairs: int  # seeds both measured


def paired_differences(winner: Runs, other: Runs) -> list[float]:
    """w_i - o_i for each seed both configs measured (a run lost to the infrastructure has no
    pair)."""
    theirs = dict(zip(other.seeds, other.samples, strict=False))
    return [w - o for seed, w in zip(winner.seeds, winner.samples, strict=False)
            if w is not None and (o := theirs.get(seed)) is not None]


def half_width(diffs: Sequence[float]) -> float | None:
    """Half-width of the two-sided CI_LEVEL interval of the mean difference; None below 2."""
    k = len(diffs)
    if k < 2:
        return None
    mean = math.fsum(diffs) / k
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / (k - 1))
    return float(scipy.special.stdtrit(k - 1, 0.5 + CI_LEVEL / 2)) * sd / math.sqrt(k)


def gain(winner: Runs, other: Runs) -> Gain | None:
    """The winner's gain over `other`; None when the other's confirmed mean is 0 (it missed
    the SLO in every run: no ratio to give)."""
    if other.mean_output_tok_s <= 0:
        return None
    base = other.mean_output_tok_s
    diffs = paired_differences(winner, other)
    hw = half_width(diffs)
    return Gain(mean_pct=100.0 * (winner.mean_output_tok_s / base - 1.0),
                mean_ci_pct=None if hw is None else 100.0 * hw / base,
                lcb_pct=100.0 * (winner.lcb_output_tok_s / base - 1.0), pairs=len(diffs))


def single_gain_pct(winner_output_tok_s: float, other_output_tok_s: float) -> float | None:
    """Without confirmation: one search measurement over another (not like for like)."""
    if other_output_tok_s <= 0:
        return None
    return 100.0 * (winner_output_tok_s / other_output_tok_s - 1.0)


def mean_text(g: Gain) -> str:
    """e.g. '+5.1% ± 1.0%'."""
    return f"{g.mean_pct:+.1f}%" + ("" if g.mean_ci_pct is None else f" ± {g.mean_ci_pct:.1f}%")


def headline(g: Gain, other: str) -> str:
    """One sentence: the gain over `other` on the mean with its spread, and at the LCB."""
    spread = (f" (90% CI over {g.pairs} paired seeds)" if g.mean_ci_pct is not None
              else f" (no spread: {g.pairs} paired seed{'s' if g.pairs != 1 else ''})")
    return (f"{mean_text(g)} over {other} on the confirmed mean{spread}; {g.lcb_pct:+.1f}% at the "
            "winner's 90% lower confidence bound")


def not_confirmed(state: str, feasible: bool, failure_class: str | None,
                  confirmation_ran: bool) -> str:
    """Why a search trial's config has no confirmation of its own."""
    if not confirmation_ran:
        return "not confirmed (no confirmation ran)"
    if state == RecordState.REJECTED:
        return "not confirmed: rejected by a rule, never run"
    if state == RecordState.FAILED:
        return f"not confirmed: failed in the search ({failure_class or 'unknown'})"
    if not feasible:
        return f"not confirmed: {failure_class or FailureClass.SLO_MISS} in the search"
    return "not confirmed in this campaign"  # one confirmed before baselines were

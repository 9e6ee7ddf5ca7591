"""The end-of-campaign report in the terminal: trials, the winner beside the baselines, and
what to run next."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from rich.console import Console

from autotune.cli.render import comparison_table, confirmation_table, trial_table
from autotune.release import gains
from autotune.release.result import Baseline, CampaignResult, Spent
from autotune.search.spaces import accuracy
from autotune.storage import repo


def gain_lines(result: CampaignResult) -> list[str]:
    """The headline: the winner's gain over each baseline, saying which figures it is from."""
    if result.winner is None or not result.baselines:
        return []
    if result.winner.confirmed is None:
        return ["Winner's gain from single search measurements (no confirmation ran, so not "
                "checked against run-to-run noise): " + ", ".join(
                    _single_gain_text(b) for b in result.baselines)]
    runs = result.winner.confirmed
    return [f"Winner's gain, confirmed ({runs.n} runs each, seeds "
            f"{', '.join(map(str, runs.seeds))}):",
            *(f"  {_confirmed_gain_text(b)}" for b in result.baselines)]


def _single_gain_text(b: Baseline) -> str:
    label, gain = b.config.role, b.winner_gain
    if gain is not None and gain.search_pct is not None:
        return f"{gain.search_pct:+.1f}% over {label}"
    return f"none over {label} ({b.config.failure_class or 'slo miss'})"


def _confirmed_gain_text(b: Baseline) -> str:
    label, gain = b.config.role, b.winner_gain
    if gain is not None and gain.confirmed is not None:
        return gains.headline(gain.confirmed, label)
    if b.config.confirmed is not None:
        return f"over {label}: none to give (it missed the SLO in every re-run)"
    return f"over {label}: none to give ({b.config.not_confirmed})"


def print_campaign_result(console: Console, result: CampaignResult) -> None:
    console.print(trial_table(list(result.top_trials), _trials_title(result),
                              width=console.width))
    console.print(spent_line(result.spent))
    if result.confirmations:
        console.print(confirmation_table(result.confirmations))
    if result.decision:
        console.print(f"Decision: {result.decision}: {result.decision_note}", soft_wrap=True)
    winner = result.winner
    if result.winner_basis == repo.NONE_CONFIRMED:
        console.print("[bold red]No confirmed winner:[/] confirmation ran and no config kept a "
                      "lower confidence bound above 0 over its re-runs.")
        return
    if winner is None:
        console.print("[bold red]No feasible trial:[/] no config met the SLO "
                      f"{result.slo_ms}; loosen it or widen the search space.")
        return
    console.print(comparison_table(winner, result.baselines))
    for line in gain_lines(result):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print("Winner's engine arguments:")
    console.print("  " + " ".join(winner.engine_args), soft_wrap=True)
    numerics = accuracy.summary_line(list(result.winner_accuracy_affecting))
    if numerics:
        console.print(numerics, markup=False, highlight=False, soft_wrap=True)
    dep, exe = result.deployment, _executable()
    console.print("\nNext:")
    console.print(f"  {exe} publish --campaign {result.campaign} --deployment {dep}")
    console.print(f"  {exe} api --port 8787")
    console.print(f"  curl localhost:8787/v1/deployments/{dep}/config")
    console.print(f"  {exe} dashboard --port 8080", soft_wrap=True)


def _trials_title(result: CampaignResult) -> str:
    return (f"Top trials of {result.study} ({result.measured} measured on {result.backend}, "
            f"{result.rejected} rejected by interaction rules, "
            + (f"{result.screened} screened on {result.screen_backend}, " if result.screened
               else "")
            + f"{result.spent.wall_s:.0f} s)")


def spent_line(spent: Spent) -> str:
    """What the campaign spent against its budget, and why its search stopped."""
    limits = [f"{k.replace('_', ' ')} {v}" for k, v in spent.budget.items()]
    return (f"Spent {spent.gpu_hours:.4g} GPU-hours (trials and confirmation runs) in "
            f"{spent.wall_s:.0f} s; search stopped by "
            f"{(spent.stop_reason or 'nothing yet').replace('_', ' ')}"
            + (f" (budget: {', '.join(limits)})" if limits else ""))


def _executable() -> str:
    """How to call autotune from here: plain `autotune` when it is on PATH."""
    here = Path(sys.argv[0])
    on_path = shutil.which("autotune")
    if here.name == "autotune" and (not on_path or Path(on_path).resolve() != here.resolve()):
        return os.path.relpath(here)
    return "autotune"

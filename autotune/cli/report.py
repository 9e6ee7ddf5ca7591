"""The end-of-campaign report in the terminal: trials, the winner beside the baselines, and
what to run next."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from autotune.baselines import BASELINES
from autotune.cli.render import comparison_table, confirmation_table, trial_table
from autotune.engine_config import EngineConfig
from autotune.storage import repo
from autotune.storage.models import Campaign, Trial
from autotune.study import TrialRecord
from autotune.vocabulary import RecordState


def _row(t: Trial) -> dict[str, Any]:
    return {"number": t.number, "capacity": t.capacity_output_tok_s, "feasible": t.feasible,
            "failure": t.failure_class, "latency": t.latency, "config": t.engine_config}


def _record(t: Trial) -> TrialRecord:
    return TrialRecord(number=t.number, role=t.role, state=t.state, feasible=t.feasible,
                       capacity_output_tok_s=t.capacity_output_tok_s, config=t.engine_config,
                       latency=t.latency, failure_class=t.failure_class, fidelity=t.fidelity)


def print_campaign_result(console: Console, campaign: Campaign, url: str) -> None:
    trials = repo.measured_trials(campaign)  # a screening's simulated ones are not ranked here
    measured = [t for t in trials if t.state != RecordState.REJECTED]
    screened = len(campaign.trials) - len(trials)
    console.print(trial_table([_record(t) for t in sorted(
        measured, key=lambda t: -t.capacity_output_tok_s)[:10]],
        f"Top trials of {campaign.study_name} ({len(measured)} measured on {campaign.backend}, "
        f"{len(trials) - len(measured)} rejected by interaction rules, "
        + (f"{screened} screened on {campaign.screen_backend}, " if screened else "")
        + f"{campaign.wall_s or 0:.0f} s)"))
    console.print(spent_line(campaign))
    if campaign.confirmations:
        console.print(confirmation_table(campaign.confirmations))
    if campaign.decision:
        console.print(f"Decision: {campaign.decision}: {campaign.decision_note}", soft_wrap=True)
    chosen = repo.choose_winner(campaign)  # the confirmed winner where confirmation ran
    best = chosen.trial
    if chosen.basis == repo.NONE_CONFIRMED:
        console.print("[bold red]No confirmed winner:[/] confirmation ran and no config kept a "
                      "lower confidence bound above 0 over its re-runs.")
        return
    if best is None:
        console.print("[bold red]No feasible trial:[/] no config met the SLO "
                      f"{campaign.slo}; loosen it or widen the search space.")
        return
    rows = [("winner", _row(best))]
    for role in BASELINES:
        base = [t for t in trials if t.role == role]
        if base:
            rows.append((role, _row(base[0])))
    console.print(comparison_table(rows))
    console.print("Winner's engine arguments:")
    console.print("  " + " ".join(EngineConfig(**best.engine_config).to_cli_args()),
                  soft_wrap=True)
    dep, exe = campaign.deployment.name, _executable()
    console.print("\nNext:")
    console.print(f"  {exe} publish --campaign {campaign.name} --deployment {dep}")
    console.print(f"  {exe} api --port 8787")
    console.print(f"  curl localhost:8787/v1/deployments/{dep}/config")
    console.print(f"  {exe} dashboard --port 8080", soft_wrap=True)


def spent_line(campaign: Campaign) -> str:
    """What the campaign spent against its budget, and why its search stopped."""
    budget = campaign.budget or {}
    limits = [f"{k.replace('_', ' ')} {v}" for k, v in budget.items() if v is not None]
    return (f"Spent {campaign.gpu_hours or 0:.4g} GPU-hours (trials and confirmation runs) in "
            f"{campaign.wall_s or 0:.0f} s; search stopped by "
            f"{(campaign.stop_reason or 'nothing yet').replace('_', ' ')}"
            + (f" (budget: {', '.join(limits)})" if limits else ""))


def _executable() -> str:
    """How to call autotune from here: plain `autotune` when it is on PATH."""
    here = Path(sys.argv[0])
    on_path = shutil.which("autotune")
    if here.name == "autotune" and (not on_path or Path(on_path).resolve() != here.resolve()):
        return os.path.relpath(here)
    return "autotune"

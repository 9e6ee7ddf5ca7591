"""The end-of-campaign report in the terminal: trials, the winner beside the baselines, and
what to run next."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from autotune.cli.render import comparison_table, confirmation_table, trial_table
from autotune.domain.engine_config import EngineConfig
from autotune.release import gains
from autotune.search import accuracy
from autotune.search.baselines import BASELINES
from autotune.storage import repo
from autotune.storage.models import Campaign, Trial
from autotune.vocabulary import RecordState


def _row(t: Trial, campaign: Campaign) -> dict[str, Any]:
    """One column of the comparison: the search trial, and its config's confirmation runs."""
    conf = repo.confirmation_of(campaign, t.engine_config)
    return {"number": t.number, "capacity": t.capacity_output_tok_s, "feasible": t.feasible,
            "failure": t.failure_class, "latency": t.latency, "config": t.engine_config,
            "confirmed": gains.Runs.of(conf) if conf is not None else None,
            "not_confirmed": None if conf is not None else gains.not_confirmed(
                t.state, t.feasible, t.failure_class, bool(campaign.confirmations))}


def with_gains(rows: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """The winner's (first row's) gain over each other row: from confirmed figures where the
    winner was confirmed (none over an unconfirmed one), else from single measurements."""
    win = rows[0][1]
    for _, r in rows[1:]:
        if win["confirmed"] is not None:
            r["gain"] = (gains.gain(win["confirmed"], r["confirmed"])
                         if r["confirmed"] is not None else None)
        else:
            r["single_gain"] = (gains.single_gain_pct(win["capacity"], r["capacity"])
                                if r["feasible"] else None)
    return rows


def gain_lines(rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The headline: the winner's gain over each baseline, saying which figures it is from."""
    win = rows[0][1]
    if len(rows) < 2:
        return []
    if win["confirmed"] is None:
        return ["Winner's gain from single search measurements (no confirmation ran, so not "
                "checked against run-to-run noise): " + ", ".join(
                    f"{r['single_gain']:+.1f}% over {label}" if r.get("single_gain") is not None
                    else f"none over {label} ({r['failure'] or 'slo miss'})"
                    for label, r in rows[1:])]
    runs = win["confirmed"]
    lines = [f"Winner's gain, confirmed ({runs.n} runs each, seeds "
             f"{', '.join(map(str, runs.seeds))}):"]
    for label, r in rows[1:]:
        if r.get("gain") is not None:
            lines.append(f"  {gains.headline(r['gain'], label)}")
        elif r["confirmed"] is not None:
            lines.append(f"  over {label}: none to give (it missed the SLO in every re-run)")
        else:
            lines.append(f"  over {label}: none to give ({r['not_confirmed']})")
    return lines


def print_campaign_result(console: Console, campaign: Campaign, url: str) -> None:
    trials = repo.measured_trials(campaign)  # a screening's simulated ones are not ranked here
    measured = [t for t in trials if t.state != RecordState.REJECTED]
    screened = len(campaign.trials) - len(trials)
    console.print(trial_table([repo.trial_record(t) for t in sorted(
        measured, key=lambda t: -t.capacity_output_tok_s)[:10]],
        f"Top trials of {campaign.study_name} ({len(measured)} measured on {campaign.backend}, "
        f"{len(trials) - len(measured)} rejected by interaction rules, "
        + (f"{screened} screened on {campaign.screen_backend}, " if screened else "")
        + f"{campaign.wall_s or 0:.0f} s)", width=console.width))
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
    rows = [("winner", _row(best, campaign))]
    for role in BASELINES:
        base = [t for t in trials if t.role == role]
        if base:
            rows.append((role, _row(base[0], campaign)))
    console.print(comparison_table(with_gains(rows)))
    for line in gain_lines(rows):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print("Winner's engine arguments:")
    console.print("  " + " ".join(EngineConfig(**best.engine_config).to_cli_args()),
                  soft_wrap=True)
    numerics = accuracy.summary_line(accuracy.campaign_changes(campaign, best.engine_config))
    if numerics:
        console.print(numerics, markup=False, highlight=False, soft_wrap=True)
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

"""The report's HTML: one self-contained page (inline CSS) beside its PNGs.

Every value from the database passes through `_e` (html.escape): trial messages, trace paths
and even campaign names can hold anything.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from autotune.report.data import LATENCY_KEYS, CampaignReport, ConfigColumn, ReportTrial
from autotune.storage import repo
from autotune.vocabulary import FailureClass, RecordState

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 1200px; padding: 0 1rem; color: #1d232a; line-height: 1.4; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { margin-top: 2rem; font-size: 1.25rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: .9rem; }
th, td { border: 1px solid #d5dae0; padding: .25rem .55rem; text-align: right; vertical-align: top; }
th { background: #f1f3f5; } td.l, th.l { text-align: left; }
table.summary th { text-align: left; width: 12rem; } table.summary td { text-align: left; }
tr.feasible td.state { color: #1a7f37; font-weight: 600; }
tr.infeasible { background: #fff1f0; } tr.infeasible td.state { color: #b42318; font-weight: 600; }
tr.rejected { color: #6b7280; background: #f8f9fa; }
tr.winner { background: #fff8c5; } tr.winner td.state::after { content: " \\2605 winner"; }
td.msg { text-align: left; white-space: pre-wrap; word-break: break-word; font-size: .8rem;
         padding-left: 2.5rem; border-top: none; }
tr.message td.state::after { content: none; } div.wide { overflow-x: auto; }
.note { color: #6b7280; font-style: italic; } .diff { font-weight: 600; }
img { max-width: 100%; border: 1px solid #e5e7eb; margin: .5rem 0; }
code { background: #f1f3f5; padding: 0 .2rem; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _arg(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "-"
    if isinstance(value, dict):  # a nested config (speculative_config): vLLM's flag form
        return json.dumps(value, separators=(",", ":"))
    return f"{value:g}" if isinstance(value, float) else str(value)


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


def _row(cells: Iterable[str], cls: str = "", attrs: str = "") -> str:
    return f'<tr class="{cls}"{attrs}>' + "".join(cells) + "</tr>"


def _td(value: Any, cls: str = "") -> str:
    return f'<td class="{cls}">{_e(value)}</td>' if cls else f"<td>{_e(value)}</td>"


def _slo(report: CampaignReport) -> str:
    return ", ".join(f"{k.removesuffix('_ms')} ≤ {v:g} ms" for k, v in report.slo_ms.items()) or "-"


def _winner(report: CampaignReport) -> str:
    """The winner as `publish` takes it (repo.choose_winner), and on what grounds."""
    w = report.winner
    if report.winner_basis == repo.CONFIRMED and w is not None:
        c = next(c for c in report.confirmations if c.winner)
        cv = "-" if c.cv is None else f"{c.cv:.1%}"
        return (f"trial {w.number} ({w.role}), confirmed: LCB {c.lcb_output_tok_s:,.0f} output "
                f"tok/s (mean {c.mean_output_tok_s:,.0f}, CV {cv}, over {c.n} re-runs; its "
                f"search measurement {w.capacity_output_tok_s:,.0f})")
    if report.winner_basis == repo.BEST_SINGLE and w is not None:
        return (f"trial {w.number} ({w.role}): {w.capacity_output_tok_s:,.0f} output tok/s, the "
                "best single measurement (no confirmation ran, so not checked against "
                "run-to-run noise)")
    if report.winner_basis == repo.NONE_CONFIRMED:
        return ("none: confirmation ran and no config kept a lower confidence bound above 0 "
                "over its re-runs; nothing to publish")
    return "none: no trial met the SLO"


def _spent(report: CampaignReport) -> str:
    limits = [f"{k.replace('_', ' ')} {v}" for k, v in report.budget.items() if v is not None]
    stop = (report.stop_reason or "-").replace("_", " ")
    return (f"{report.gpu_hours:.4g} GPU-hours (trials and confirmation runs); search stopped "
            f"by {stop}" + (f"; budget: {', '.join(limits)}" if limits else ""))


def _summary(report: CampaignReport) -> str:
    # Rejections start no engine, so they are not counted against the budget.
    trials = (f"{len(report.trials)}: {report.by_state('measured')} measured (budget "
              f"{report.max_trials}, failed ones included), {report.by_state('failed')} failed, "
              f"{report.by_state('rejected')} rejected by interaction rules; "
              f"{sum(t.feasible for t in report.trials)} feasible")
    status = report.status + (f" ({report.message})" if report.message else "")
    rows = [
        ("Deployment", f"{report.deployment}: {report.model} on {report.gpu_count} x {report.gpu}, "
                       f"TP {report.tensor_parallel_size}, max_model_len {report.max_model_len:,}, "
                       f"{report.traffic_profile} traffic"),
        ("SLO", _slo(report)),
        ("Trace", f"{report.trace_ref} (digest {report.trace_digest})"),
        ("Backend / executor", (f"screened on {report.screen_backend} "
                                f"({sum(t.fidelity == report.screen_backend for t in report.trials)}"
                                f" trials), then {report.backend}; only {report.backend} results "
                                "are ranked and published" if report.screen_backend
                                else report.backend) + f" / {report.executor}"),
        ("Search space, seed", f"{report.search_space}, seed {report.seed}"),
        ("Optuna study", report.study_name),
        ("Trials", trials),
        ("Status", status),
        ("Started / finished", f"{_when(report.started_at)} / {_when(report.finished_at)}"),
        ("Wall time", "-" if report.wall_s is None else f"{report.wall_s:,.1f} s"),
        ("Spent", _spent(report)),
        ("Winner", _winner(report)),
    ]
    if report.decision is not None:
        rows.append(("Decision", f"{report.period or '-'}: {report.decision}: "
                                 f"{report.decision_note or '(no note)'}"))
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f'<table class="summary" id="summary">{body}</table>'


def _gain(best: ConfigColumn, other: ConfigColumn) -> str:
    if other is best or not (other.feasible and other.capacity_output_tok_s):
        return "-"
    return f"{(best.capacity_output_tok_s / other.capacity_output_tok_s - 1) * 100:+.1f}%"


def _confirmations(report: CampaignReport) -> str:
    if not report.confirmations:
        return ('<p class="note" id="confirmation-note">No confirmation ran for this campaign: '
                "the winner is its best single measurement, which was picked for being high and "
                "is not checked against run-to-run noise (tune with --confirm-top K).</p>")
    head = ["#", "role", "search tok/s", "re-runs", "capacity per re-run", "mean tok/s", "sd",
            "CV", "LCB tok/s", ""]
    lines = ["<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for c in report.confirmations:
        runs = ", ".join("lost" if x is None else f"{x:,.0f}" + (f" ({f})" if f else "")
                         for x, f in zip(c.samples, c.failures, strict=False))
        lines.append(_row([_td(c.trial_number), _td(c.role, "l"),
                           _td(_num(c.search_output_tok_s)), _td(c.n), _td(runs, "l"),
                           _td(_num(c.mean_output_tok_s)), _td(_num(c.std_output_tok_s)),
                           _td("-" if c.cv is None else f"{c.cv:.1%}"),
                           _td(_num(c.lcb_output_tok_s)), _td("winner" if c.winner else "", "l")],
                          "winner" if c.winner else "", f' data-trial="{c.trial_number}"'))
    return (f'<table id="confirmations">{"".join(lines)}</table><p class="note">Each config re-run '
            "with arrival seeds the search did not use; a re-run that missed the SLO counts as "
            "0, one lost to the infrastructure is left out. LCB: the one-sided 90% lower "
            "confidence bound of the mean; the highest wins (0: fewer than two runs).</p>")


def _comparison(columns: Sequence[ConfigColumn]) -> str:
    if not columns:
        return '<p class="note">No winner and no baselines to compare.</p>'
    head = "<tr><th></th>" + "".join(f"<th>{_e(c.label)}</th>" for c in columns) + "</tr>"
    lines = [head, _row(['<th class="l">measured as</th>',
                         *(_td(c.source) for c in columns)])]
    lines.append(_row(['<th class="l">capacity (output tok/s)</th>', *(_td(
        _num(c.capacity_output_tok_s) if c.feasible else f"- ({c.failure_class or FailureClass.SLO_MISS})")
        for c in columns)]))
    if columns[0].label == "winner":
        lines.append(_row(["<th class=\"l\">winner's gain over it</th>",
                           *(_td(_gain(columns[0], c)) for c in columns)]))
    for key in LATENCY_KEYS:
        lines.append(_row([f'<th class="l">{_e(key)}</th>',
                           *(_td(_num(c.latency_p99_ms.get(key))) for c in columns)]))
    names = list(dict.fromkeys(k for c in columns for k in c.effective_config))
    differ = [n for n in names if len({repr(c.effective_config.get(n)) for c in columns}) > 1]
    for name in differ:
        lines.append(_row([f'<th class="l diff">{_e(name)}</th>',
                           *(_td(_arg(c.effective_config.get(name)), "diff") for c in columns)]))
    same = [n for n in names if n not in differ]
    table = f'<table id="comparison">{"".join(lines)}</table>'
    if same:
        shared = ", ".join(f"{n}={_arg(columns[0].effective_config.get(n))}" for n in same)
        table += f'<p class="note">The same in every column: {_e(shared)}.</p>'
    return table


def _state(t: ReportTrial) -> str:
    if t.feasible:
        return "feasible"
    return "rejected" if t.state == RecordState.REJECTED else "infeasible"


def _trials(report: CampaignReport) -> str:
    constraint_names = list(dict.fromkeys(k for t in report.trials for k in t.constraints))
    shared = {k: v for k, v in report.trials[0].config.items()
              if all(t.config.get(k) == v for t in report.trials)} if report.trials else {}
    params = [k for k in dict.fromkeys(k for t in report.trials for k in t.config) if k not in shared]
    head = ["#", "role", "state", "feasible", "capacity tok/s", "measured tok/s",
            "TTFT P99 ms", "TPOT P99 ms", "failure class", *params,
            *(f"constraint {n}" for n in constraint_names)]
    lines = ["<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for t in report.trials:
        cls = _state(t) + (" winner" if t is report.winner else "")
        message = t.failure_message or ""
        if t.repeat_of is not None:
            message = f"repeat of trial {t.repeat_of}; {message}".rstrip("; ")
        role = f"{t.role} ({t.fidelity})" if report.screen_backend else t.role
        cells = [_td(t.number), _td(role, "l"), _td(t.state + ("" if t.feasible or
                                                                  t.state == RecordState.REJECTED else
                                                                  " (infeasible)"), "state l"),
                 _td("yes" if t.feasible else "no"),
                 _td(_num(t.capacity_output_tok_s) if t.feasible else "-"),
                 _td(_num(t.measured_output_tok_s)),
                 _td(_num(t.latency_p99_ms.get("ttft_p99_ms"))),
                 _td(_num(t.latency_p99_ms.get("tpot_p99_ms"))),
                 _td(t.failure_class or "-", "l"),
                 *(_td(_arg(t.config.get(p))) for p in params),
                 *(_td(_num(t.constraints.get(n), 3)) for n in constraint_names)]
        lines.append(_row(cells, cls, f' id="trial-{t.number}" data-trial="{t.number}" '
                                      f'data-feasible="{str(t.feasible).lower()}"'))
        if message:  # a row of its own: messages run long and would squeeze the numbers
            lines.append(f'<tr class="{cls} message" data-message-for="{t.number}">'
                         f'<td class="msg" colspan="{len(head)}">{_e(message)}</td></tr>')
    note = (f'<p class="note">Engine arguments the same in every trial: '
            f'{_e(", ".join(f"{k}={_arg(v)}" for k, v in shared.items()))}. A constraint value '
            "above 0 is a violation (for a latency, the fraction over its ceiling).</p>")
    return f'<div class="wide"><table id="trials">{"".join(lines)}</table></div>{note}'


def _importances(report: CampaignReport, image: str | None) -> str:
    imp = report.importances
    if image is None or not imp.values:
        return f'<p class="note" id="importance-note">{_e(imp.note or "No importances.")}</p>'
    rows = "".join(f"<tr><td class=\"l\">{_e(k)}</td><td>{v:.3f}</td></tr>"
                   for k, v in imp.values.items())
    return (f'<img src="{_e(image)}" alt="parameter importances">'
            f'<table id="importances"><tr><th class="l">parameter</th><th>importance</th></tr>'
            f"{rows}</table>")


def render(report: CampaignReport, *, throughput_png: str, capacity_png: str,
           importances_png: str | None, generated_at: datetime) -> str:
    """The page; image arguments are paths relative to it."""
    title = f"autotune report: {report.deployment} / {report.campaign}"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>{_e(title)}</h1>
<p class="note">Generated {_e(_when(generated_at))} from campaign id {report.campaign_id}.</p>
<h2>Campaign</h2>
{_summary(report)}
<h2>Winner beside the incumbent and the baselines</h2>
<p>Capacity is the highest output-token throughput whose P99 latencies stay under the SLO
({_e(_slo(report))}); latencies are P99s at that point. Engine arguments are shown only where the
configs differ, with vLLM's defaults filled in.</p>
{_comparison(report.comparison)}
<h2>Confirmation</h2>
{_confirmations(report)}
<h2>Throughput against P99 latency</h2>
<p>Each measured trial at its capacity; trials that missed the SLO are drawn (red &times;) where they
were measured, at the trace's recorded rate. The line is the Pareto front of the feasible ones.</p>
<img src="{_e(throughput_png)}" alt="throughput against P99 latency">
<h2>Capacity by trial</h2>
<img src="{_e(capacity_png)}" alt="capacity by trial">
<h2>Parameter importances</h2>
{_importances(report, importances_png)}
<h2>All trials</h2>
{_trials(report)}
</body>
</html>
"""

"""The report's HTML: one self-contained page (inline CSS, its plots inlined as data URIs),
rendered from templates/report.html.j2 with autoescaping on: trial messages, trace paths and
even campaign names can hold anything."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2

from autotune.release import gains
from autotune.release.report import plots
from autotune.release.report.data import (
    LATENCY_KEYS,
    SWEEP_KEYS,
    CampaignReport,
    ConfigColumn,
    ReportReplay,
    ReportTrial,
)
from autotune.storage import repo
from autotune.vocabulary import FailureClass, RecordState, Role

_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


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


def _summary(report: CampaignReport) -> list[tuple[str, str]]:
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
        *([("Simulator step model", report.step_model)] if report.step_model else []),
        ("Search space, seed", f"{report.search_space}, seed {report.seed}"),
        ("Optuna study", report.study_name),
        ("Trials", trials),
        ("Status", status),
        ("Started / finished", f"{_when(report.started_at)} / {_when(report.finished_at)}"),
        ("Wall time", "-" if report.wall_s is None else f"{report.wall_s:,.1f} s"),
        ("Spent", _spent(report)),
        ("Winner", _winner(report)),
    ]
    headline = gain_summary(report)
    if headline is not None:
        rows.append(("Gain", headline))
    if report.decision is not None:
        rows.append(("Decision", f"{report.period or '-'}: {report.decision}: "
                                 f"{report.decision_note or '(no note)'}"))
    return rows


def _capacity(c: ConfigColumn, confirmed: bool) -> str:
    """Its confirmed mean ± sd where it was confirmed, else its search measurement."""
    if c.confirmed is not None:
        return f"{c.confirmed.mean_output_tok_s:,.0f} ± {c.confirmed.std_output_tok_s:,.0f}"
    if not c.feasible:
        return f"- ({c.failure_class or FailureClass.SLO_MISS})"
    return _num(c.capacity_output_tok_s) + (" (search)" if confirmed else "")


def _gain_rows(columns: list[ConfigColumn], confirmed: bool) -> list[dict[str, Any]]:
    """The winner's gain over each column, saying which figures it is from."""
    if columns[0].label != "winner":
        return []
    if not confirmed:
        return [{"name": "winner's gain over it (single measurements)", "diff": False,
                 "cells": ["-" if c.single_gain_pct is None else f"{c.single_gain_pct:+.1f}%"
                           for c in columns]}]
    return [{"name": "winner's gain: confirmed mean (90% CI)", "diff": False,
             "cells": ["-" if c.gain is None else gains.mean_text(c.gain) for c in columns]},
            {"name": "winner's gain: at its LCB", "diff": False,
             "cells": ["-" if c.gain is None else f"{c.gain.lcb_pct:+.1f}%" for c in columns]}]


def gain_summary(report: CampaignReport) -> str | None:
    """The headline of the summary: the winner's gain over vLLM's defaults, and its basis."""
    columns = list(report.comparison)
    base = next((c for c in columns if c.label == Role.VLLM_DEFAULT), None)
    if not columns or columns[0].label != "winner" or base is None:
        return None
    win = columns[0].confirmed
    if win is not None:
        if base.gain is not None:
            return (gains.headline(base.gain, "vLLM's defaults") + f"; runs per config: "
                    f"{win.n}, seeds {', '.join(map(str, win.seeds))}")
        return f"none to give over vLLM's defaults ({base.not_confirmed or 'confirmed mean 0'})"
    if base.single_gain_pct is None:
        return None
    return (f"{base.single_gain_pct:+.1f}% over vLLM's defaults, from single search "
            "measurements (no confirmation ran: not checked against run-to-run noise)")


def _confirmations(report: CampaignReport) -> list[dict[str, Any]]:
    return [{"trial": c.trial_number, "role": c.role, "search": _num(c.search_output_tok_s),
             "n": c.n, "runs": ", ".join("lost" if x is None else f"{x:,.0f}" + (f" ({f})" if f else "")
                                        for x, f in zip(c.samples, c.failures, strict=False)),
             "mean": _num(c.mean_output_tok_s), "sd": _num(c.std_output_tok_s),
             "cv": "-" if c.cv is None else f"{c.cv:.1%}", "lcb": _num(c.lcb_output_tok_s),
             "winner": c.winner} for c in report.confirmations]


def _comparison(columns: list[ConfigColumn]) -> dict[str, Any]:
    """Rows of the winner-beside-the-baselines table: what was measured, then the engine
    arguments where the columns differ (the rest named once, under the table)."""
    if not columns:
        return {"labels": [], "rows": [], "same": ""}
    confirmed = columns[0].label == "winner" and columns[0].confirmed is not None
    rows = [{"name": "measured as", "cells": [c.source for c in columns], "diff": False},
            {"name": "capacity (output tok/s)" + (": confirmed mean ± sd" if confirmed else ""),
             "diff": False, "cells": [_capacity(c, confirmed) for c in columns]}]
    if confirmed:
        rows += [{"name": "confirmed LCB (output tok/s)", "diff": False,
                  "cells": [_num(c.confirmed.lcb_output_tok_s) if c.confirmed else "-"
                            for c in columns]},
                 {"name": "search measurement (1 run)", "diff": False,
                  "cells": [_num(c.capacity_output_tok_s) if c.feasible else "-"
                            for c in columns]},
                 {"name": "confirmation", "diff": False,
                  "cells": [f"{c.confirmed.n} runs, seeds {', '.join(map(str, c.confirmed.seeds))}"
                            if c.confirmed else c.not_confirmed or "-" for c in columns]}]
    rows += _gain_rows(columns, confirmed)
    rows += [{"name": key, "diff": False,
              "cells": [_num(c.latency_p99_ms.get(key)) for c in columns]} for key in LATENCY_KEYS]
    names = list(dict.fromkeys(k for c in columns for k in c.effective_config))
    differ = [n for n in names if len({repr(c.effective_config.get(n)) for c in columns}) > 1]
    rows += [{"name": n, "diff": True,
              "cells": [_arg(c.effective_config.get(n)) for c in columns]} for n in differ]
    same = ", ".join(f"{n}={_arg(columns[0].effective_config.get(n))}"
                     for n in names if n not in differ)
    return {"labels": [c.label for c in columns], "rows": rows, "same": same}


def _state(t: ReportTrial) -> str:
    if t.feasible:
        return "feasible"
    return "rejected" if t.state == RecordState.REJECTED else "infeasible"


def _trials(report: CampaignReport) -> dict[str, Any]:
    constraint_names = list(dict.fromkeys(k for t in report.trials for k in t.constraints))
    shared = {k: v for k, v in report.trials[0].config.items()
              if all(t.config.get(k) == v for t in report.trials)} if report.trials else {}
    params = [k for k in dict.fromkeys(k for t in report.trials for k in t.config) if k not in shared]
    head = ["#", "role", "state", "feasible", "capacity tok/s", "measured tok/s",
            "TTFT P99 ms", "TPOT P99 ms", "failure class", *params,
            *(f"constraint {n}" for n in constraint_names)]
    rows = []
    for t in report.trials:
        message = t.failure_message or ""
        if t.repeat_of is not None:
            message = f"repeat of trial {t.repeat_of}; {message}".rstrip("; ")
        state = t.state + ("" if t.feasible or t.state == RecordState.REJECTED else " (infeasible)")
        cells = [(t.number, ""),
                 (f"{t.role} ({t.fidelity})" if report.screen_backend else t.role, "l"),
                 (state, "state l"), ("yes" if t.feasible else "no", ""),
                 (_num(t.capacity_output_tok_s) if t.feasible else "-", ""),
                 (_num(t.measured_output_tok_s), ""),
                 (_num(t.latency_p99_ms.get("ttft_p99_ms")), ""),
                 (_num(t.latency_p99_ms.get("tpot_p99_ms")), ""),
                 (t.failure_class or "-", "l"),
                 *((_arg(t.config.get(p)), "") for p in params),
                 *((_num(t.constraints.get(n), 3), "") for n in constraint_names)]
        # A message gets a row of its own: messages run long and would squeeze the numbers.
        rows.append({"number": t.number, "cls": _state(t) + (" winner" if t is report.winner else ""),
                     "feasible": str(t.feasible).lower(), "cells": cells, "message": message})
    return {"head": head, "rows": rows,
            "shared": ", ".join(f"{k}={_arg(v)}" for k, v in shared.items())}


SWEEP_HEAD = ["config", "replay", "rate x", "offered req/s", "output tok/s", "SLO",
              *(k.removesuffix("_ms").replace("_", " ").upper() for k in SWEEP_KEYS),
              "tok/s/user", "tok/s/GPU"]


def _ms(value: float | None) -> str:
    return _num(value, 1 if value is not None and value < 100 else 0)


def _sweep_cells(label: str, r: ReportReplay, gpus: int) -> list[str]:
    # The replay at capacity met the SLO by definition.
    slo = ("capacity" if r.at_capacity else "client-bound" if r.client_bound
           else "met" if r.slo_ok else "missed")
    return [label, str(r.index), f"{r.rate_scale:.3g}", _num(r.offered_request_s, 2),
            _num(r.output_tok_s), slo, *(_ms(r.latency_ms.get(k)) for k in SWEEP_KEYS),
            _num(r.tokens_per_user, 1), _num(r.output_tok_s / gpus if gpus else None)]


def _missing(configs: list[tuple[str, ReportTrial]], has: Any, why: str) -> str | None:
    """A note naming the configs a view could not draw, or None."""
    lacking = [label for label, t in configs if not has(t)]
    return f"Not drawn for {', '.join(lacking)}: {why}." if lacking else None


_OLD = "stored before each replay kept its percentiles, offered rate and concurrency"


def _hidden(configs: list[tuple[str, ReportTrial]]) -> str | None:
    """Configs whose replays measured exactly what an earlier one's did (the simulator gives
    two configs that differ only where it models no difference the same figures): their
    curves lie under that one's."""
    seen: dict[tuple[Any, ...], str] = {}
    found = []
    for label, t in configs:
        key = tuple((r.rate_scale, r.output_tok_s, tuple(sorted(r.latency_ms.items())))
                    for r in t.replays)
        if key in seen:
            found.append(f"{label} measured what {seen[key]} did at every replay: its curves "
                         "lie under that one's.")
        else:
            seen[key] = label
    return " ".join(found) or None


def _sweep(report: CampaignReport) -> dict[str, Any]:
    """The sweep views' tables (each config at capacity; every replay) and the notes that say
    what could not be drawn."""
    configs = report.sweep_configs()
    gpus = report.gpu_count
    at_capacity = [(label, t, t.at_capacity) for label, t in configs]
    replays = [_sweep_cells(label, r, gpus) for label, t in configs for r in t.replays]
    no_capacity = [label for label, t, at in at_capacity if at is None]
    with_quantiles = [(label, t) for label, t, at in at_capacity if at is not None]
    return {
        "head": SWEEP_HEAD,
        "at_capacity": [_sweep_cells(label, at, gpus) for label, _, at in at_capacity
                        if at is not None],
        "replays": replays,
        "load_note": " ".join(filter(None, [
            _missing(configs, lambda t: bool(plots.curve(t)), _OLD), _hidden(configs)])),
        "cdf_note": " ".join(filter(None, [
            f"No capacity (missed the SLO at the recorded rate): {', '.join(no_capacity)}."
            if no_capacity else None,
            _missing(with_quantiles, lambda t: t.at_capacity.quantiles is not None,
                     "stored before the replay at capacity kept its latency percentiles")])),
        "pareto_note": _missing(configs, lambda t: any(r.tokens_per_user for r in t.replays),
                                _OLD),
        "configs": [label for label, _ in configs],
    }


def render(report: CampaignReport, *, images: dict[str, str], exports: tuple[str, ...] = (),
           generated_at: datetime) -> str:
    """The page. `images` maps each drawn plot (throughput, capacity, importances,
    latency_vs_load, latency_cdf, pareto) to its src: a data URI, so that the page stands
    alone; `exports` names the data files written beside it."""
    imp = report.importances
    return _TEMPLATES.get_template("report.html.j2").render(
        title=f"autotune report: {report.deployment} / {report.campaign}",
        generated=_when(generated_at), campaign_id=report.campaign_id,
        summary=_summary(report), slo=_slo(report), comparison=_comparison(list(report.comparison)),
        confirmations=_confirmations(report), images=images, gpus=report.gpu_count,
        importances=list(imp.values.items()), importance_note=imp.note or "No importances.",
        trials=_trials(report), winner_numerics=report.winner_numerics, sweep=_sweep(report),
        exports=list(exports))

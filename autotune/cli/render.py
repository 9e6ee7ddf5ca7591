"""Rich output for the CLI: the trial table (live and final) and the final comparison."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.table import Table

from autotune.domain.parallelism import Strategy
from autotune.domain.trial_record import TrialRecord
from autotune.release import gains
from autotune.release.result import Baseline, ConfigResult, Confirmed, WinnerGain
from autotune.vocabulary import RecordState

TUNED = ("max_num_seqs", "max_num_batched_tokens", "block_size", "enable_chunked_prefill",
         "gpu_memory_utilization", "enable_prefix_caching")
_SHORT = {"max_num_seqs": "seqs", "max_num_batched_tokens": "batch", "block_size": "block",
          "enable_chunked_prefill": "chunk", "gpu_memory_utilization": "mem",
          "enable_prefix_caching": "prefix"}
_TRIAL_CAPTION = {"tok/s": "capacity in output tokens/s under the SLO", "TTFT ms": "P99 (TPOT too)",
                  "batch": "max_num_batched_tokens", "mem": "gpu_memory_utilization"}


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _arg(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


# Columns dropped, in this order, until the table fits its width (the numbers stay whole).
_FOLD_ORDER = ("prefix", "mem", "chunk", "block", "layout", "TPOT ms")
_TEXT_MIN = 10  # role and state wrap (fold) down to this many characters


def trial_table(records: list[TrialRecord], title: str, limit: int | None = None,
                width: int | None = None) -> Table:
    """One row per trial. With `width` (the console's), the less important columns are left
    out until every number fits whole; the caption names them."""
    shown = records[-limit:] if limit else records
    mixed = len({r.fidelity for r in shown}) > 1  # a multi-fidelity campaign: say which backend
    columns = ["#", "role", "state", "tok/s", "TTFT ms", "TPOT ms", "layout",
               *(_SHORT[n] for n in TUNED)]
    rows = []
    for r in shown:
        lat = r.latency or {}
        state = r.state if r.feasible or r.state != RecordState.MEASURED else "slo miss"
        style = "bold green" if r.feasible else ("dim" if r.state == RecordState.REJECTED else "red")
        rows.append(([str(r.number), f"{r.role} ({r.fidelity})" if mixed else r.role, state,
                      f"{r.capacity_output_tok_s:,.0f}" if r.feasible else "-",
                      _ms(lat.get("ttft_p99_ms")), _ms(lat.get("tpot_p99_ms")),
                      Strategy.of(r.config).name, *(_arg(r.config.get(n)) for n in TUNED)], style))
    hidden: list[str] = []
    while True:
        keep = [i for i, c in enumerate(columns) if c not in hidden]
        caption = "; ".join([f"{c}: {_TRIAL_CAPTION[c]}" for c in columns
                             if c in _TRIAL_CAPTION and c not in hidden]
                            + ([f"not shown at this width: {', '.join(hidden)}"] if hidden else []))
        table = Table(title=title, title_justify="left", expand=False, caption=caption,
                      caption_justify="left")
        for i in keep:
            text = columns[i] in ("role", "state")  # may wrap; a number never does
            table.add_column(columns[i], justify="left" if text else "right", no_wrap=not text,
                             overflow="fold")
        for cells, style in rows:
            table.add_row(*(cells[i] for i in keep), style=style)
        if width is None or len(hidden) == len(_FOLD_ORDER) or \
                _min_width([columns[i] for i in keep], [[c[i] for i in keep] for c, _ in rows]) \
                <= width:
            return table
        hidden.append(_FOLD_ORDER[len(hidden)])


def _min_width(columns: list[str], rows: list[list[str]]) -> int:
    """The narrowest the table renders without cutting a number: a number column as wide as
    its header and widest cell, role and state folded to _TEXT_MIN; 3 per column for the
    padding and the rule, 1 for the right edge."""
    total = 1
    for i, name in enumerate(columns):
        widest = max([len(name), *(len(r[i]) for r in rows)])
        total += 3 + (max(len(name), min(widest, _TEXT_MIN)) if name in ("role", "state")
                      else widest)
    return total


def confirmation_table(rows: Sequence[Confirmed]) -> Table:
    """Confirmation runs per config: the noise and the bound."""
    table = Table(title="Confirmation (re-runs with other arrival seeds; winner = best 90% "
                        "lower confidence bound)", title_justify="left")
    for col in ("#", "role", "runs", "search tok/s", "mean tok/s", "sd", "CV", "LCB tok/s", ""):
        # Narrow: the role folds onto a second line rather than being cut.
        table.add_column(col, justify="left" if col in ("role", "") else "right",
                         overflow="fold")
    for r in rows:
        table.add_row(str(r.trial_number), r.role, str(r.n),
                      f"{r.search_output_tok_s:,.0f}", f"{r.mean_output_tok_s:,.0f}",
                      f"{r.std_output_tok_s:,.0f}", "-" if r.cv is None else f"{r.cv:.1%}",
                      f"{r.lcb_output_tok_s:,.0f}", "winner" if r.winner else "",
                      style="bold green" if r.winner else None)
    return table


def comparison_table(winner: ConfigResult, baselines: Sequence[Baseline]) -> Table:
    """The winner beside the baselines: one column per config. Where the winner was confirmed,
    capacities and gains are the confirmed ones (autotune.release.gains); the search's single
    measurement is shown for what it is."""
    confirmed = winner.confirmed is not None
    columns = [("winner", winner, None), *((b.config.role, b.config, b.winner_gain)
                                           for b in baselines)]
    table = Table(title="Winner beside the baselines" + (
        " (confirmed: mean ± sd over re-runs with the same seeds; gains from those only)"
        if confirmed
        else " (single search measurements: no confirmation ran)"), title_justify="left")
    table.add_column("", overflow="fold")  # a long engine argument's name folds, never cut
    for label, _, _ in columns:
        table.add_column(label, justify="right", overflow="fold")

    def line(name: str, fn: Callable[[ConfigResult, WinnerGain | None], str]) -> None:
        table.add_row(name, *(fn(c, g) for _, c, g in columns))

    def search(c: ConfigResult) -> str:
        return "-" if c.search_output_tok_s is None else f"{c.search_output_tok_s:,.0f}"

    def capacity(c: ConfigResult, _: WinnerGain | None) -> str:
        if c.confirmed is not None:
            return f"{c.confirmed.mean_output_tok_s:,.0f} ± {c.confirmed.std_output_tok_s:,.0f}"
        if c.search_output_tok_s is None:
            return f"- ({c.failure_class or 'slo miss'})"
        return search(c) + (" (search)" if confirmed else "")

    line("trial", lambda c, _: str(c.trial_number))
    if confirmed:
        line("capacity (output tok/s): mean ± sd", capacity)
        line("confirmed LCB (output tok/s)", lambda c, _: "-" if c.confirmed is None
             else f"{c.confirmed.lcb_output_tok_s:,.0f}")
        line("search measurement (1 run)", lambda c, _: search(c))
        line("winner's gain: mean (90% CI)", lambda _, g: "-" if g is None or g.confirmed is None
             else gains.mean_text(g.confirmed))
        line("winner's gain: at its LCB", lambda _, g: "-" if g is None or g.confirmed is None
             else f"{g.confirmed.lcb_pct:+.1f}%")
        line("confirmation", lambda c, _: f"{c.confirmed.n} runs" if c.confirmed is not None
             else c.not_confirmed or "-")
    else:
        line("capacity (output tok/s)", capacity)
        line("winner's gain over it", lambda _, g: "-" if g is None or g.search_pct is None
             else f"{g.search_pct:+.1f}%")
    for key, label in (("ttft_p99_ms", "TTFT p99 (ms)"), ("tpot_p99_ms", "TPOT p99 (ms)"),
                       ("itl_p99_ms", "ITL p99 (ms)"), ("e2e_p99_ms", "E2E p99 (ms)")):
        line(label, _latency_cell(key))
    line("parallel layout", lambda c, _: Strategy.of(c.config).name)
    for name in (*TUNED, "kv_cache_dtype", "max_model_len"):
        line(name, _config_cell(name))
    return table


def _latency_cell(key: str) -> Callable[[ConfigResult, Any], str]:
    return lambda c, _: _ms(c.latency.get(key))


def _config_cell(name: str) -> Callable[[ConfigResult, Any], str]:
    return lambda c, _: _arg(c.config.get(name))


def per_path_table(rows: list[Any]) -> Table:
    """One column per path (autotune.campaign.per_path.PathSummary): its config beside the whole
    trace's single config measured on the same sub-trace and seeds."""
    table = Table(title="Per-path configs beside the single config (capacity on each path's "
                        "sub-trace: confirmed mean, same seeds)", title_justify="left")
    table.add_column("")
    for r in rows:
        table.add_column(r.path, justify="right")

    def line(name: str, fn: Any) -> None:
        table.add_row(name, *(fn(r) for r in rows))

    def tok_s(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"

    line("deployment", lambda r: r.deployment)
    line("requests", lambda r: f"{r.requests} of {r.of_requests} ({r.requests / r.of_requests:.0%})"
         if r.of_requests else "0")
    line("search space", lambda r: r.space or "-")
    line("SLO", lambda r: r.slo or "-")
    line("winner trial", lambda r: "not tuned" if r.skipped else (
        "none feasible" if r.winner_trial is None else str(r.winner_trial)))
    line("per-path (output tok/s)", lambda r: tok_s(r.winner_output_tok_s))
    line("single config (output tok/s)", lambda r: tok_s(r.single_output_tok_s))
    line("per-path gain", lambda r: "-" if r.gain_pct is None else f"{r.gain_pct:+.1f}%")
    line("parallel layout", lambda r: Strategy.of(r.winner_config).name if r.winner_config else "-")
    line("changes numerics", lambda r: ", ".join(f"{c.name}={c.shown}"
                                                 for c in r.winner_accuracy_affecting) or "-")
    for name in TUNED:
        line(name, lambda r, n=name: _arg((r.winner_config or {}).get(n)))
    return table

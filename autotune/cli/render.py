"""Rich output for the CLI: the live trial table and the final comparison."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from autotune import gains
from autotune.parallelism import Strategy
from autotune.study import CampaignRequest, Observer, TrialRecord
from autotune.vocabulary import RecordState

TUNED = ("max_num_seqs", "max_num_batched_tokens", "block_size", "enable_chunked_prefill",
         "gpu_memory_utilization", "enable_prefix_caching")
_SHORT = {"max_num_seqs": "seqs", "max_num_batched_tokens": "batch tok", "block_size": "block",
          "enable_chunked_prefill": "chunked", "gpu_memory_utilization": "mem util",
          "enable_prefix_caching": "prefix $"}


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _arg(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def trial_table(records: list[TrialRecord], title: str, limit: int | None = None) -> Table:
    table = Table(title=title, title_justify="left", expand=False)
    shown = records[-limit:] if limit else records
    mixed = len({r.fidelity for r in shown}) > 1  # a multi-fidelity campaign: say which backend
    for col in ("#", "role", "state", "capacity tok/s", "TTFT p99 ms", "TPOT p99 ms", "layout"):
        table.add_column(col, justify="right" if col != "role" and col != "state" else "left")
    for name in TUNED:
        table.add_column(_SHORT[name], justify="right")
    for r in shown:
        lat = r.latency or {}
        state = r.state if r.feasible or r.state != RecordState.MEASURED else "slo miss"
        style = "bold green" if r.feasible else ("dim" if r.state == RecordState.REJECTED else "red")
        table.add_row(str(r.number), f"{r.role} ({r.fidelity})" if mixed else r.role, state,
                      f"{r.capacity_output_tok_s:,.0f}" if r.feasible else "-",
                      _ms(lat.get("ttft_p99_ms")), _ms(lat.get("tpot_p99_ms")),
                      Strategy.of(r.config).name,
                      *(_arg(r.config.get(n)) for n in TUNED), style=style)
    return table


class LiveTrials(Observer):
    """A live table of the most recent trials while the campaign runs."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.records: list[TrialRecord] = []
        self.live: Live | None = None
        self.request: CampaignRequest | None = None

    def _title(self) -> str:
        r = self.request
        assert r is not None
        measured = sum(1 for x in self.records if x.state != RecordState.REJECTED)
        rejected = len(self.records) - measured
        best = max((x.capacity_output_tok_s for x in self.records if x.feasible), default=0.0)
        return (f"{r.study_name}: {measured}/{r.max_trials} trials measured, {rejected} rejected "
                f"by rules, best {best:,.0f} output tok/s")

    def on_start(self, request: CampaignRequest) -> None:
        self.request = request
        self.live = Live(trial_table([], self._title()), console=self.console,
                         refresh_per_second=4, transient=True)
        self.live.start()

    def on_trial(self, record: TrialRecord) -> None:
        self.records.append(record)
        if self.live:
            self.live.update(trial_table(self.records, self._title(), limit=12))

    def close(self) -> None:
        if self.live:
            self.live.stop()
            self.live = None


def confirmation_table(rows: list[Any]) -> Table:
    """Confirmation runs per config (autotune_confirmations rows): the noise and the bound."""
    table = Table(title="Confirmation (re-runs with other arrival seeds; winner = best 90% "
                        "lower confidence bound)", title_justify="left")
    for col in ("#", "role", "runs", "search tok/s", "mean tok/s", "sd", "CV", "LCB tok/s", ""):
        table.add_column(col, justify="left" if col in ("role", "") else "right")
    for r in rows:
        table.add_row(str(r.trial.number), r.role, str(r.n),
                      f"{r.trial.capacity_output_tok_s:,.0f}", f"{r.mean_output_tok_s:,.0f}",
                      f"{r.std_output_tok_s:,.0f}", "-" if r.cv is None else f"{r.cv:.1%}",
                      f"{r.lcb_output_tok_s:,.0f}", "winner" if r.winner else "",
                      style="bold green" if r.winner else None)
    return table


def comparison_table(rows: list[tuple[str, dict[str, Any]]]) -> Table:
    """The winner beside the baselines: one column per config. Where the winner was confirmed,
    capacities and gains are the confirmed ones (autotune.gains); the search's single
    measurement is shown for what it is."""
    confirmed = bool(rows) and rows[0][1].get("confirmed") is not None
    table = Table(title="Winner beside the baselines" + (
        " (confirmed: mean ± sd over re-runs with the same seeds; gains from those only)"
        if confirmed
        else " (single search measurements: no confirmation ran)"), title_justify="left")
    table.add_column("")
    for label, _ in rows:
        table.add_column(label, justify="right")

    def line(name: str, fn: Any) -> None:
        table.add_row(name, *(fn(r) for _, r in rows))

    def capacity(r: dict[str, Any]) -> str:
        runs = r.get("confirmed")
        if runs is not None:
            return f"{runs.mean_output_tok_s:,.0f} ± {runs.std_output_tok_s:,.0f}"
        if not r["feasible"]:
            return f"- ({r['failure'] or 'slo miss'})"
        return f"{r['capacity']:,.0f}" + (" (search)" if confirmed else "")

    def is_winner(r: dict[str, Any]) -> bool:
        return r is rows[0][1]

    line("trial", lambda r: str(r["number"]))
    if confirmed:
        line("capacity (output tok/s): mean ± sd", capacity)
        line("confirmed LCB (output tok/s)", lambda r: f"{r['confirmed'].lcb_output_tok_s:,.0f}"
             if r.get("confirmed") else "-")
        line("search measurement (1 run)", lambda r: f"{r['capacity']:,.0f}" if r["feasible"]
             else "-")
        line("winner's gain: mean (90% CI)", lambda r: "-" if is_winner(r) or not r.get("gain")
             else gains.mean_text(r["gain"]))
        line("winner's gain: at its LCB", lambda r: "-" if is_winner(r) or not r.get("gain")
             else f"{r['gain'].lcb_pct:+.1f}%")
        line("confirmation", lambda r: f"{r['confirmed'].n} runs" if r.get("confirmed")
             else r.get("not_confirmed") or "-")
    else:
        line("capacity (output tok/s)", capacity)
        line("winner's gain over it", lambda r: "-" if is_winner(r) or r.get("single_gain") is None
             else f"{r['single_gain']:+.1f}%")
    for key, label in (("ttft_p99_ms", "TTFT p99 (ms)"), ("tpot_p99_ms", "TPOT p99 (ms)"),
                       ("itl_p99_ms", "ITL p99 (ms)"), ("e2e_p99_ms", "E2E p99 (ms)")):
        line(label, lambda r, k=key: _ms((r["latency"] or {}).get(k)))
    line("parallel layout", lambda r: Strategy.of(r["config"]).name)
    for name in (*TUNED, "kv_cache_dtype", "max_model_len"):
        line(name, lambda r, n=name: _arg(r["config"].get(n)))
    return table


def per_path_table(rows: list[Any]) -> Table:
    """One column per path (autotune.per_path.PathSummary): its config beside the whole
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
    for name in TUNED:
        line(name, lambda r, n=name: _arg((r.winner_config or {}).get(n)))
    return table

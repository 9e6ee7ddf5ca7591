"""The report's PNG plots, drawn with matplotlib's object API (no pyplot: no global figure
state, no display, nothing left open between reports)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from autotune.release.report.data import SWEEP_METRICS, SWEEP_PCTS, CampaignReport, ReportReplay, ReportTrial
from autotune.vocabulary import RecordState, Role

THROUGHPUT_LATENCY_PNG = "throughput_vs_p99.png"
CAPACITY_BY_TRIAL_PNG = "capacity_by_trial.png"
IMPORTANCES_PNG = "param_importances.png"
LATENCY_VS_LOAD_PNG = "latency_vs_load.png"
LATENCY_CDF_PNG = "latency_cdf.png"
PARETO_PER_GPU_PNG = "pareto_tokens_per_gpu.png"
_METRIC_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E"}
_DPI = 110
_PANELS = (("ttft_p99_ms", "TTFT P99 (ms)"), ("tpot_p99_ms", "TPOT P99 (ms)"))


def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (latency_ms, output_tok_s) points no other point beats on both: lower or equal
    latency with higher throughput. Sorted by latency."""
    front: list[tuple[float, float]] = []
    for latency_ms, tok_s in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or tok_s > front[-1][1]:
            front.append((latency_ms, tok_s))
    return front


def best_so_far(trials: Sequence[ReportTrial]) -> list[tuple[int, float]]:
    """(trial number, best feasible capacity up to it), from the first feasible trial on."""
    steps: list[tuple[int, float]] = []
    best: float | None = None
    for t in sorted(trials, key=lambda t: t.number):
        if t.feasible and (best is None or t.capacity_output_tok_s > best):
            best = t.capacity_output_tok_s
        if best is not None:
            steps.append((t.number, best))
    return steps


def _plotted(t: ReportTrial, key: str) -> tuple[float, float] | None:
    latency_ms = t.latency_p99_ms.get(key)
    if t.measured_output_tok_s is None or latency_ms is None:
        return None
    return latency_ms, t.measured_output_tok_s


def _throughput_panel(ax: Axes, report: CampaignReport, key: str, label: str) -> None:
    feasible = [p for t in report.trials if t.feasible and (p := _plotted(t, key))]
    infeasible = [p for t in report.trials if not t.feasible and (p := _plotted(t, key))]
    if feasible:
        ax.scatter([x for x, _ in feasible], [y for _, y in feasible], s=30, c="tab:green",
                   label="feasible", zorder=3)
        front = pareto_front(feasible)
        ax.step(*zip(*front, strict=True), where="post", c="tab:green", lw=1.2, alpha=0.7,
                label="Pareto front (feasible)", zorder=2)
    if infeasible:
        ax.scatter([x for x, _ in infeasible], [y for _, y in infeasible], s=40, c="tab:red",
                   marker="x",
                   label="infeasible (at recorded rate)", zorder=3)
    if key in report.slo_ms:
        ax.axvline(report.slo_ms[key], c="grey", ls="--", lw=1, label=f"SLO {report.slo_ms[key]:g} ms")
    for t in report.trials:
        point = _plotted(t, key)
        if point is not None and (t.role != Role.PROPOSED or t is report.winner):
            name = (f"winner ({t.role})" if t is report.winner and t.role != Role.PROPOSED
                    else "winner" if t is report.winner else t.role)
            ax.annotate(f"#{t.number} {name}", point, textcoords="offset points", xytext=(5, 4),
                        fontsize=8)
    if report.winner is not None and (point := _plotted(report.winner, key)):
        ax.scatter(*point, s=160, marker="*", c="gold", edgecolors="black", zorder=4)
    ax.set_xlabel(label)
    ax.set_ylabel("output tok/s")
    ax.grid(alpha=0.3)


def plot_throughput_latency(report: CampaignReport, path: Path) -> None:
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    axes = fig.subplots(1, len(_PANELS))
    for ax, (key, label) in zip(axes, _PANELS, strict=True):
        _throughput_panel(ax, report, key, label)
    axes[0].legend(fontsize=8, loc="best")
    fig.suptitle(f"{report.study_name}: output throughput against P99 latency "
                 "(capacity for feasible trials)", fontsize=11)
    fig.savefig(path, dpi=_DPI, format="png")


def plot_capacity_by_trial(report: CampaignReport, path: Path) -> None:
    fig = Figure(figsize=(10, 4.2), layout="constrained")
    ax = fig.subplots()
    groups = (("feasible", lambda t: t.feasible, dict(c="tab:green", marker="o")),
              ("infeasible (measured or failed)",
               lambda t: not t.feasible and t.state != RecordState.REJECTED, dict(c="tab:red", marker="x")),
              ("rejected by a rule (no engine)", lambda t: t.state == RecordState.REJECTED,
               dict(c="lightgrey", marker="|")))
    for label, keep, style in groups:
        picked = [t for t in report.trials if keep(t)]
        if picked:
            ax.scatter([t.number for t in picked], [t.capacity_output_tok_s for t in picked],
                       s=36, label=label, zorder=3, **style)  # type: ignore[arg-type]
    steps = best_so_far(report.trials)
    if steps:
        ax.step(*zip(*steps, strict=True), where="post", c="tab:blue", lw=1.5,
                label="best so far (feasible)", zorder=2)
    for t in report.trials:
        if t.role != Role.PROPOSED:
            ax.annotate(t.role, (t.number, t.capacity_output_tok_s), textcoords="offset points",
                        xytext=(4, 5), fontsize=8)
    ax.set_xlabel("trial number")
    ax.set_ylabel("capacity (output tok/s under the SLO)")
    ax.set_title(f"{report.study_name}: capacity by trial", fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.savefig(path, dpi=_DPI, format="png")


def plot_importances(report: CampaignReport, path: Path) -> bool:
    """Draws the importances; False (and no file) when there are none to draw."""
    values = report.importances.values
    if not values:
        return False
    names = sorted(values, key=values.__getitem__)  # largest at the top of a barh
    fig = Figure(figsize=(8, 0.45 * len(names) + 1.4), layout="constrained")
    ax = fig.subplots()
    ax.barh(names, [values[n] for n in names], color="tab:blue")
    for y, name in enumerate(names):
        ax.annotate(f"{values[name]:.2f}", (values[name], y), textcoords="offset points",
                    xytext=(3, -3), fontsize=8)
    ax.set_xlabel("importance (fANOVA, share of the objective's variance)")
    ax.set_xlim(0, max(values.values()) * 1.15 or 1)
    ax.set_title(f"{report.study_name}: parameter importances", fontsize=11)
    fig.savefig(path, dpi=_DPI, format="png")
    return True


# The sweep views: latency against offered load, latency distributions at capacity, and tokens/s
# per GPU against tokens/s per user. One colour per config, the same in all three.

def _colours(configs: Sequence[tuple[str, ReportTrial]]) -> dict[int, str]:
    return {t.number: f"C{i % 10}" for i, (_, t) in enumerate(configs)}


def curve(t: ReportTrial) -> list[ReportReplay]:
    """A trial's replays that place on the offered-load axis, by offered rate; client-bound
    ones measured the client, not the engine, and are left out."""
    return sorted((r for r in t.replays if r.offered_request_s is not None and not r.client_bound),
                  key=lambda r: r.offered_request_s or 0.0)


def _log(axis: Axis, limits: tuple[float, float]) -> None:
    """A log axis labelled in plain numbers (1,000, not 10^3): 1, 2, 5, 10... over a short
    range, powers of ten over a long one (their labels would run into each other)."""
    lo, hi = limits
    subs = (1.0,) if hi > 200 * max(lo, 1e-12) else (1.0, 2.0, 5.0)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _slo_line(ax: Axes, report: CampaignReport, key: str, vertical: bool = False) -> None:
    limit = report.slo_ms.get(key)
    if limit is not None:
        line = ax.axvline if vertical else ax.axhline
        line(limit, c="grey", ls="--", lw=1, zorder=1)


def plot_latency_vs_load(report: CampaignReport, path: Path) -> bool:
    """TTFT, TPOT and E2E at P50/P90/P99 (rows, columns) against the offered request rate, one
    line per config over its capacity search's replays: filled where the replay met the SLO,
    hollow where it missed it, a star at capacity. False (no file) when no config has replays
    with percentiles."""
    configs = [(label, t) for label, t in report.sweep_configs() if curve(t)]
    if not configs:
        return False
    colours = _colours(configs)
    fig = Figure(figsize=(13, 10.5), layout="constrained")
    axes = fig.subplots(len(SWEEP_METRICS), len(SWEEP_PCTS), sharex=True)
    for row, metric in enumerate(SWEEP_METRICS):
        for col, pct in enumerate(SWEEP_PCTS):
            ax, key = axes[row][col], f"{metric}_{pct}_ms"
            for label, t in reversed(configs):  # the winner's drawn last, on top
                points = [(r.offered_request_s, r.latency_ms.get(key), r) for r in curve(t)]
                points = [(x, y, r) for x, y, r in points if x is not None and y is not None
                          and y > 0]
                if not points:
                    continue
                c = colours[t.number]
                ax.plot([x for x, _, _ in points], [y for _, y, _ in points], c=c,
                        lw=2.4 if t is report.winner else 1.3, label=label, zorder=2)
                for x, y, r in points:
                    ax.scatter([x], [y], s=110 if r.at_capacity else 22,
                               marker="*" if r.at_capacity else "o",
                               facecolors=c if r.slo_ok else "white", edgecolors=c, zorder=3)
            _slo_line(ax, report, key)
            ax.set_xscale("log")
            ax.set_yscale("log")
            _log(ax.xaxis, ax.get_xlim())
            _log(ax.yaxis, ax.get_ylim())
            ax.grid(alpha=0.3, which="both")
            ax.set_title(f"{_METRIC_LABELS[metric]} {pct.upper()}", fontsize=10)
            if col == 0:
                ax.set_ylabel(f"{_METRIC_LABELS[metric]} (ms)")
            if row == len(SWEEP_METRICS) - 1:
                ax.set_xlabel("offered load (requests/s)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    handles, labels = handles[::-1], labels[::-1]  # in the configs' order
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 5), fontsize=9)
    fig.suptitle(f"{report.study_name}: latency against offered load over each config's "
                 "capacity search (filled: met the SLO, hollow: missed it, star: capacity; "
                 "dashed: SLO ceiling)", fontsize=10)
    fig.savefig(path, dpi=_DPI, format="png")
    return True


def plot_latency_cdf(report: CampaignReport, path: Path) -> bool:
    """The distribution (CDF) of TTFT, TPOT and E2E over the requests of each config's replay at
    capacity, from the percentiles stored with it. False (no file) when none has them."""
    configs = [(label, t) for label, t in report.sweep_configs()
               if (at := t.at_capacity) is not None and at.quantiles is not None]
    if not configs:
        return False
    colours = _colours(configs)
    fig = Figure(figsize=(13, 4.6), layout="constrained")
    axes = fig.subplots(1, len(SWEEP_METRICS))
    for ax, metric in zip(axes, SWEEP_METRICS, strict=True):
        for label, t in reversed(configs):  # the winner's drawn last, on top
            q = t.at_capacity.quantiles  # type: ignore[union-attr]
            assert q is not None
            pairs = [(v, p) for v, p in zip(q.get(f"{metric}_ms", ()), q["pcts"], strict=False)
                     if v is not None and p is not None and v > 0]
            if pairs:
                ax.plot([v for v, _ in pairs], [p for _, p in pairs], c=colours[t.number],
                        lw=2.4 if t is report.winner else 1.3, marker=".", ms=4, label=label)
        for pct in SWEEP_PCTS:
            _slo_line(ax, report, f"{metric}_{pct}_ms", vertical=True)
        ax.set_xscale("log")
        _log(ax.xaxis, ax.get_xlim())
        ax.set_ylim(0, 100)
        ax.set_xlabel(f"{_METRIC_LABELS[metric]} (ms)")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("percent of requests at or below")
    handles, labels = axes[0].get_legend_handles_labels()
    axes[0].legend(handles[::-1], labels[::-1], fontsize=8, loc="lower right")
    fig.suptitle(f"{report.study_name}: latency distribution at capacity (dashed: SLO "
                 "ceilings)", fontsize=10)
    fig.savefig(path, dpi=_DPI, format="png")
    return True


def pareto_frontier(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (tokens/s/user, tokens/s/GPU) points no other beats on both, as `vllm bench sweep
    plot_pareto` finds them: from the highest tokens/s/user down, each point whose tokens/s/GPU
    is at least the best so far (so a tie stays on it, as in vLLM's). Sorted by tokens/s/user."""
    front: list[tuple[float, float]] = []
    best = float("-inf")
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if y >= best - 1e-9:
            front.append((x, y))
            best = max(best, y)
    return sorted(front)


def pareto_points(report: CampaignReport) -> list[tuple[ReportTrial, ReportReplay, float, float]]:
    """(trial, replay, tokens/s/user, tokens/s/GPU) of every replay that has both."""
    found = []
    for t in report.pareto_trials():
        for r in t.replays:
            per_user = r.tokens_per_user
            if per_user is not None and not r.client_bound and report.gpu_count:
                found.append((t, r, per_user, r.output_tok_s / report.gpu_count))
    return found


def plot_pareto_per_gpu(report: CampaignReport, path: Path) -> bool:
    """Output tokens/s per GPU against tokens/s per user over every replay of every measured
    config, with the Pareto frontier (`vllm bench sweep plot_pareto`'s axes and frontier), and
    the one within the SLO. False (no file) when no replay has its concurrency."""
    points = pareto_points(report)
    if not points:
        return False
    fig = Figure(figsize=(10, 6), layout="constrained")
    ax = fig.subplots()
    met = [(x, y) for _, r, x, y in points if r.slo_ok]
    missed = [(x, y) for _, r, x, y in points if not r.slo_ok]
    if met:
        ax.scatter([x for x, _ in met], [y for _, y in met], s=18, c="0.55", alpha=0.6,
                   label="replays (met the SLO)", zorder=2)
    if missed:
        ax.scatter([x for x, _ in missed], [y for _, y in missed], s=22, c="0.55", marker="x",
                   alpha=0.6, label="replays (missed the SLO)", zorder=2)
    front = pareto_frontier([(x, y) for _, _, x, y in points])
    ax.plot(*zip(*front, strict=True), c="black", marker="o", ms=4, lw=1.4,
            label="Pareto frontier (all replays)", zorder=3)
    if met:
        within = pareto_frontier(met)
        ax.plot(*zip(*within, strict=True), c="tab:green", ls="--", lw=1.4,
                label="Pareto frontier (within the SLO)", zorder=3)
    configs = report.sweep_configs()
    colours = _colours(configs)
    for label, t in reversed(configs):  # the winner's drawn last, on top
        mine = sorted(((x, y) for tt, _, x, y in points if tt is t), key=lambda p: -p[0])
        if mine:
            ax.plot(*zip(*mine, strict=True), c=colours[t.number], alpha=0.8, zorder=4,
                    lw=2.2 if t is report.winner else 1.0, label=label)
        at = t.at_capacity
        if at is not None and (per_user := at.tokens_per_user) is not None:
            ax.scatter([per_user], [at.output_tok_s / report.gpu_count], s=140, marker="*",
                       c=colours[t.number], edgecolors="black", zorder=5)
    ax.set_xlabel("tokens/s/user (output tok/s / mean requests in flight)")
    ax.set_ylabel(f"tokens/s/GPU (output tok/s / {report.gpu_count} GPUs)")
    ax.grid(True, ls="--", lw=0.5, alpha=0.6)
    handles, labels = ax.get_legend_handles_labels()
    n = len(handles) - sum(1 for _, t in configs if any(tt is t for tt, _, _, _ in points))
    ax.legend(handles[:n] + handles[n:][::-1], labels[:n] + labels[n:][::-1], fontsize=8,
              loc="best")
    ax.set_title(f"{report.study_name}: throughput per GPU against speed per user, every replay "
                 "(star: capacity)", fontsize=10)
    fig.savefig(path, dpi=_DPI, format="png")
    return True

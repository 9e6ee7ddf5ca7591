"""The report's PNG plots, drawn with matplotlib's object API (no pyplot: no global figure
state, no display, nothing left open between reports)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from autotune.report.data import CampaignReport, ReportTrial
from autotune.vocabulary import RecordState, Role

THROUGHPUT_LATENCY_PNG = "throughput_vs_p99.png"
CAPACITY_BY_TRIAL_PNG = "capacity_by_trial.png"
IMPORTANCES_PNG = "param_importances.png"
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

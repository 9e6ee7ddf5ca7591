"""A picture of a trace: request rate over time (per path) and the two length distributions.
Drawn with matplotlib's Agg backend (no display needed), written atomically as a PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from autotune.atomic import atomic_write
from autotune.traffic.split import PATH_NAMES
from autotune.traffic.stats import paths, trace_stats
from autotune.traffic.trace import Trace

PATH_COLOURS = {"hot": "tab:red", "warm": "tab:orange", "cold": "tab:blue"}


def rate_bin_s(duration_s: float, bins: int = 120) -> float:
    """A round bin width giving about `bins` bins over the trace (at least 1 s)."""
    raw = max(duration_s / bins, 1.0)
    for nice in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400):
        if raw <= nice:
            return float(nice)
    return float(np.ceil(raw / 86400) * 86400)


def _length_bins(values: np.ndarray) -> np.ndarray:
    top = max(int(values.max()), 2)
    return np.unique(np.geomspace(1, top * 1.05, 50).round())


def plot_trace(trace: Trace, path: Path, *, hot_max_tokens: int = 512,
               warm_min_share: float = 0.01) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stats = trace_stats(trace, hot_max_tokens=hot_max_tokens, warm_min_share=warm_min_share)
    labels = np.asarray(paths(trace, hot_max_tokens=hot_max_tokens, warm_min_share=warm_min_share))
    bin_s = rate_bin_s(trace.duration_s)
    edges = np.arange(0.0, trace.duration_s + bin_s, bin_s)
    if len(edges) < 2:
        edges = np.array([0.0, bin_s])
    hours = trace.duration_s > 3 * 3600
    scale, unit = (3600.0, "h") if hours else (60.0, "min") if trace.duration_s > 600 else (1.0, "s")

    fig, (ax_rate, ax_prompt, ax_output) = plt.subplots(
        3, 1, figsize=(10, 10), gridspec_kw={"height_ratios": [1.3, 1, 1]})
    bottom = np.zeros(len(edges) - 1)
    for name in PATH_NAMES:
        counts, _ = np.histogram(trace.arrival_s[labels == name], bins=edges)
        if counts.any():
            ax_rate.bar(edges[:-1] / scale, counts / bin_s, width=bin_s / scale, bottom=bottom,
                        align="edge", color=PATH_COLOURS[name],
                        label=f"{name} {stats['path_mix'][name]:.0%}")
            bottom += counts / bin_s
    ax_rate.set_title(f"{trace.name}: {stats['requests']:,} requests over "
                      f"{trace.duration_s / scale:,.1f} {unit}, mean {stats['rate_rps']:.2f} req/s, "
                      f"burstiness CV {stats['burstiness_cv']:.2f}", fontsize=11)
    ax_rate.set_xlabel(f"time from first request ({unit})")
    ax_rate.set_ylabel(f"requests/s (per {bin_s:g} s bin)")
    ax_rate.legend(title="path", loc="upper right")
    for ax, values, key, colour in ((ax_prompt, trace.prompt_tokens, "prompt_tokens", "tab:green"),
                                    (ax_output, trace.output_tokens, "output_tokens", "tab:purple")):
        ax.hist(values, bins=_length_bins(values), color=colour, alpha=0.8)
        ax.set_xscale("log")
        p = stats[key]
        for q, style in (("p50", "-"), ("p90", "--"), ("p99", ":")):
            ax.axvline(p[q], color="black", linestyle=style, linewidth=1,
                       label=f"{q} {p[q]:,.0f}")
        ax.set_xlabel(f"{key.replace('_', ' ')} per request (log scale)")
        ax.set_ylabel("requests")
        ax.legend(loc="upper right")
    ax_prompt.set_title(f"prompt lengths (prefix share {stats['prefix_share_ratio']:.0%} of "
                        "prompt tokens)", fontsize=11)
    ax_output.set_title("output lengths", fontsize=11)
    fig.tight_layout()
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    finally:
        plt.close(fig)

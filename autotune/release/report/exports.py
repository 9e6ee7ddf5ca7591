"""The report's data as tables: trials, replays and the latency quantiles at capacity, each as CSV
and as JSON (a list of records with the CSV's columns), for pandas, spreadsheets and scripts.

    pd.read_csv("trials.csv"); pd.read_json("replays.json")

Every file has the same columns whatever the campaign holds: a figure a trial or replay does not
have (a replay stored before replays kept their percentiles, a trial that never ran) is empty in
CSV and null in JSON.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from autotune.release.report.data import SWEEP_KEYS, CampaignReport, ReportReplay, ReportTrial

TRIALS, REPLAYS, QUANTILES = "trials", "replays", "quantiles"
FILES = tuple(f"{name}.{ext}" for name in (TRIALS, REPLAYS, QUANTILES) for ext in ("csv", "json"))

# At the point a trial was measured: its capacity if feasible, else the recorded rate.
_MEASURED = ("request_s", "goodput_request_s", "error_rate",
             *(f"{m}_{p}_ms" for m in ("ttft", "tpot", "itl", "e2e")
               for p in ("p50", "p90", "p99", "p99_9")))
TRIAL_COLUMNS = ("campaign", "deployment", "trial", "role", "fidelity", "state", "feasible",
                 "capacity_output_tok_s", "capacity_rate_scale", "gpus",
                 "capacity_output_tok_s_per_gpu", "measured_output_tok_s", *_MEASURED,
                 "failure_class", "failure_message", "repeat_of", "replays")
REPLAY_COLUMNS = ("campaign", "deployment", "trial", "role", "fidelity", "repeat_of", "replay",
                  "rate_scale", "offered_request_s", "request_s", "output_tok_s", "slo_ok",
                  "client_bound", "at_capacity", *SWEEP_KEYS, "error_rate", "send_lag_p99_ms",
                  "mean_concurrent_requests", "max_concurrent_requests", "gpus",
                  "output_tok_s_per_gpu", "output_tok_s_per_user")
QUANTILE_COLUMNS = ("campaign", "deployment", "trial", "role", "fidelity", "percentile",
                    "ttft_ms", "tpot_ms", "e2e_ms")


def _cell(value: Any) -> Any:
    """A nested engine argument (speculative_config) as the JSON vLLM's flag takes."""
    return json.dumps(value, separators=(",", ":")) if isinstance(value, dict | list) else value


def _per(value: float | None, count: float | None) -> float | None:
    return value / count if value is not None and count else None


def _head(report: CampaignReport, t: ReportTrial) -> dict[str, Any]:
    return {"campaign": report.campaign, "deployment": report.deployment, "trial": t.number,
            "role": t.role, "fidelity": t.fidelity}


def trial_rows(report: CampaignReport) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, rows): one row per trial, its engine arguments as `arg.NAME` columns and its
    constraint values (> 0: violated) as `constraint.NAME`."""
    args = list(dict.fromkeys(k for t in report.trials for k in t.config))
    constraints = list(dict.fromkeys(k for t in report.trials for k in t.constraints))
    columns = [*TRIAL_COLUMNS, *(f"arg.{a}" for a in args),
               *(f"constraint.{c}" for c in constraints)]
    rows = []
    for t in report.trials:
        capacity = t.capacity_output_tok_s if t.feasible else None
        rows.append({
            **_head(report, t), "state": t.state, "feasible": t.feasible,
            "capacity_output_tok_s": t.capacity_output_tok_s,
            "capacity_rate_scale": t.capacity_rate_scale, "gpus": report.gpu_count,
            "capacity_output_tok_s_per_gpu": _per(capacity, report.gpu_count),
            "measured_output_tok_s": t.measured_output_tok_s,
            **{k: t.figure(k) for k in _MEASURED},
            "failure_class": t.failure_class, "failure_message": t.failure_message,
            "repeat_of": t.repeat_of, "replays": len(t.replays),
            **{f"arg.{a}": _cell(t.config.get(a)) for a in args},
            **{f"constraint.{c}": t.constraints.get(c) for c in constraints}})
    return columns, rows


def _replay_row(report: CampaignReport, t: ReportTrial, r: ReportReplay) -> dict[str, Any]:
    return {**_head(report, t), "repeat_of": t.repeat_of, "replay": r.index,
            "rate_scale": r.rate_scale, "offered_request_s": r.offered_request_s,
            "request_s": r.request_s, "output_tok_s": r.output_tok_s, "slo_ok": r.slo_ok,
            "client_bound": r.client_bound, "at_capacity": r.at_capacity,
            **{k: r.latency_ms.get(k) for k in SWEEP_KEYS}, "error_rate": r.error_rate,
            "send_lag_p99_ms": r.send_lag_p99_ms,
            "mean_concurrent_requests": r.mean_concurrent_requests,
            "max_concurrent_requests": r.max_concurrent_requests, "gpus": report.gpu_count,
            "output_tok_s_per_gpu": _per(r.output_tok_s, report.gpu_count),
            "output_tok_s_per_user": r.tokens_per_user}


def replay_rows(report: CampaignReport) -> tuple[list[str], list[dict[str, Any]]]:
    """One row per replay of every trial's capacity search, in the order they ran."""
    return list(REPLAY_COLUMNS), [_replay_row(report, t, r) for t in report.trials
                                  for r in t.replays]


def quantile_rows(report: CampaignReport) -> tuple[list[str], list[dict[str, Any]]]:
    """One row per percentile of each trial's replay at capacity (its latency distribution)."""
    rows = []
    for t in report.trials:
        at = t.at_capacity
        if at is None or at.quantiles is None:
            continue
        q = at.quantiles
        for i, pct in enumerate(q["pcts"]):
            rows.append({**_head(report, t), "percentile": pct,
                         **{k: q[k][i] if k in q else None
                            for k in ("ttft_ms", "tpot_ms", "e2e_ms")}})
    return list(QUANTILE_COLUMNS), rows


def _json(value: Any) -> Any:
    """NaN and infinities (no figure) as null: JSON has no NaN."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def write_exports(report: CampaignReport, out_dir: Path) -> list[Path]:
    """trials, replays and quantiles, each as .csv and .json, into out_dir. The JSON is written
    with the standard library: every float exactly as stored (pandas rounds to 10 digits)."""
    import pandas as pd

    written = []
    for name, (columns, rows) in ((TRIALS, trial_rows(report)), (REPLAYS, replay_rows(report)),
                                  (QUANTILES, quantile_rows(report))):
        pd.DataFrame(rows, columns=columns).to_csv(out_dir / f"{name}.csv", index=False)
        records = [{c: _json(row.get(c)) for c in columns} for row in rows]
        with (out_dir / f"{name}.json").open("w", encoding="utf-8") as f:
            json.dump(records, f, indent=1, allow_nan=False)
            f.write("\n")
        written += [out_dir / f"{name}.csv", out_dir / f"{name}.json"]
    return written

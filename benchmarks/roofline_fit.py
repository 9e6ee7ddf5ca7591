"""How far the roofline is from the measured tables of a model it has no table for, before and
after fitting its GPU coefficients to the other models' tables (autotune/workers/sim/roofline_fit.py).

For every GPU whose committed tables cover at least three models, and for each model: the
roofline's GPU step time against that model's tables with the generic bundled coefficients
(profiles/gpu.yaml) and with coefficients fitted to the other models' tables of the same GPU
(leave one model out), side by side in one run; then the fit to every table (what
profiles/gpu/<GPU>.yaml holds). Errors are |roofline / table - 1| over the fit's points
(decode steps of 1-256 sequences over 256-16,384 context tokens each, prefill steps of
16-16,384 tokens): median, P90 and the signed median (%). The judge rows of gpu_fidelity.py
take no part.

Usage: PYTHONPATH=. .venv/bin/python benchmarks/roofline_fit.py [--gpu H200-141GB]
The last line is JSON: {"gpus": {GPU: {"all": {...}, "by_model": {...}}}}.
"""

from __future__ import annotations

import argparse
import json
import time

from rich.console import Console
from rich.table import Table

from autotune.workers.sim.roofline_fit import fittable_gpus, fitted_profile


def _cell(e: dict[str, float]) -> str:
    return f"{e['ape_median']:.1f} / {e['ape_p90']:.1f} / {e['signed_median']:+.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="append", help="only this GPU (repeatable)")
    args = parser.parse_args()
    start = time.perf_counter()
    out = {}
    table = Table(title="Roofline GPU step time against a model's own measured tables: "
                        "|error| median / P90 / signed median, %")
    for col in ("GPU", "model", "tables", "generic coefficients", "fitted without the model"):
        table.add_column(col)
    for gpu in args.gpu or fittable_gpus():
        fit = fitted_profile(gpu).fit
        assert fit is not None
        for model, row in fit["leave_one_model_out"].items():
            table.add_row(gpu, model, str(row["tables"]), _cell(row["generic"]),
                          _cell(row["fitted_without_it"]))
        table.add_row(gpu, "all (fit to every table)", str(len(fit["tables"])),
                      _cell(fit["error_generic"]), _cell(fit["error_fitted"]), end_section=True)
        out[gpu] = {"all": {"generic": fit["error_generic"], "fitted": fit["error_fitted"]},
                    "by_model": fit["leave_one_model_out"]}
    Console(width=160).print(table)
    print(json.dumps({"gpus": out, "wall_s": round(time.perf_counter() - start, 1)}))


if __name__ == "__main__":
    main()

"""The roofline step model against the measured kernel tables, step by step.

For every committed measured table (autotune/workers/sim/kernels/) of a GPU, model, layout and precision
the GPU fidelity rows ran at (benchmarks/gpu_fidelity_rows.py), the same engine is built with
the roofline and the bundled, uncalibrated `gpu` profile (not the GPU's fit to the tables:
benchmarks/roofline_fit.py judges that), and the GPU time of one step is set
side by side: decode steps at 1, 32 and 128 sequences over 4,096 context tokens each, and a
prefill of 512, 2,048 and 8,192 tokens alone. Printed as roofline / table: below 1 the roofline
is fast. A diagnostic for calibrating the roofline against the kernel tables (never against the
judge rows' latencies); docs/benchmarks/gpu-fidelity.md, "How far the roofline is from the
tables".

Usage: PYTHONPATH=. .venv/bin/python benchmarks/roofline_vs_tables.py [--gpu H200-141GB]
The last line is JSON: {"tables": N, "ratios": {"GPU/model/layout/precision": {...}, ...}}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from autotune.errors import ConfigError, EngineStartError
from autotune.workers.sim.engine import start_perf
from autotune.workers.sim.perf import PerfModel
from autotune.workers.sim.profile import BUNDLED, load_profile
from autotune.workers.sim.step_table import StepTable, select_step_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_fidelity import row_engine
from gpu_fidelity_rows import MatchedRow, load_rows, match_rows

CONTEXT_TOKENS = 4096
DECODE_SEQS = (1, 32, 128)
PREFILL_TOKENS = (512, 2048, 8192)


def roofline_for(m: MatchedRow) -> PerfModel:
    """The row's engine (as gpu_fidelity.py builds it) on the roofline with the bundled,
    generic profile."""
    dep, shape = row_engine(m)
    # The generic coefficients, not the GPU's fit to these same tables (roofline_fit.py).
    return start_perf(shape, dep, load_profile(BUNDLED / "gpu.yaml"))


def ratios(roof: PerfModel, table: StepTable) -> dict[str, float]:
    """Roofline GPU ms / table GPU ms at each decode batch and prefill size."""
    out = {}
    for seqs in DECODE_SEQS:
        kv = seqs * CONTEXT_TOKENS
        out[f"decode_{seqs}"] = roof.step_parts_s(seqs, kv)[0] * 1e3 / table.gpu_ms(seqs, kv)
    for tokens in PREFILL_TOKENS:
        roofline_ms = roof.step_parts_s(0, 0, tokens, 1, tokens * tokens / 2)[0] * 1e3
        out[f"prefill_{tokens}"] = roofline_ms / table.gpu_ms(0, 0, tokens)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="", help="only this GPU's tables (catalogue name)")
    args = parser.parse_args()
    matched, _ = match_rows(load_rows())
    found: dict[tuple[str, str, str, str], dict[str, float]] = {}
    for m in matched:
        key = (m.gpu.name, m.catalogue_model, m.layout, m.precision)
        if key in found or (args.gpu and m.gpu.name != args.gpu):
            continue
        chosen = select_step_model(*key)
        if chosen.table is None:
            continue
        try:
            found[key] = ratios(roofline_for(m), chosen.table)
        except (ConfigError, EngineStartError, ValidationError):
            continue  # a layout the roofline engine refuses (e.g. out of memory): no ratio
    table = Table(title="GPU time of one step, roofline / measured table (below 1: roofline "
                        "fast)")
    for col in ("GPU", "model", "layout", "precision",
                *(f"decode {s} x {CONTEXT_TOKENS}" for s in DECODE_SEQS),
                *(f"prefill {t}" for t in PREFILL_TOKENS)):
        table.add_column(col, justify="right" if col[0].islower() and " " in col else "left")
    for key, r in sorted(found.items()):
        table.add_row(*key, *(f"{v:.2f}" for v in r.values()))
    Console(width=200).print(table)
    print(json.dumps({"tables": len(found),
                      "ratios": {"/".join(k): {n: round(v, 3) for n, v in r.items()}
                                 for k, r in sorted(found.items())}}))


if __name__ == "__main__":
    main()

"""The simulator's GPU step models as its engines' notes name them (autotune/workers/sim/backend.py
`notes()["step_model"]`, kept with each simulated trial), read back by the layers that may
not import the simulator: the campaign (its opening line, resume) and the report.

A label starts with what priced the steps: "measured table GPU/model/layout/precision (source)",
"partly estimated table ..." (some kernels estimated: the label says which and by how much),
"roofline (no measured table for GPU/model/layout/precision)" (the measured model's fallback)
or "roofline" (asked for); then "; profile GPU/model vN (...)", where the parentheses say
whether the roofline's coefficients are fitted and to what."""

from __future__ import annotations

import re
from collections.abc import Iterable

MEASURED, ESTIMATED, FALLBACK, ROOFLINE = ("measured", "partly estimated", "no table",
                                           "roofline")
_LAYOUT = re.compile(r"/(DP\d+(?:xTP\d+)?(?:\+EP)?|TP\d+(?:\+EP)?)/")
_MISSING = re.compile(r"\((no measured table for [^)]*)\)")
UNCALIBRATED = "uncalibrated GPU coefficients: capacities can be several times off on a GPU"
CALIBRATED = "GPU coefficients calibrated on real trials (autotune sim calibrate)"
# How a profile fitted to a GPU's measured tables (autotune/workers/sim/roofline_fit.py) is named in a
# label's "profile GPU/model vN (...)" part, followed by its error on models left out of it.
TABLE_FIT = "GPU coefficients fitted to measured kernel tables"
_PROFILE = re.compile(r"; profile (.+ v\d+ \(([^()]*)\))$")


def profile(label: str) -> str | None:
    """The label's profile part, "GPU/model vN (how it was fitted)": what set the roofline's
    coefficients (and the CPU costs); None in a label without one."""
    m = _PROFILE.search(label)
    return m.group(1) if m else None


def coefficients(label: str) -> str:
    """What the label says of the roofline's GPU coefficients: fitted to the GPU's measured
    tables (and how far off that leaves a model without one), calibrated on real trials, or
    uncalibrated."""
    m = _PROFILE.search(label)
    words = m.group(2) if m else "not fitted"
    if words.startswith(TABLE_FIT):
        return words
    return CALIBRATED if words == "fitted" else UNCALIBRATED


def kind(label: str) -> str:
    """MEASURED, ESTIMATED, FALLBACK or ROOFLINE: what a label says priced the steps."""
    if label.startswith("measured table"):
        return MEASURED
    if label.startswith("partly estimated table"):
        return ESTIMATED
    return FALLBACK if label.startswith("roofline (no measured table") else ROOFLINE


def setting(label: str) -> str:
    """The AUTOTUNE_SIM__STEP_MODEL value a trial with this label ran under."""
    return "roofline" if kind(label) == ROOFLINE else "measured"


def summary(runs: Iterable[tuple[str | None, str]]) -> str | None:
    """One line for people from (parallel layout, label) pairs, one per engine: each kind of
    step model with the layouts it priced, the tables' source, the first missing table and how
    many more are missing; None without a pair (no simulated trial). A layout of None is read
    from the label (its table's layout)."""
    layouts: dict[str, list[str]] = {}
    sources, missing, roofline = [], [], []
    for name, label in runs:
        found = kind(label)
        if found in (FALLBACK, ROOFLINE):
            roofline += [coefficients(label)] if coefficients(label) not in roofline else []
        names = layouts.setdefault(found, [])
        if name is None and (m := _LAYOUT.search(label)):
            name = m.group(1)
        if name and name not in names:
            names.append(name)
        if found in (MEASURED, ESTIMATED) and " (" in label:
            src = label.split(" (", 1)[1].split(")", 1)[0]
            sources += [src] if src not in sources else []
        if found == FALLBACK and (m := _MISSING.search(label)):
            missing += [m.group(1)] if m.group(1) not in missing else []
    if not layouts:
        return None

    def where(k: str) -> str:
        return f" for {', '.join(layouts[k])}" if layouts[k] else ""

    parts = []
    if MEASURED in layouts:
        parts.append(f"measured kernel tables{where(MEASURED)}")
    if ESTIMATED in layouts:
        parts.append(f"partly estimated kernel tables{where(ESTIMATED)} (each trial's notes say "
                     "which part, and by how much it may be off)")
    text = "; ".join(parts) + (f" (from {'; '.join(sources)})" if sources else "")
    gpu_coefficients = "; ".join(roofline)
    if FALLBACK in layouts:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        text += ("; " if text else "") + (f"the roofline{where(FALLBACK)} ({missing[0]}{more}; "
                                          f"{gpu_coefficients})")
    if ROOFLINE in layouts:
        text += ("; " if text else "") + (f"the roofline, as AUTOTUNE_SIM__STEP_MODEL asks "
                                          f"({gpu_coefficients})")
    return text

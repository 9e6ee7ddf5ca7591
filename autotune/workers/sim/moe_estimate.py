"""Estimate a MoE kernel's time on an expert shape nobody measured, from rows of the same
kernel measured on other shapes.

Used by autotune/workers/sim/kernels_compose.py for DeepSeek-V4-Flash's MXFP4 experts on H200: the
kernel vLLM runs there (Marlin w4a16, see that module) was measured by aiconfigurator only on
Kimi-K3's experts (hidden 3584, width 3072, 896 experts, top-16), under many splits (moe_tp,
moe_ep). Each split is a different per-GPU problem (width / moe_tp, experts / moe_ep, routed
tokens per input token topk / moe_ep), so the rows cover a range of local shapes.

Method ("anchor and ratio"). A four-term cost model, fitted to the measured rows by
non-negative least squares on relative error:

    ms = c0 + c1 * weight_GB + c2 * TFLOP + c3 * activation_GB

weight_GB: the MXFP4 weights (0.5 B + one e8m0 scale per 32) of the experts a batch touches
(balanced routing: min(local experts, routed tokens)); TFLOP: 2 * routed tokens * 3 * hidden
* local width; activation_GB: the routed tokens' BF16 rows read and written. The model alone is
coarse (it misses tile and launch effects), so it is only used for a ratio: the estimate for a
target split is the measured time of the nearest measured split (in log local shape) at the
same token count, times model(target) / model(anchor). `leave_one_split_out` measures how far
that lands from rows it did not see.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

MXFP4_BYTES_PER_WEIGHT = 0.5 + 1 / 32  # FP4 value plus an e8m0 scale per 32-element block
BF16_BYTES = 2


@dataclass(frozen=True)
class MoeShape:
    """One MoE problem as aiconfigurator keys its rows: the whole layer and its split."""

    hidden: int
    inter: int  # one expert's width, before moe_tp
    experts: int
    topk: int
    moe_tp: int = 1
    moe_ep: int = 1

    @property
    def local(self) -> tuple[float, float, float]:
        """Per-GPU width, experts, and routed tokens per input token."""
        return self.inter / self.moe_tp, self.experts / self.moe_ep, self.topk / self.moe_ep


def features(shape: MoeShape, num_tokens: np.ndarray) -> np.ndarray:
    """The cost model's terms (1, weight GB, TFLOP, activation GB) per token count."""
    width, experts, per_token = shape.local
    routed = np.asarray(num_tokens, dtype=float) * per_token
    active = np.minimum(experts, routed)
    weight_gb = active * 3 * shape.hidden * width * MXFP4_BYTES_PER_WEIGHT / 1e9
    tflop = 2 * routed * 3 * shape.hidden * width / 1e12
    act_gb = routed * shape.hidden * 2 * BF16_BYTES / 1e9
    return np.stack([np.ones_like(routed), weight_gb, tflop, act_gb], axis=-1)


Curve = tuple[np.ndarray, np.ndarray]  # (num_tokens ascending, ms)


def fit(curves: Mapping[MoeShape, Curve]) -> np.ndarray:
    """Non-negative coefficients of the cost model, least squares on relative error."""
    x = np.concatenate([features(s, n) / ms[:, None] for s, (n, ms) in curves.items()])
    coef, _ = nnls(x, np.ones(len(x)))
    return coef


def _log_shape(shape: MoeShape) -> np.ndarray:
    width, experts, per_token = shape.local
    return np.log([shape.hidden * width, experts, per_token])


def nearest(target: MoeShape, candidates: Iterable[MoeShape]) -> MoeShape:
    """The measured split whose local shape is closest to the target's (log distance)."""
    t = _log_shape(target)
    return min(candidates, key=lambda s: float(np.sum((_log_shape(s) - t) ** 2)))


def _at(curve: Curve, num_tokens: np.ndarray) -> np.ndarray:
    """The measured time at these token counts: log-log interpolation between rows, the end
    segments extended."""
    n, ms = curve
    ln, lm, q = np.log(n), np.log(ms), np.log(np.asarray(num_tokens, dtype=float))
    out = np.interp(q, ln, lm)
    for edge, (a, b) in (("lo", (0, 1)), ("hi", (-2, -1))):
        mask = q < ln[0] if edge == "lo" else q > ln[-1]
        slope = (lm[b] - lm[a]) / (ln[b] - ln[a])
        out[mask] = lm[a] + slope * (q[mask] - ln[a])
    return np.exp(out)


def estimate_ms(target: MoeShape, num_tokens: np.ndarray,
                curves: Mapping[MoeShape, Curve]) -> np.ndarray:
    """The target's kernel time in ms at these token counts, from the measured curves."""
    coef = fit(curves)
    anchor = nearest(target, curves)
    ratio = (features(target, num_tokens) @ coef) / (features(anchor, num_tokens) @ coef)
    return _at(curves[anchor], num_tokens) * ratio


def leave_one_split_out(curves: Mapping[MoeShape, Curve]) -> np.ndarray:
    """Relative errors (estimate / measured - 1) of every measured row, each split estimated
    from the other splits only (both the fit and the anchor)."""
    errors = []
    for held, (n, ms) in curves.items():
        rest = {s: c for s, c in curves.items() if s != held}
        errors.append(estimate_ms(held, n, rest) / ms - 1)
    return np.concatenate(errors)


def error_summary(errors: np.ndarray) -> dict[str, float | int]:
    """Median, 90th percentile and largest absolute relative error, and the row count."""
    a = np.abs(errors)
    return {"rows": int(a.size), "median": round(float(np.median(a)), 3),
            "p90": round(float(np.quantile(a, 0.9)), 3), "max": round(float(a.max()), 3)}

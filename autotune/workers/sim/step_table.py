"""Measured step-time tables: reading them, interpolating them, and choosing the step model.

A table (autotune/workers/sim/kernels/*.json, written by `autotune sim kernels build`) holds the GPU time
in ms of one forward pass of one DP rank for one GPU, model, parallel layout and precision, on a
grid of decode batches (sequences x context tokens per sequence) mixed with a prefill chunk
(tokens, no earlier context), plus a prefill-only grid over the chunk's earlier context (chunked
prefill of a long prompt). Every DP rank is taken as equally loaded, as the source model does.
The grid is dense where step times bend (small batches) and the reader interpolates linearly on
each axis, so with the batch fixed a decode step stays affine in its context between grid
points: the closed-form summing of decode runs keeps working with the grid points as breaks.

`select_step_model` names the step model a simulated engine would use: the measured table for
its GPU, model, layout and precision if the repository has one, else the roofline.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autotune.domain.catalogue import Model

TABLES_DIR = Path(__file__).resolve().parent / "kernels"
TABLE_FORMAT = 1
ROOFLINE = "roofline"
MEASURED = "measured"  # the default: the table where there is one, else the roofline


def layout_name(tp: int, dp: int = 1, ep: bool = False) -> str:
    """The layout's short name: TP8, TP8+EP, DP2xTP4+EP, DP8+EP (TP1 is left out)."""
    core = f"TP{tp}" if dp == 1 else (f"DP{dp}" if tp == 1 else f"DP{dp}xTP{tp}")
    return core + ("+EP" if ep else "")


_LAYOUT = re.compile(r"(?:DP(\d+))?(X)?(?:TP(\d+))?(\+EP)?")


def parse_layout(text: str) -> tuple[int, int, bool]:
    """(tp, dp, ep) of a layout name as `layout_name` writes it; ValueError otherwise."""
    m = _LAYOUT.fullmatch(text.strip().upper())
    if not m or not (m.group(1) or m.group(3)) or bool(m.group(2)) != bool(m.group(1) and m.group(3)):
        raise ValueError(f"parallel layout {text!r}: expected TP<n>, TP<n>+EP, DP<n>xTP<m>+EP "
                         "or DP<n>+EP")
    tp, dp = int(m.group(3) or 1), int(m.group(1) or 1)
    if tp < 1 or dp < 1:
        raise ValueError(f"parallel layout {text!r}: sizes must be at least 1")
    return tp, dp, bool(m.group(4))


def model_precision(model: Model) -> str:
    """The precision label of the catalogue model's checkpoint: dense[/experts] quantisation."""
    return f"{model.dense_quant}/{model.expert_quant}" if model.num_experts else model.dense_quant


def _segment(axis: list[float], x: float) -> tuple[int, float]:
    """Index i and weight w with x = (1 - w) * axis[i] + w * axis[i + 1]. Below the grid the
    first value holds (w = 0); above it the last segment extends linearly (step times keep
    growing with tokens)."""
    if len(axis) == 1 or x <= axis[0]:
        return 0, 0.0
    i = min(bisect.bisect_right(axis, x) - 1, len(axis) - 2)
    return i, (x - axis[i]) / (axis[i + 1] - axis[i])


def _segments(axis: list[float], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_segment` of every value of x at once (the same arithmetic, so the same floats)."""
    if len(axis) == 1:
        return np.zeros(len(x), dtype=np.intp), np.zeros(len(x))
    grid = np.asarray(axis)
    i = np.minimum(np.searchsorted(grid, x, side="right") - 1, len(axis) - 2)
    below = x <= grid[0]
    i = np.where(below, 0, i)
    w = np.where(below, 0.0, (x - grid[i]) / (grid[i + 1] - grid[i]))
    return i, w


def _has_shape(grid: list[list[list[float]]], shape: tuple[int, int, int]) -> bool:
    return (len(grid) == shape[0] and all(len(r) == shape[1] for r in grid)
            and all(len(c) == shape[2] for r in grid for c in r))


@dataclass(frozen=True)
class StepTable:
    """One measured table. ms[p][b][k]: GPU ms of a step with prefill_tokens[p] prompt tokens
    and decode_seqs[b] sequences decoding over kv_per_seq[k] context tokens each;
    prefill_ctx_ms[p][c]: a prefill-only step of prefill_tokens[p] tokens after
    prefill_context[c] earlier tokens of the same prompt."""

    gpu: str
    model: str
    layout: str
    precision: str
    source: dict[str, Any]
    prefill_tokens: list[float]
    decode_seqs: list[float]
    kv_per_seq: list[float]
    ms: list[list[list[float]]]
    prefill_context: list[float]
    prefill_ctx_ms: list[list[float]]
    path: str = ""
    # The routed-expert MoE kernels' share of ms (the step less the same step with those
    # kernels taken out, `kernels_compose.routed_moe_part`), where the table has it: a lockstep
    # DP rank's experts serve every rank's tokens, not its own (MeasuredPerfModel).
    moe_ms: list[list[list[float]]] | None = None
    kv_cache_dtype: str = ""  # the KV cache its attention was sampled at (KV_FP8, below)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], path: str = "") -> StepTable:
        if raw.get("format") != TABLE_FORMAT:
            raise ValueError(f"{path or 'step table'}: format {raw.get('format')!r}, "
                             f"expected {TABLE_FORMAT}")
        g = raw["grid"]
        table = cls(gpu=raw["gpu"], model=raw["model"], layout=raw["layout"],
                    precision=raw["precision"], source=raw["source"],
                    prefill_tokens=[float(v) for v in g["prefill_tokens"]],
                    decode_seqs=[float(v) for v in g["decode_seqs"]],
                    kv_per_seq=[float(v) for v in g["kv_per_seq"]], ms=raw["ms"],
                    prefill_context=[float(v) for v in g["prefill_context"]],
                    prefill_ctx_ms=raw["prefill_ctx_ms"], path=path,
                    moe_ms=raw.get("parts", {}).get("routed_moe_ms", {}).get("ms"),
                    kv_cache_dtype=raw.get("kv_cache_dtype", ""))
        shape = (len(table.prefill_tokens), len(table.decode_seqs), len(table.kv_per_seq))
        if (any(not _has_shape(grid, shape) for grid in (table.ms, table.moe_ms) if grid)
                or len(table.prefill_ctx_ms) != shape[0]
                or any(len(r) != len(table.prefill_context) for r in table.prefill_ctx_ms)):
            raise ValueError(f"{path or 'step table'}: ms does not match its grid {shape}")
        return table

    @property
    def label(self) -> str:
        s = self.source
        kind = "partly estimated table" if s.get("estimated") else "measured table"
        kv = f", {self.kv_cache_dtype} KV cache" if self.kv_cache_dtype else ""
        label = (f"{kind} {self.gpu}/{self.model}/{self.layout}/{self.precision}{kv} "
                 f"({s.get('package')} {s.get('version')}, {s.get('backend')} "
                 f"{s.get('backend_version')} kernel tables)")
        # autotune/workers/sim/kernels_compose.py: which part is estimated, and how far off it may be
        return f"{label}; estimated: {s['estimated']}" if s.get("estimated") else label

    def gpu_ms(self, decode_seqs: float, decode_kv_tokens: float, prefill_tokens: float = 0.0,
               prefill_context: float = 0.0) -> float:
        """GPU ms of one step: decode_seqs sequences decoding over decode_kv_tokens context
        tokens in all, with a prefill chunk of prefill_tokens tokens after prefill_context
        earlier tokens of its prompt. Multilinear in the grid's axes; an empty step is 0."""
        total = self._at(self.ms, decode_seqs, decode_kv_tokens, prefill_tokens)
        if prefill_context > 0 and prefill_tokens > 0:  # the chunk's attention over its prefix
            total += self._prefill_ctx_ms(prefill_tokens, prefill_context) - self._prefill_ctx_ms(
                prefill_tokens, 0.0)
        return total

    def routed_moe_ms(self, decode_seqs: float, prefill_tokens: float = 0.0) -> float:
        """The routed experts' share of `gpu_ms` of a step of decode_seqs sequences and
        prefill_tokens prompt tokens (0 without `moe_ms`). It is read at the grid's first
        context: the experts see tokens, not their context (the share is the same, to 0.01 ms,
        at every kv_per_seq of the committed tables)."""
        if self.moe_ms is None:
            return 0.0
        return self._at(self.moe_ms, decode_seqs, decode_seqs * self.kv_per_seq[0],
                        prefill_tokens)

    def _at(self, grid: list[list[list[float]]], decode_seqs: float, decode_kv_tokens: float,
            prefill_tokens: float) -> float:
        """grid (ms or moe_ms) at one step, multilinear in its axes; an empty step is 0."""
        if decode_seqs <= 0 and prefill_tokens <= 0:
            return 0.0
        kv = decode_kv_tokens / decode_seqs if decode_seqs > 0 else self.kv_per_seq[0]
        pi, pw = _segment(self.prefill_tokens, prefill_tokens)
        bi, bw = _segment(self.decode_seqs, decode_seqs)
        ki, kw = _segment(self.kv_per_seq, kv)
        total = 0.0
        for p, wp in ((pi, 1 - pw), (pi + 1, pw)):
            if wp == 0.0:
                continue
            for b, wb in ((bi, 1 - bw), (bi + 1, bw)):
                if wb == 0.0:
                    continue
                row = grid[p][b]
                total += wp * wb * ((1 - kw) * row[ki] + kw * row[ki + 1] if kw else row[ki])
        return total

    def decode_run_ms(self, decode_seqs: float, decode_kv_tokens: np.ndarray) -> np.ndarray:
        """`gpu_ms(decode_seqs, kv)` of decode-only steps, one per value of decode_kv_tokens,
        computed at once: a lockstep decode run's ranks step by step, where the maximum over
        the ranks is not affine and the run cannot be summed in closed form."""
        if decode_seqs <= 0:
            return np.zeros(len(decode_kv_tokens))
        bi, bw = _segment(self.decode_seqs, decode_seqs)
        ki, kw = _segments(self.kv_per_seq, decode_kv_tokens / decode_seqs)
        total = np.zeros(len(decode_kv_tokens))
        for b, wb in ((bi, 1 - bw), (bi + 1, bw)):
            if wb == 0.0:
                continue
            row = np.asarray(self.ms[0][b])
            lo, hi = row[ki], row[np.minimum(ki + 1, len(row) - 1)]
            total += wb * np.where(kw != 0.0, (1 - kw) * lo + kw * hi, lo)
        return total

    def _prefill_ctx_ms(self, tokens: float, context: float) -> float:
        pi, pw = _segment(self.prefill_tokens, tokens)
        ci, cw = _segment(self.prefill_context, context)

        def at(p: int) -> float:
            row = self.prefill_ctx_ms[p]
            return (1 - cw) * row[ci] + cw * row[ci + 1] if cw else row[ci]

        return (1 - pw) * at(pi) + pw * at(pi + 1) if pw else at(pi)


def load_step_table(path: Path) -> StepTable:
    return StepTable.from_dict(json.loads(path.read_text()), str(path))


# The KV cache a table's attention kernels were sampled at: "" the package's default for the
# model (its checkpoint's: bf16 where the checkpoint declares none), or "fp8". An engine whose
# cache is fp8 (fp8, fp8_e4m3, fp8_e5m2, or a checkpoint's declared FP8 for "auto") reads the
# fp8 table where there is one: decode attention reads half the bytes (Qwen3-32B on H100 at TP2,
# 256 sequences of 4,096 tokens: 63.8 ms a step at bf16, 45.2 ms at fp8). DeepSeek-V4's
# fp8_ds_mla is its only layout (auto and fp8 both become it: vllm/models/deepseek_v4/
# attention.py::_resolve_dsv4_kv_cache_dtype), which its tables price.
KV_FP8 = "fp8"


def kv_family(kv_cache_dtype: str) -> str:
    """The table KV dtype an engine's effective cache dtype reads ("" or KV_FP8)."""
    return KV_FP8 if kv_cache_dtype.startswith("fp8") and kv_cache_dtype != "fp8_ds_mla" else ""


def table_filename(gpu: str, model: str, layout: str, precision: str, kv: str = "") -> str:
    safe = re.sub(r"[^A-Za-z0-9.+-]+", "_", f"{gpu}__{model}__{layout}__{precision}")
    return f"{safe}_kv-{kv}.json" if kv else f"{safe}.json"


@dataclass(frozen=True)
class StepModel:
    """The step model a simulated engine uses: "measured" (with its table) or "roofline"."""

    name: str
    label: str
    table: StepTable | None = None


def select_step_model(gpu: str, model: str, layout: str, precision: str,
                      kv_cache_dtype: str = "auto", tables_dir: Path = TABLES_DIR) -> StepModel:
    """The measured table for this GPU, model, layout and precision if there is one (sampled at
    the engine's KV cache dtype where one is: `kv_family`), else the roofline, with a label
    saying which and why."""
    kv = kv_family(kv_cache_dtype)
    if kv and (path := tables_dir / table_filename(gpu, model, layout, precision, kv)).is_file():
        table = load_step_table(path)
        return StepModel(MEASURED, table.label, table)
    path = tables_dir / table_filename(gpu, model, layout, precision)
    if path.is_file():
        table = load_step_table(path)
        note = (f"; its attention priced at the model's default KV cache, not {kv_cache_dtype} "
                "(no fp8-KV table)") if kv else ""
        return StepModel(MEASURED, table.label + note, table)
    return StepModel(ROOFLINE, f"roofline (no measured table for {gpu}/{model}/{layout}/"
                               f"{precision})")

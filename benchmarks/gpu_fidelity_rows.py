"""The judge rows of benchmarks/gpu_fidelity.py: vLLM aggregated-serving measurements from
aiconfigurator-core's silicon sample (benchmarks/data/), read and matched to what the simulator
can run. Each row that cannot be matched is counted under the reason why.

What a row means, read from the package's own consumers of the file (ai-dynamo/aiconfigurator,
tools/accuracy_regression_testing/predict_silicon_sample.py and tools/accuracy_tracking/
make_silicon_refs.py): one deployment (model, system, backend version, tp/pp/attention-DP/MoE-TP/
MoE-EP sizes, GEMM and MoE quantisation) measured at one concurrency with fixed ISL and OSL.
`silicon_concurrency=N` in `silicon_data_source` is the benchmark client's concurrency over the
whole deployment; `batch_size` is what the package's estimate takes, the requests in flight per
attention-DP rank: batch_size x attention_dp_size = silicon_concurrency on all 1,325 vLLM agg
rows that carry both (the other 3 have attention-DP 1, so batch_size is the concurrency).
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from autotune.domain import catalogue
from autotune.domain.catalogue import GPU, QUANT_FORMATS, Model
from autotune.domain.model_sources import bundled
from autotune.errors import ConfigError
from autotune.workers.sim.kernels_build import system_gpu
from autotune.workers.sim.step_table import layout_name, model_precision

JUDGE_CSV = Path(__file__).resolve().parent / "data" / "silicon_sample_vllm_agg.csv"

_CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")

# The rows' quantisation modes are the catalogue's weight-format names (catalogue.QUANT_FORMATS
# gives their bytes per parameter, scales included), "bfloat16" aside.
MODE_NAMES = {"bfloat16": "bf16"}
# A row's mode that names the checkpoint's own format under another name: MiniMax-M2.5's and
# Qwen3-235B-A22B-FP8's 128x128-block FP8 is aiconfigurator's "fp8"; gpt-oss-120b's own MXFP4
# experts are its "nvfp4" (the rows' precision column says "fp4": the only 4-bit checkpoint
# under that id is OpenAI's MXFP4 one).
SAME_FORMAT = {("fp8_block", "fp8"), ("mxfp4", "nvfp4")}

# The checkpoint a 4-bit row served. "fp4" rows ran vLLM 0.17-0.19, which quantised nothing to
# NVFP4 at load time (online NVFP4 came later: vllm-project/vllm#48538, #49060), so an "fp4" row
# of a model with no FP4 checkpoint of its own served NVIDIA's export, nvidia/<name>-NVFP4
# (vendored where a row needs it; otherwise the row keeps the base checkpoint's facts). From the
# export the row takes the KV cache only: its ModelOpt config declares FP8, which vLLM serves for
# --kv-cache-dtype auto (utils/torch_utils.py, resolve_kv_cache_dtype_string; vllm#29980) and
# which aiconfigurator's harness passes itself (sdk/utils.py reads kv_cache_quant_algo;
# generator/module_bridge.py -> --kv-cache-dtype). The weights keep the row's columns, which the
# measured tables are keyed on. The evidence and caveats: docs/benchmarks/gpu-fidelity.md.
FOUR_BIT_LABEL = "fp4"
FP4_FORMATS = {"fp4", "mxfp4", "nvfp4"}
NVFP4_EXPORT = "nvidia/{}-NVFP4"

# Skip reasons, counted per row (the detail after ": " names what was not found).
UNKNOWN_MODEL = "unknown model"
UNKNOWN_SYSTEM = "unknown system"
NOT_MODELLED = "not modelled"


@dataclass(frozen=True)
class JudgeRow:
    """One measured row, its fields as the benchmark uses them; `raw` keeps every column."""

    id: str
    model_path: str
    system: str
    backend_version: str
    isl: int
    osl: int
    concurrency: int
    tp: int
    pp: int
    dp: int
    moe_tp: int
    moe_ep: int
    gemm_quant: str
    moe_quant: str
    ttft_ms: float
    tpot_ms: float
    raw: dict[str, str]


@dataclass(frozen=True)
class MatchedRow:
    """A row the simulator can run: the catalogue's model (with the row's precision where it
    differs from the checkpoint's), its GPU, and the layout and precision as the step tables
    name them."""

    row: JudgeRow
    model: Model  # the catalogue's, with the row's precision
    catalogue_model: str  # its catalogue name (what a DeploymentSpec names)
    checkpoint: str  # the checkpoint it served where not the model's own (served_checkpoint)
    gpu: GPU
    ep: bool
    layout: str
    precision: str


def _int(value: str, default: int) -> int:
    return int(value) if value.strip() else default


def parse_row(raw: dict[str, str]) -> JudgeRow:
    dp = max(_int(raw["attention_dp_size"], 1), 1)
    m = _CONCURRENCY.search(raw["silicon_data_source"])
    concurrency = int(m.group(1)) if m else int(raw["batch_size"]) * dp
    return JudgeRow(
        id=raw["id"], model_path=raw["model_path"], system=raw["system"],
        backend_version=raw["backend_version"], isl=int(raw["isl"]), osl=int(raw["osl"]),
        concurrency=concurrency, tp=_int(raw["tp_size"], 1), pp=_int(raw["pp_size"], 1), dp=dp,
        moe_tp=_int(raw["moe_tp_size"], 1), moe_ep=_int(raw["moe_ep_size"], 1),
        gemm_quant=raw["gemm_quant_mode"], moe_quant=raw["moe_quant_mode"],
        ttft_ms=float(raw["silicon_ttft_ms"]), tpot_ms=float(raw["silicon_tpot_ms"]), raw=raw)


def load_rows(path: Path = JUDGE_CSV) -> list[JudgeRow]:
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["backend"] == "vllm" and r["mode"] == "agg"]
    return [parse_row(r) for r in rows]


def _own(model: Model, mode: str) -> bool:
    """Whether a row's mode is one of the checkpoint's own weight formats."""
    formats = {model.dense_quant, model.expert_quant} if model.num_experts else {model.dense_quant}
    return any(mode == f or (f, mode) in SAME_FORMAT for f in formats)


def _with_quant(model: Model, gemm: str, moe: str) -> Model:
    """The model served at the row's quantisation. Where every mode the row names is one of the
    checkpoint's own formats the row serves the checkpoint as shipped (Kimi-K2.5's int4_wo
    rows: INT4 experts, BF16 attention as its config.json leaves it); otherwise the dense
    part runs at `gemm` and the routed experts at `moe` (a dense model: all of it at `gemm`),
    an empty mode leaving that part as shipped."""
    modes = [MODE_NAMES.get(m, m) for m in (gemm, moe if model.num_experts else "") if m]
    if all(_own(model, m) for m in modes):
        return model
    changes: dict[str, object] = {}
    dense, experts = MODE_NAMES.get(gemm, gemm), MODE_NAMES.get(moe, moe)
    if dense:
        changes |= {"dense_quant": dense, "dense_bytes_per_param": QUANT_FORMATS[dense]}
    if model.num_experts and experts:
        changes |= {"expert_quant": experts, "expert_bytes_per_param": QUANT_FORMATS[experts]}
    elif not model.num_experts and dense:
        changes |= {"expert_quant": dense, "expert_bytes_per_param": QUANT_FORMATS[dense]}
    return replace(model, **changes)  # type: ignore[arg-type]


def served_checkpoint(row: JudgeRow, model: Model) -> Model | None:
    """The pre-quantised checkpoint a 4-bit row served (FOUR_BIT_LABEL above), or None where
    the row served the model's own checkpoint or no export of it is known here."""
    own = {model.dense_quant, model.expert_quant}
    if row.raw.get("precision") != FOUR_BIT_LABEL or own & FP4_FORMATS:
        return None
    export = NVFP4_EXPORT.format(model.hf_id.split("/")[-1])
    if bundled(export) is None:
        return None
    return catalogue.model(export)


def match_row(row: JudgeRow) -> MatchedRow | str:
    """The row matched to the catalogue, or the reason it cannot be simulated."""
    try:
        model = catalogue.model(row.model_path)
    except ConfigError:
        return f"{UNKNOWN_MODEL}: {row.model_path}"
    try:
        gpu = catalogue.gpu(system_gpu(row.system))
    except KeyError:
        return f"{UNKNOWN_SYSTEM}: {row.system}"
    if row.pp > 1:
        return f"{NOT_MODELLED}: pipeline parallelism (pp_size {row.pp})"
    for mode in (row.gemm_quant, row.moe_quant):
        if mode and MODE_NAMES.get(mode, mode) not in QUANT_FORMATS:
            return f"{NOT_MODELLED}: quantisation mode {mode!r}"
    ep = bool(model.num_experts) and row.moe_ep > 1
    if model.num_experts:
        if row.moe_tp > 1 and row.moe_ep > 1:  # vLLM's EP takes every rank: all or nothing
            return f"{NOT_MODELLED}: MoE TP {row.moe_tp} x EP {row.moe_ep}"
        if row.dp > 1 and not ep:
            return f"{NOT_MODELLED}: MoE attention-DP {row.dp} without expert parallelism"
    elif row.dp > 1:
        return f"{NOT_MODELLED}: attention-DP {row.dp} of a dense model"
    served = _with_quant(model, row.gemm_quant, row.moe_quant)
    export = served_checkpoint(row, model)
    if export is not None:
        served = replace(served, checkpoint_kv_cache_dtype=export.checkpoint_kv_cache_dtype)
    return MatchedRow(row=row, model=served, catalogue_model=model.name,
                      checkpoint=export.hf_id if export else "", gpu=gpu, ep=ep,
                      layout=layout_name(row.tp, row.dp, ep), precision=model_precision(served))


def match_rows(rows: list[JudgeRow]) -> tuple[list[MatchedRow], Counter[str]]:
    """The rows the simulator can run, and how many rows were skipped for each reason."""
    matched: list[MatchedRow] = []
    skipped: Counter[str] = Counter()
    for row in rows:
        result = match_row(row)
        if isinstance(result, str):
            skipped[result] += 1
        else:
            matched.append(result)
    return matched, skipped

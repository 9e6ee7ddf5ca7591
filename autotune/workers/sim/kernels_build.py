"""Build a measured step-time table (see autotune/workers/sim/step_table.py) from aiconfigurator-core.

aiconfigurator-core (NVIDIA, Apache-2.0; the optional extra `aiconfigurator`) ships kernel
timings NVIDIA measured per GPU and serving framework (GEMM, attention, MLA, DeepSeek-V4 sparse
attention, MoE, all-reduce, all-to-all) and composes them into one forward pass's GPU time with
`aiconfigurator_core.sdk.rust_engine_step.RustForwardPassPerfModel`. That package moves fast
(0.x) and its model object cannot be pickled into Ray workers, so the simulator never imports
it: this offline builder samples it once over a grid and the table is committed with its
source, version and licence.
"""

from __future__ import annotations

import datetime as dt
import json
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from autotune.domain.catalogue import GPU, Model
from autotune.workers.sim.step_table import (
    KV_FP8,
    TABLE_FORMAT,
    layout_name,
    model_precision,
    table_filename,
)

PACKAGE = "aiconfigurator-core"
LICENCE = "Apache-2.0"
BACKEND = "vllm"
# aiconfigurator's system names for the catalogue's GPUs.
SYSTEMS = {"H100-80GB": "h100_sxm", "H200-141GB": "h200_sxm", "A100-80GB": "a100_sxm",
           "L40S": "l40s", "B200-180GB": "b200_sxm", "B300-288GB": "b300_sxm"}
# The catalogue's quantisation names as aiconfigurator's dtypes (sdk/rust_engine_step.py
# _quant_to_dtype: int4_wo is "int4"); "fp4" (DeepSeek-V4's MXFP4 experts) and "mxfp4"
# (gpt-oss's) are left to the checkpoint's own config, which is what the package reads.
DTYPES: dict[str, str | None] = {"bf16": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block",
                                 "fp4": None, "mxfp4": None, "nvfp4": "nvfp4",
                                 "int4_wo": "int4"}

# Checkpoints whose config.json the package bundles (aiconfigurator_core/model_configs/) under
# another id of the same architecture; offline it would try to download the id as given.
# meta-llama/Llama-3.1-70B is Hugging Face's current name of the repository the package keeps
# as meta-llama/Meta-Llama-3.1-70B (renamed, same config.json); nvidia/Llama-3.1-8B-Instruct-FP8
# is Llama-3.1-8B-Instruct (Meta-Llama-3.1-8B's architecture) in FP8, which the config's
# weight_dtype says; meta-llama/Llama-3.1-8B-Instruct (the catalogue's Llama-3.1-8B) is that
# architecture in BF16 (the instruct tuning changes the weights, not the config's shapes).
PACKAGE_MODEL_IDS = {"meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
                     "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B",
                     "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B"}

def system_gpu(system: str) -> str:
    """The catalogue GPU of an aiconfigurator system name (h100_sxm -> H100-80GB)."""
    for name, known in SYSTEMS.items():
        if known == system:
            return name
    raise KeyError(f"no catalogue GPU for aiconfigurator system {system!r} "
                   f"(known: {', '.join(SYSTEMS.values())})")
# The grid. Dense at small batches, where step times bend; the reader extends the last
# segment linearly above it.
PREFILL_TOKENS = (0, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
DECODE_SEQS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
KV_PER_SEQ = (1, 256, 1024, 4096, 16384, 65536, 262144)
PREFILL_CONTEXT = (0, 2048, 8192, 32768, 131072, 262144)


class KernelsUnavailable(Exception):
    """The extra is not installed, or the package has no data for the request."""


def engine_config(gpu: GPU, model: Model, tp: int, dp: int, ep: bool, precision: str,
                  backend_version: str, kv_cache_dtype: str = "") -> dict[str, Any]:
    """The package's EngineConfig JSON for one layout (`RustForwardPassPerfModel.from_native`).
    Its MoE width must equal tp * dp: experts split over the ranks (moe_tp) or whole (moe_ep).
    kv_cache_dtype: "" for the package's default for the model, or "fp8"."""
    system = SYSTEMS.get(gpu.name)
    if system is None:
        raise KernelsUnavailable(f"no aiconfigurator system for GPU {gpu.name!r} "
                                 f"(known: {', '.join(SYSTEMS)})")
    if not model.hf_id:
        raise KernelsUnavailable(f"model {model.name!r} has no Hugging Face id in the catalogue")
    dense, _, experts = precision.partition("/")
    if dense not in DTYPES or (experts and experts not in DTYPES):
        raise KernelsUnavailable(f"precision {precision!r}: expected dense[/experts] from "
                                 f"{', '.join(DTYPES)}")
    width = tp * dp
    config: dict[str, Any] = {
        "schema_version": 1, "model_name": PACKAGE_MODEL_IDS.get(model.hf_id, model.hf_id),
        "system_name": system,
        "backend": BACKEND, "backend_version": backend_version, "tp_size": tp, "pp_size": 1,
        "attention_dp_size": dp, "moe_tp_size": 1 if ep else width, "moe_ep_size": width if ep else 1,
    }
    if DTYPES[dense]:
        config["weight_dtype"] = DTYPES[dense]
    if experts and DTYPES[experts]:
        config["moe_dtype"] = DTYPES[experts]
    if kv_cache_dtype:
        if kv_cache_dtype != KV_FP8:
            raise KernelsUnavailable(f"KV cache dtype {kv_cache_dtype!r}: tables are sampled at "
                                     f"the model's default or {KV_FP8}")
        config["kv_cache_dtype"] = kv_cache_dtype
    return config


def _data_root() -> Path:
    return Path(str(resources.files("aiconfigurator_core") / "systems" / "data"))


def table_families(system: str, backend_version: str) -> tuple[list[str], list[str]]:
    """Kernel families (folders of the package's data for this GPU) with a table measured on
    this backend and version, and those without one, for which the package falls back to
    another framework's rows (TensorRT-LLM's) without saying so per call."""
    root = _data_root() / system
    families = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    own = [f for f in families if (root / f / BACKEND / backend_version).is_dir()]
    return own, [f for f in families if f not in own]


def _fpm(decode_seqs: int, kv_per_seq: int, prefill_tokens: int,
         prefill_context: int = 0) -> dict[str, Any]:
    req: dict[str, int] = {}
    if decode_seqs:
        req |= {"num_decode_requests": decode_seqs, "sum_decode_kv_tokens": decode_seqs * kv_per_seq}
    if prefill_tokens:
        req |= {"num_prefill_requests": 1, "sum_prefill_tokens": prefill_tokens}
        if prefill_context:
            req["sum_prefill_kv_tokens"] = prefill_context
    return {"scheduled_requests": req}


def build_table(gpu: GPU, model: Model, tp: int, dp: int = 1, ep: bool = False,
                precision: str | None = None, backend_version: str = "0.24.0",
                kv_cache_dtype: str = "") -> dict[str, Any]:
    """Sample the package's forward-pass model over the grid; the table as a JSON-able dict.
    kv_cache_dtype: the KV cache its attention kernels read ("": the model's default; "fp8")."""
    precision = precision or model_precision(model)
    config = engine_config(gpu, model, tp, dp, ep, precision, backend_version, kv_cache_dtype)
    layout = layout_name(tp, dp, ep)
    try:
        from aiconfigurator_core.sdk.errors import PerfDataNotAvailableError
        from aiconfigurator_core.sdk.rust_engine_step import RustForwardPassPerfModel
    except ImportError:
        raise KernelsUnavailable("aiconfigurator-core is not installed: "
                                 "pip install 'autotune[aiconfigurator]'") from None
    try:
        fpm = RustForwardPassPerfModel.from_native(config)

        def ms(*args: int) -> float:
            if not (args[0] or args[2]):
                return 0.0
            value = fpm.estimate_forward_pass_time_ms(_fpm(*args))
            if value is None:  # only a regression model answers None; from_native is not one
                raise ValueError(f"no estimate for {_fpm(*args)}")
            return float(value)

        grid = [[[ms(b, k, p) for k in KV_PER_SEQ] for b in DECODE_SEQS] for p in PREFILL_TOKENS]
        prefill_ctx = [[ms(0, 0, p, c) for c in PREFILL_CONTEXT] for p in PREFILL_TOKENS]
    except (PerfDataNotAvailableError, ValueError) as exc:
        raise KernelsUnavailable(f"{PACKAGE} has no step times for {gpu.name}/{model.name}/"
                                 f"{layout}/{precision}: {str(exc).splitlines()[0]}") from None
    own, other = table_families(config["system_name"], backend_version)
    return {
        "format": TABLE_FORMAT, "gpu": gpu.name, "model": model.name, "layout": layout,
        "precision": precision, **({"kv_cache_dtype": kv_cache_dtype} if kv_cache_dtype else {}),
        "units": "GPU ms of one forward pass of one DP rank (all ranks equally loaded); "
                 "no CPU time, no CUDA-graph padding",
        "source": {"package": PACKAGE, "version": metadata.version(PACKAGE), "licence": LICENCE,
                   "api": "aiconfigurator_core.sdk.rust_engine_step.RustForwardPassPerfModel"
                          ".from_native(config).estimate_forward_pass_time_ms",
                   "config": config, "system": config["system_name"], "backend": BACKEND,
                   "backend_version": backend_version, "backend_table_families": own,
                   "fallback_families": other},
        "built": dt.date.today().isoformat(),
        "grid": {"prefill_tokens": list(PREFILL_TOKENS), "decode_seqs": list(DECODE_SEQS),
                 "kv_per_seq": list(KV_PER_SEQ), "prefill_context": list(PREFILL_CONTEXT)},
        "ms": [[[round(v, 5) for v in row] for row in plane] for plane in grid],
        "prefill_ctx_ms": [[round(v, 5) for v in row] for row in prefill_ctx],
    }


def write_table(table: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / table_filename(table["gpu"], table["model"], table["layout"], table["precision"],
                                    table.get("kv_cache_dtype", ""))
    path.write_text(json.dumps(table, indent=1) + "\n")
    return path

"""aiconfigurator's own static estimate of a judge row, called the way its silicon validation
calls it (ai-dynamo/aiconfigurator, tools/accuracy_regression_testing/predict_silicon_sample.py:
`_estimate_args` and `_run_estimate`): `aiconfigurator.cli.api.cli_estimate` with the row's model,
system, backend, backend version, ISL/OSL, quantisation modes, batch_size and parallel sizes, in
agg mode; where the row's backend version has no perf database (`perf_database.
get_version_slots` refuses every row's), with the package's default version, resolved once per
system here (`get_latest_database_version`). Both packages come with the optional extra
`autotune[aiconfigurator]`; offline, model configs are read from those the package bundles
(autotune.workers.sim.kernels_build.PACKAGE_MODEL_IDS: judge models bundled under another name).

Its vLLM TTFT carries two terms fitted to the silicon corpus these rows come from
(aiconfigurator_core 0.12.0, `sdk/backends/vllm_backend.py`: `VLLMBackend.
_prefill_dispatch_overhead_ms` and `VLLMBackend._ttft_queuing_factor`, as `BaseBackend` composes
the agg TTFT), so its TTFT error on these rows is in sample. `estimate(row, corpus_terms=False)`
sets both neutral (0 ms and a factor of 1); its TPOT does not use them. The versions, packages
and terms in detail: docs/benchmarks/gpu-fidelity.md.
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from autotune.workers.sim.kernels_build import PACKAGE_MODEL_IDS

if TYPE_CHECKING:  # a sibling module: benchmarks/ is a folder of scripts, not a package
    from gpu_fidelity_rows import JudgeRow

PACKAGE = "aiconfigurator"
PARALLEL_FIELDS = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
AGG_FIELDS = ("batch_size", *PARALLEL_FIELDS)
# VLLMBackend's TTFT terms fitted to the silicon corpus, and their neutral values (see above)
CORPUS_TERMS: dict[str, Callable[..., float]] = {
    "_prefill_dispatch_overhead_ms": lambda self, model: 0.0,
    "_ttft_queuing_factor": lambda self, b, steps_to_finish_ctx: 1.0,
}



def available() -> str | None:
    """None where the estimate can run, else one line saying what to install."""
    try:
        import aiconfigurator.cli.api  # noqa: F401
    except ImportError:
        return ("aiconfigurator's estimate is absent: pip install 'autotune[aiconfigurator]' "
                "(aiconfigurator and aiconfigurator-core 0.12.0)")
    return None


def estimate_args(row: JudgeRow) -> dict[str, Any]:
    """cli_estimate's arguments for the row, as predict_silicon_sample.py's `_estimate_args`
    builds them (empty parallel fields left to the package's defaults)."""
    raw = row.raw
    return dict(
        model_path=PACKAGE_MODEL_IDS.get(row.model_path, row.model_path),
        system_name=row.system, mode="agg", backend_name=raw["backend"],
        backend_version=row.backend_version or None, isl=row.isl, osl=row.osl,
        gemm_quant_mode=row.gemm_quant or None, moe_quant_mode=row.moe_quant or None,
        **{f: int(raw[f]) for f in AGG_FIELDS if raw.get(f)})


@functools.cache
def database_version(system: str, backend: str, row_version: str) -> str | None:
    """The row's backend version where the package has it as a queryable slot for the system,
    else the package's default (None where it has no vLLM database for the system at all)."""
    from aiconfigurator_core.sdk.perf_database import (
        get_latest_database_version,
        get_version_slots,
    )

    slots = get_version_slots(system, backend) or {}
    if row_version and row_version in slots.values():
        return row_version
    return get_latest_database_version(system=system, backend=backend)  # type: ignore[no-any-return]


@contextlib.contextmanager
def _corpus_terms_neutral() -> Iterator[None]:
    """The two TTFT terms fitted to the silicon corpus (module docstring) set neutral."""
    from aiconfigurator_core.sdk.backends.vllm_backend import VLLMBackend

    saved = {name: VLLMBackend.__dict__[name] for name in CORPUS_TERMS}
    for name, neutral in CORPUS_TERMS.items():
        setattr(VLLMBackend, name, neutral)
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(VLLMBackend, name, method)


def estimate(row: JudgeRow, corpus_terms: bool = True) -> tuple[float, float] | str:
    """(TTFT ms, TPOT ms) as the package estimates the row, or why it gave none (one line);
    corpus_terms=False: without the two TTFT terms it fitted to this corpus."""
    from aiconfigurator.cli.api import cli_estimate
    from aiconfigurator_core.sdk.backends.vllm_backend import VLLMBackend

    args = estimate_args(row)
    args["backend_version"] = database_version(row.system, args["backend_name"],
                                               row.backend_version)
    if args["backend_version"] is None:
        return f"no {args['backend_name']} perf database for {row.system}"
    if not corpus_terms:
        missing = [name for name in CORPUS_TERMS if name not in VLLMBackend.__dict__]
        if missing:
            return f"this aiconfigurator has no VLLMBackend.{missing[0]} to set neutral (0.12.0 has)"
    terms = contextlib.nullcontext() if corpus_terms else _corpus_terms_neutral()
    try:
        # The package prints its progress and fallbacks to stdout; the benchmark's own output
        # (its last line is JSON) must stay clean.
        with terms, contextlib.redirect_stdout(io.StringIO()):
            result = cli_estimate(**args)
        return float(result.ttft), float(result.tpot)
    except Exception as exc:  # the package's refusals come as many types; each is a skip
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        return f"{type(exc).__name__}: {first}"

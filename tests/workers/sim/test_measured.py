"""The sim backend's measured step model: the default where a table exists, priced from the
table, named in the notes, the roofline when asked for or where there is no table, and still
summing decode runs in closed form."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.domain.deployment import DEMO, DeploymentSpec
from autotune.errors import ConfigError
from autotune.measure.metrics import summarize
from autotune.search.baselines import guide_heuristic, vllm_defaults
from autotune.traffic.trace import Trace
from autotune.workers.sim.backend import SimulatorBackend
from autotune.workers.sim.perf import PerfModel, RankBatch
from autotune.workers.sim.perf_measured import MeasuredPerfModel

FP8 = "fp8_block/fp8_block"
TRACE = Trace.from_rows("mixed", [{"arrival_s": i * 0.05, "output_tokens": 40 + 37 * (i % 5),
                                   "prompt_tokens": 3000 if i % 7 == 0 else 300}
                                  for i in range(80)])


def _started(config=None, **options: object) -> SimulatorBackend:  # type: ignore[no-untyped-def]
    backend = SimulatorBackend(**options)  # type: ignore[arg-type]
    backend.start(config or guide_heuristic(DEMO), DEMO)
    return backend


def test_measured_is_the_default_and_the_roofline_runs_when_asked_for() -> None:
    backend = _started()  # the demo checkpoint's own precision: its composed FP4-expert table
    assert isinstance(backend.perf, MeasuredPerfModel)
    assert backend.notes()["step_model"].startswith("partly estimated table H200-141GB/")
    backend = _started(step_model="roofline")
    assert type(backend.perf) is PerfModel
    assert backend.notes()["step_model"].startswith("roofline; profile")


def test_measured_prices_the_gpu_part_from_the_table() -> None:
    backend = _started(step_model="measured", step_precision=FP8)
    perf = backend.perf
    assert isinstance(perf, MeasuredPerfModel) and perf.table.layout == "TP8"
    assert backend.notes()["step_model"].startswith("measured table H200-141GB/DeepSeek-V4-Flash/"
                                                    "TP8/fp8_block/fp8_block (aiconfigurator-core")
    gpu, _ = perf.step_parts_s(32, 32 * 4096)  # 32 is a capture size: no padding
    assert gpu == pytest.approx(perf.table.gpu_ms(32, 32 * 4096) / 1e3)
    # 30 sequences pad to the 32-sequence graph, as vLLM runs them.
    assert perf.step_parts_s(30, 32 * 4096)[0] == pytest.approx(gpu)


def test_the_checkpoint_runs_on_its_composed_table_and_says_it_is_partly_estimated() -> None:
    backend = _started(step_model="measured")  # the checkpoint's own FP4 experts
    assert isinstance(backend.perf, MeasuredPerfModel)
    assert backend.notes()["step_model"].startswith(
        "partly estimated table H200-141GB/DeepSeek-V4-Flash/TP8/fp8_block/fp4")


def test_measured_without_a_table_falls_back_to_the_roofline_and_says_why() -> None:
    backend = _started(step_model="measured", step_precision="bf16/bf16")
    assert type(backend.perf) is PerfModel
    assert backend.notes()["step_model"].startswith(
        "roofline (no measured table for H200-141GB/DeepSeek-V4-Flash/TP8/bf16/bf16)")


def test_a_dense_models_dp_ranks_run_on_their_tp_layouts_table() -> None:
    """Dense DP ranks are independent engines: DP2xTP4 of Qwen3-32B runs on the TP4 table,
    and says so; an MoE model's DP layout needs its own (lockstep) table."""
    dep = DeploymentSpec(name="q", model="Qwen/Qwen3-32B", gpu="H100-80GB", gpu_count=8,
                         tensor_parallel_size=4, max_model_len=8192)
    backend = SimulatorBackend()
    backend.start(vllm_defaults(dep).merged(data_parallel_size=2), dep)
    assert isinstance(backend.perf, MeasuredPerfModel) and backend.perf.table.layout == "TP4"
    assert "H100-80GB/Qwen3-32B/TP4/bf16" in backend.notes()["step_model"]
    assert "for each of 2 independent DP ranks" in backend.notes()["step_model"]
    moe = _started(guide_heuristic(DEMO).merged(tensor_parallel_size=4, data_parallel_size=2,
                                                enable_expert_parallel=True))
    assert isinstance(moe.perf, MeasuredPerfModel) and moe.perf.table.layout == "DP2xTP4+EP"


def test_unknown_step_model_is_refused() -> None:
    with pytest.raises(ConfigError, match="step_model='fast': expected one of measured, roofline"):
        SimulatorBackend(step_model="fast")


@pytest.mark.parametrize("overrides", [{}, {"tensor_parallel_size": 2, "data_parallel_size": 4,
                                            "enable_expert_parallel": True}])
def test_measured_decode_runs_sum_in_closed_form(overrides: dict[str, object]) -> None:
    """Skipping decode runs (the table's context grid points as breaks) gives what stepping
    through every engine step gives."""
    config = guide_heuristic(DEMO).merged(**overrides)
    results = [summarize(_started(config, step_model="measured", step_precision=FP8,
                                  skip_decode_runs=skip).replay(TRACE, 1.0, 0)).model_dump()
               for skip in (True, False)]
    assert results[0]["completed"] == 80
    for key in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "e2e_p99_ms", "output_tok_s"):
        assert results[0][key] == pytest.approx(results[1][key], rel=1e-9), key


@pytest.mark.parametrize(("seqs", "idle_ranks"), [([40, 17, 3], 1), ([600, 1], 0), ([64], 3)])
def test_lockstep_decode_runs_price_every_step_as_one_step_does(seqs: list[int],
                                                                idle_ranks: int) -> None:
    """A lockstep decode run, priced for all its steps at once, gives for each step exactly
    what pricing that step alone gives: the slowest rank's time, graphs padded to the largest
    rank's batch (600 sequences are past the largest capture size: eager), contexts crossing
    the table's grid points and passing its last."""
    config = guide_heuristic(DEMO).merged(tensor_parallel_size=2, data_parallel_size=4,
                                          enable_expert_parallel=True, max_num_seqs=1024)
    perf = _started(config, step_model="measured", step_precision=FP8).perf
    assert isinstance(perf, MeasuredPerfModel)
    steps = 3000
    top = perf.table.kv_per_seq[-1]  # the last rank's contexts run past the grid's last point
    kv_tokens = [m * (500 + 700 * i) for i, m in enumerate(seqs[:-1])] + [seqs[-1] * (top - 1000)]
    run = perf.lockstep_decode_s(seqs, kv_tokens, idle_ranks, steps)
    ranks = list(zip(seqs, kv_tokens, strict=True))
    batches = [[RankBatch(m, kv0 + m * j, 0, 0, 0.0) for m, kv0 in ranks] + [None] * idle_ranks
               for j in range(steps)]
    one_by_one = [perf.lockstep_step_s(b) for b in batches]
    assert run.tolist() == one_by_one


def test_lockstep_ranks_experts_serve_the_ranks_mean_batch() -> None:
    """A lone prefill on one DP+EP rank (the others idle) dispatches its tokens to every
    rank's experts: its step prices the routed experts at the ranks' mean batch, not as if
    every rank prefilled as many tokens (the table's equal-load sampling). With the ranks'
    batches alike nothing changes, and a table without the experts' share keeps the old price."""
    config = guide_heuristic(DEMO).merged(tensor_parallel_size=1, data_parallel_size=8,
                                          enable_expert_parallel=True, max_num_seqs=1024)
    perf = _started(config, step_precision=FP8).perf
    assert isinstance(perf, MeasuredPerfModel) and perf.table.moe_ms is not None
    prefill = RankBatch(0, 0, 8192, 1, 8192 * 4096.0)
    everyone = perf.lockstep_step_s([prefill] * 8)
    lone = perf.lockstep_step_s([prefill] + [None] * 7)
    table = perf.table
    shift = (table.routed_moe_ms(7 / 8, 1024) - table.routed_moe_ms(0, 8192)) / 1e3
    assert lone == pytest.approx(everyone + shift) and lone < 0.7 * everyone
    # Equal batches: the mean is each rank's own.
    assert everyone == pytest.approx(perf._rank_s(prefill, None))
    blind = MeasuredPerfModel(perf.gpu, perf.model, perf.shape, perf.profile,
                              dataclasses.replace(table, moe_ms=None))
    assert blind.lockstep_step_s([prefill] + [None] * 7) == pytest.approx(everyone)


def test_campaign_settings_always_name_the_step_model() -> None:
    from autotune.measure.backend_options import backend_options
    from autotune.settings import Settings

    assert backend_options("sim", Settings(), None, []) == {"step_model": "measured"}
    asked = Settings(sim={"step_model": "roofline", "step_precision": FP8})  # type: ignore[arg-type]
    assert backend_options("sim", asked, None, []) == {"step_model": "roofline",
                                                        "step_precision": FP8}

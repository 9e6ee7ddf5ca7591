"""The line a simulated campaign starts with: the step model each searched layout runs on."""

from __future__ import annotations

import re

from autotune.campaign.step_model import step_model_line as line
from autotune.domain.deployment import DEMO, DeploymentSpec
from autotune.search.space import deployment_space


def test_every_demo_layout_has_a_partly_estimated_table() -> None:
    text = line(deployment_space("chat", DEMO), DEMO, {})
    assert text.startswith("Simulator step model: partly estimated kernel tables for TP8, "
                           "TP8+EP, DP2xTP4+EP, DP4xTP2+EP, DP8+EP (each trial's notes say which "
                           "part")
    assert text.endswith("(from aiconfigurator-core 0.12.0, vllm 0.24.0 kernel tables)")
    assert "roofline" not in text


def test_layouts_without_a_table_are_named_with_what_is_missing() -> None:
    dep = DeploymentSpec(name="g", model="openai/gpt-oss-120b", gpu="H100-80GB", gpu_count=8,
                         tensor_parallel_size=8, max_model_len=8192)
    text = line(deployment_space("chat", dep), dep, {})
    assert re.fullmatch(
        r"Simulator step model: measured kernel tables for TP8 \(from aiconfigurator-core "
        r"0\.12\.0, vllm 0\.24\.0 kernel tables\); the roofline for TP8\+EP, DP2xTP4\+EP, "
        r"DP4xTP2\+EP, DP8\+EP \(no measured table for H100-80GB/gpt-oss-120b/TP8\+EP/bf16/"
        r"mxfp4; GPU coefficients fitted to measured kernel tables of H100-80GB: a model left "
        r"out of the fit is priced \d+% off its own tables, median step over \d+ models\)", text)


def test_a_gpu_without_fitted_coefficients_is_said_to_be_uncalibrated() -> None:
    dep = DeploymentSpec(name="a", model="Qwen/Qwen3-32B", gpu="A100-80GB", gpu_count=8,
                         tensor_parallel_size=8, max_model_len=8192)
    text = line(deployment_space("chat", dep), dep, {})
    assert text.endswith("(no measured table for A100-80GB/Qwen3-32B/TP8/bf16; uncalibrated "
                         "GPU coefficients: capacities can be several times off on a GPU)")


def test_a_dense_models_dp_layouts_run_on_their_tp_tables() -> None:
    dep = DeploymentSpec(name="q", model="Qwen/Qwen3-32B", gpu="H100-80GB", gpu_count=8,
                         tensor_parallel_size=8, max_model_len=8192)
    text = line(deployment_space("chat", dep), dep, {})
    assert text.startswith("Simulator step model: measured kernel tables for TP8, DP2xTP4, "
                           "DP4xTP2, DP8 (from")


def test_the_roofline_asked_for_is_said_once() -> None:
    text = line(deployment_space("chat", DEMO), DEMO, {"step_model": "roofline"})
    assert text.startswith("Simulator step model: the roofline, as AUTOTUNE_SIM__STEP_MODEL "
                           "asks (GPU coefficients fitted to measured kernel tables of H200-141GB:")
    assert text.count("roofline") == 1 and text.endswith(" models)")


def test_the_summary_reads_layouts_from_the_labels_where_none_is_given() -> None:
    from autotune.domain.step_model import summary

    labels = ["measured table H100-80GB/Qwen3-32B/TP4/bf16 (aiconfigurator-core 0.12.0, vllm "
              "0.24.0 kernel tables); profile H100-80GB/Qwen3-32B v1 (not fitted)",
              "roofline (no measured table for H100-80GB/Qwen3-32B/TP2/fp8); profile x"]
    assert summary([(None, label) for label in labels]) == (
        "measured kernel tables for TP4 (from aiconfigurator-core 0.12.0, vllm 0.24.0 kernel "
        "tables); the roofline for TP2 (no measured table for H100-80GB/Qwen3-32B/TP2/fp8; "
        "uncalibrated GPU coefficients: capacities can be several times off on a GPU)")
    assert summary([]) is None

"""The line a simulated campaign starts with: the step model each searched layout runs on."""

from __future__ import annotations

from autotune.campaign.step_model import ESTIMATED, FALLBACK, MEASURED, ROOFLINE, kind
from autotune.campaign.step_model import step_model_line as line
from autotune.domain.deployment import DEMO, DeploymentSpec
from autotune.search.space import deployment_space


def test_every_demo_layout_has_a_partly_estimated_table() -> None:
    text = line(deployment_space("chat", DEMO), DEMO, {})
    assert text.startswith("Simulator step model: partly estimated tables for TP8, TP8+EP, "
                           "DP2xTP4+EP, DP4xTP2+EP, DP8+EP")
    assert "roofline" not in text


def test_layouts_without_a_table_are_named_with_what_is_missing() -> None:
    dep = DeploymentSpec(name="g", model="openai/gpt-oss-120b", gpu="H100-80GB", gpu_count=8,
                         tensor_parallel_size=8, max_model_len=8192)
    text = line(deployment_space("chat", dep), dep, {})
    assert text.startswith("Simulator step model: measured kernel tables for TP8; the roofline "
                           "for TP8+EP, DP2xTP4+EP, DP4xTP2+EP, DP8+EP (no measured table for "
                           "H100-80GB/gpt-oss-120b/TP8+EP/bf16/mxfp4; its GPU coefficients are "
                           "uncalibrated")


def test_a_dense_models_dp_layouts_run_on_their_tp_tables() -> None:
    dep = DeploymentSpec(name="q", model="Qwen/Qwen3-32B", gpu="H100-80GB", gpu_count=8,
                         tensor_parallel_size=8, max_model_len=8192)
    text = line(deployment_space("chat", dep), dep, {})
    assert text == "Simulator step model: measured kernel tables for TP8, DP2xTP4, DP4xTP2, DP8"


def test_the_roofline_asked_for_is_said_once() -> None:
    text = line(deployment_space("chat", DEMO), DEMO, {"step_model": "roofline"})
    assert text.startswith("Simulator step model: the roofline, as AUTOTUNE_SIM__STEP_MODEL asks")


def test_kinds_follow_the_simulators_labels() -> None:
    assert kind("measured table H200-141GB/X/TP8/fp8 (aiconfigurator-core 0.12.0)") == MEASURED
    assert kind("partly estimated table H200-141GB/X/TP8/fp8_block/fp4 (...)") == ESTIMATED
    assert kind("roofline (no measured table for H100-80GB/X/TP1/bf16); profile gpu") == FALLBACK
    assert kind("roofline; profile H100-80GB/X v1 (not fitted)") == ROOFLINE

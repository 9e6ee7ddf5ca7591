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
    dep = DeploymentSpec(name="q", model="Qwen/Qwen3-32B", gpu="H100-80GB", gpu_count=8,
                         tensor_parallel_size=8, max_model_len=8192)
    text = line(deployment_space("chat", dep), dep, {})
    # Dense DP ranks run their TP layout's table; DP8 would need a TP1 bf16 one.
    assert text.startswith("Simulator step model: measured kernel tables for TP8, DP2xTP4, "
                           "DP4xTP2; the roofline for DP8 (no measured table for "
                           "H100-80GB/Qwen3-32B/TP1/bf16; its GPU coefficients are uncalibrated")


def test_the_roofline_asked_for_is_said_once() -> None:
    text = line(deployment_space("chat", DEMO), DEMO, {"step_model": "roofline"})
    assert text.startswith("Simulator step model: the roofline, as AUTOTUNE_SIM__STEP_MODEL asks")


def test_kinds_follow_the_simulators_labels() -> None:
    assert kind("measured table H200-141GB/X/TP8/fp8 (aiconfigurator-core 0.12.0)") == MEASURED
    assert kind("partly estimated table H200-141GB/X/TP8/fp8_block/fp4 (...)") == ESTIMATED
    assert kind("roofline (no measured table for H100-80GB/X/TP1/bf16); profile gpu") == FALLBACK
    assert kind("roofline; profile H100-80GB/X v1 (not fitted)") == ROOFLINE

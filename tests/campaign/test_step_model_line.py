"""The line a simulated campaign starts with: the step model each searched layout runs on."""

from __future__ import annotations

import re
from typing import Any

from autotune.campaign.step_model import step_model_line, step_model_runs
from autotune.domain.deployment import DEMO, DeploymentSpec
from autotune.search.spaces import SearchSpace
from autotune.search.spaces.deployment import deployment_space


def line(space: SearchSpace, dep: DeploymentSpec, options: dict[str, Any]) -> str:
    return step_model_line(step_model_runs(space, dep, options))


def eight_gpu_line(model: str, gpu: str) -> str:
    """The line for the model on 8 GPUs of the kind, TP8 and the chat space's layouts."""
    dep = DeploymentSpec(name="d", model=model, gpu=gpu, gpu_count=8, tensor_parallel_size=8,
                         max_model_len=8192)
    return line(deployment_space("chat", dep), dep, {})


def test_every_demo_layout_has_a_partly_estimated_table() -> None:
    text = line(deployment_space("chat", DEMO), DEMO, {})
    assert text.startswith("Simulator step model: partly estimated kernel tables for TP8, "
                           "TP8+EP, DP2xTP4+EP, DP4xTP2+EP, DP8+EP (each trial's notes say which "
                           "part")
    assert text.endswith("(from aiconfigurator-core 0.12.0, vllm 0.24.0 kernel tables)")
    assert "roofline" not in text


def test_layouts_without_a_table_are_named_with_what_is_missing() -> None:
    text = eight_gpu_line("openai/gpt-oss-120b", "H100-80GB")
    assert re.fullmatch(
        r"Simulator step model: measured kernel tables for TP8 \(from aiconfigurator-core "
        r"0\.12\.0, vllm 0\.24\.0 kernel tables\); the roofline for TP8\+EP, DP2xTP4\+EP, "
        r"DP4xTP2\+EP, DP8\+EP \(no measured table for H100-80GB/gpt-oss-120b/TP8\+EP/bf16/"
        r"mxfp4 and 3 more; GPU coefficients fitted to measured kernel tables of H100-80GB: a "
        r"model left out of the fit is priced \d+% off its own tables, median step over \d+ "
        r"models\)", text)


def test_a_gpu_without_fitted_coefficients_is_said_to_be_uncalibrated() -> None:
    text = eight_gpu_line("Qwen/Qwen3-32B", "A100-80GB")
    assert text.endswith("(no measured table for A100-80GB/Qwen3-32B/TP8/bf16 and 3 more; "
                         "uncalibrated GPU coefficients: capacities can be several times off on "
                         "a GPU)")


def test_a_dense_models_dp_layouts_run_on_their_tp_tables() -> None:
    text = eight_gpu_line("Qwen/Qwen3-32B", "H100-80GB")
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


def test_labels_say_how_the_roofline_coefficients_were_set() -> None:
    from autotune.domain.step_model import CALIBRATED, UNCALIBRATED, coefficients, profile

    fitted = ("roofline (no measured table for H100-80GB/x/TP2/bf16); profile H100-80GB/x v1 "
              "(GPU coefficients fitted to measured kernel tables of H100-80GB: a model left out "
              "of the fit is priced 13% off its own tables, median step over 7 models)")
    assert profile(fitted) == ("H100-80GB/x v1 (GPU coefficients fitted to measured kernel "
                               "tables of H100-80GB: a model left out of the fit is priced 13% "
                               "off its own tables, median step over 7 models)")
    assert coefficients(fitted).startswith("GPU coefficients fitted to measured kernel tables")
    assert coefficients("roofline; profile H100-80GB/x v3 (fitted)") == CALIBRATED
    assert coefficients("roofline; profile H100-80GB/x v1 (not fitted)") == UNCALIBRATED
    assert profile("roofline") is None and coefficients("roofline") == UNCALIBRATED


def test_a_roofline_profile_change_is_named_only_where_the_coefficients_differ() -> None:
    from autotune.campaign.resume_settings import roofline_profile_change

    old, new = "H200-141GB/m v1 (not fitted)", "H200-141GB/m v2 (fitted)"
    today = [f"roofline; profile {new}", f"measured table a/b/TP8/fp8 (s); profile {new}"]
    assert roofline_profile_change(set(), today, "c") is None  # no roofline trial stored
    assert roofline_profile_change({new}, today, "c") is None
    change = roofline_profile_change({old}, today, "c")
    assert change is not None and str(change) == (
        "campaign 'c' priced its roofline steps with profile H200-141GB/m v1 (not fitted); this "
        "autotune prices them with H200-141GB/m v2 (fitted)")

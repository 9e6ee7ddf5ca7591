from __future__ import annotations

from pathlib import Path

import pytest

from autotune.domain.deployment import DEMO, DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.errors import SearchSpaceError
from autotune.search.baselines import guide_heuristic, vllm_defaults
from autotune.search.spaces.deployment import load_search_space
from autotune.search.spaces.violations import violations

CPU = DeploymentSpec(name="cpu", model="tiny-llama", gpu="cpu", gpu_count=1,
                     tensor_parallel_size=1, max_model_len=2048)
LONG = DEMO.model_copy(update={"max_model_len": 65536})
GQA = DeploymentSpec(name="gqa", model="Llama-3.1-8B", gpu="H100-80GB", gpu_count=1,
                     tensor_parallel_size=1, max_model_len=8192)
V3 = DeploymentSpec(name="v3", model="DeepSeek-V3", gpu="H200-141GB", gpu_count=8,
                    tensor_parallel_size=8, max_model_len=32768)
V32 = V3.model_copy(update={"gpu_count": 32})  # TP 8 x DP 4 with EP, unless overridden


def broken(config: EngineConfig, dep: DeploymentSpec = DEMO) -> set[str]:
    return {v.rule for v in violations(load_search_space("default"), config, dep)}


def test_the_heuristic_breaks_no_rule() -> None:
    assert broken(guide_heuristic(DEMO)) == set()


def test_vllm_defaults_break_no_rule() -> None:
    # vLLM 0.34 picks block 64 for a GQA model on a Hopper GPU (16 up to 0.33, which hit the
    # guide's slow block-16 combination) and DeepSeek-V4's required 256 (pinned).
    for dep in (GQA, DEMO, V3, CPU):
        assert broken(vllm_defaults(dep), dep) == set(), dep.name


@pytest.mark.parametrize("overrides, dep, rule", [
    ({"max_num_seqs": 256, "max_num_batched_tokens": 128}, DEMO, "batched_tokens_cover_seqs"),
    ({"enable_chunked_prefill": False, "max_num_batched_tokens": 8192}, DEMO,
     "unchunked_prefill_fits_context"),
    ({"block_size": 24}, DEMO, "gpu_block_size_multiple"),
    ({"block_size": 16}, CPU, "cpu_block_size_multiple"),
    ({"block_size": 16, "max_num_seqs": 128}, GQA, "small_blocks_many_seqs"),
    ({"gpu_memory_utilization": 0.95}, LONG, "high_memory_long_context"),
    # DEMO has 8 GPUs and TP 8: a second pipeline stage needs 16.
    ({"pipeline_parallel_size": 2}, DEMO, "parallel_fits_gpus"),
    ({"long_prefill_token_threshold": 32768}, DEMO, "long_prefill_threshold_within_context"),
    # The model against its layout (DEMO: 64 heads; Llama: 32 heads, 8 KV heads).
    ({"tensor_parallel_size": 3}, DEMO, "tp_divides_attention_heads"),
    ({"tensor_parallel_size": 3}, GQA.model_copy(update={"gpu_count": 4}), "tp_fits_kv_heads"),
    ({"tensor_parallel_size": 32}, V32, "fp8_block_dense_shards"),
    ({"tensor_parallel_size": 32, "data_parallel_size": 1, "enable_expert_parallel": False}, V32,
     "fp8_block_expert_shards"),
    ({"enable_expert_parallel": True}, GQA, "expert_parallel_needs_experts"),
    ({"data_parallel_size": 3, "tensor_parallel_size": 1, "enable_expert_parallel": True},
     DEMO, "experts_even_over_ep"),
    # DeepSeek-V4's kernels: 256-token blocks, an fp8 cache on Hopper.
    ({"block_size": 64}, DEMO, "dsv4_block_size"),
    ({"kv_cache_dtype": "bfloat16"}, DEMO, "dsv4_fp8_kv_cache"),
    # DeepSeek-V3 on Hopper with an fp8 cache: a 16-token block precludes FlashMLA.
    ({"kv_cache_dtype": "fp8", "block_size": 16}, V3, "mla_fp8_kv_block_for_flashmla"),
])
def test_each_rule(overrides: dict, dep: DeploymentSpec, rule: str) -> None:
    base = guide_heuristic(dep)
    assert rule not in broken(base, dep)
    assert rule in broken(base.merged(**overrides), dep)


def test_a_rule_on_the_deployments_facts_alone_refuses_the_deployment() -> None:
    from autotune.errors import ConfigError
    from autotune.search.spaces.deployment import deployment_space

    a100 = DEMO.model_copy(update={"gpu": "A100-80GB"})
    with pytest.raises(ConfigError, match=r"cannot be served: dsv4_needs_hopper_or_blackwell.*"
                                          r"compute capability 80 here.*sparse_mla\.py"):
        deployment_space("chat", a100)
    too_long = DEMO.model_copy(update={"model": "DeepSeek-V3", "max_model_len": 200_000})
    with pytest.raises(ConfigError, match=r"context_within_model_limit: max_model_len 200000 is "
                                          r"above the model's limit \(163840\)"):
        deployment_space("chat", too_long)


def test_a_layout_the_model_refuses_names_the_ones_it_allows() -> None:
    from autotune.errors import ConfigError
    from autotune.search.spaces.deployment import deployment_space

    three = DEMO.model_copy(update={"gpu_count": 3, "tensor_parallel_size": 3})
    with pytest.raises(ConfigError, match=r"layout TP3 is refused \(tp_divides_attention_heads: "
                                          r".*\(64\).*\(3\).*the rules allow DP3\+EP "
                                          r"\(tensor_parallel_size 1\)"):
        deployment_space("chat", three)
    # Chosen with --tp 1, the layout is DP3+EP: one layout, so nothing to search.
    space = deployment_space("chat", three.model_copy(update={"tensor_parallel_size": 1}))
    assert "parallelism" not in space.param_names


def test_unset_arguments_are_checked_at_vllms_default() -> None:
    # No block_size given: on the CPU vLLM picks 128, a multiple of 32, so the rule holds.
    assert "cpu_block_size_multiple" not in broken(EngineConfig(max_model_len=2048), CPU)


def _space(tmp_path: Path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return str(path)


def test_unknown_parameter_is_refused(tmp_path: Path) -> None:
    path = _space(tmp_path, "parameters:\n  max_num_seq: {type: int, low: 1, high: 8}\n")
    with pytest.raises(SearchSpaceError, match="unknown parameter 'max_num_seq'"):
        load_search_space(path)


def test_removed_parameter_is_refused_with_reason(tmp_path: Path) -> None:
    path = _space(tmp_path, "parameters:\n  swap_space: {type: int, low: 1, high: 8}\n")
    with pytest.raises(SearchSpaceError, match="swap_space.*no longer exists"):
        load_search_space(path)


def test_rule_with_unknown_name_is_refused(tmp_path: Path) -> None:
    path = _space(tmp_path, "parameters:\n  max_num_seqs: {type: int, low: 1, high: 8}\n"
                            "rules:\n  - {name: mine, require: 'max_batch > 2', message: m}\n")
    with pytest.raises(SearchSpaceError, match="rule 'mine' references unknown name.*max_batch"):
        load_search_space(path)


def test_capture_size_exists_only_with_cuda_graphs_on_a_gpu() -> None:
    from autotune.search.spaces.deployment import deployment_space

    space = deployment_space("chat", DEMO)
    graphs = space.param("max_cudagraph_capture_size")
    assert space.is_active(graphs, {"enforce_eager": False})
    assert not space.is_active(graphs, {"enforce_eager": True})
    cpu = deployment_space("chat", CPU)
    assert not cpu.is_active(cpu.param("max_cudagraph_capture_size"), {})
    assert not cpu.is_active(cpu.param("async_scheduling"), {})


def test_baselines_sit_inside_the_new_dimensions() -> None:
    """vLLM's resolved defaults (async on, capture min(2 x seqs, 512)) are choices of the
    built-in spaces, so the baselines can be enqueued."""
    from autotune.search.spaces.deployment import deployment_space, space_params

    for name in ("chat", "batch"):
        space = deployment_space(name, DEMO)
        for config in (vllm_defaults(DEMO), guide_heuristic(DEMO)):
            params = space_params(space, config, DEMO)
            assert params["async_scheduling"] is True
            assert params["max_cudagraph_capture_size"] == min(2 * params["max_num_seqs"], 512)


def test_a_hybrid_models_baselines_are_enqueued_at_the_block_size_they_ask_for(
        tmp_path: Path) -> None:
    """vLLM raises a hybrid model's block size past every choice a space offers (832 tokens
    here); the space names the --block-size a trial sets, so the baselines still enqueue."""
    import json

    from autotune.domain.vllm_defaults import effective_values
    from autotune.search.baselines import BASELINES
    from autotune.search.spaces.deployment import deployment_space, space_params
    from tests.domain.test_model_config import _qwen35_text_config

    text = _qwen35_text_config(num_hidden_layers=64)["text_config"]
    text["layer_types"] = (["linear_attention"] * 3 + ["full_attention"]) * 16
    (tmp_path / "config.json").write_text(json.dumps(text))
    dep = DeploymentSpec(name="q", model=str(tmp_path / "config.json"), gpu="H200-141GB",
                         gpu_count=1, tensor_parallel_size=1, max_model_len=16384)
    space = deployment_space("chat", dep)
    for make in BASELINES.values():
        config = make(dep)
        if config is None:
            continue
        params = space_params(space, config, dep)
        assert params["block_size"] in (16, 32, 64, 128)
        assert effective_values(config, dep)["block_size"] % params["block_size"] == 0
        assert effective_values(config, dep)["block_size"] > 128


def test_a_model_fact_no_rule_knows_is_named_in_a_warning() -> None:
    from dataclasses import replace

    from autotune.search.spaces.deployment import deployment_space, space_summary
    from autotune.search.spaces.violations import rules_lacking

    space = deployment_space("chat", DEMO)
    assert rules_lacking(space, DEMO) == []  # every catalogue model's kernels have rules
    bare = replace(space, rules=())
    lacking = rules_lacking(bare, DEMO)
    assert [line.split(" of ")[0] for line in lacking] == [
        "no rule knows attention_kind 'dsv4'", "no rule knows dense_quant 'fp8_block'",
        "no rule knows expert_quant 'fp4'"]
    summary = space_summary(space, DEMO)
    assert summary[0].startswith("Pinned for DeepSeek-V4-Flash on H200-141GB: block_size=256, "
                                 "kv_cache_dtype=fp8")
    assert summary[1] == ("Parallel layouts searched: TP8, TP8+EP, DP2xTP4+EP, DP4xTP2+EP, "
                          "DP8+EP")

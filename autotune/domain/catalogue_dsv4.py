"""The catalogue's DeepSeek-V4 entries, apart so that the config reader can match a V4
config.json against them without importing the catalogue (autotune/domain/dsv4_config.py)."""

from __future__ import annotations

from autotune.domain.specs import DSV4, Model


def _dsv4_ratios(layers: int, first_two: int) -> tuple[int, ...]:
    # Layers 0 and 1 have their own ratio (Flash: 0, the sliding window only; Pro: 128); from
    # layer 2 on, layers alternate between CSA (ratio 4, with an indexer) and HCA (ratio 128),
    # starting with CSA. (The configs' compress_ratios list one more entry, 0, for the MTP layer.)
    return (first_two, first_two) + tuple(4 if i % 2 == 0 else 128 for i in range(2, layers))


DSV4_MODELS: tuple[Model, ...] = (
    Model("DeepSeek-V4-Flash", 284, 13, 1.0, 0.53, 43, 4096, 129_280, 1_048_576,
          DSV4, 64, 1, 512, 0,
          "deepseek-ai/DeepSeek-V4-Flash config.json and model card: 43 layers, hidden 4096, "
          "64 heads, one 512-wide K=V entry (rope 64), sliding window 128, compress_ratios "
          "0,0 then 4/128 alternating, indexer 128-wide top-512; 256 routed experts + 1 "
          "shared, 6 per token, expert width 2048, all layers MoE; 284B total, 13B active; "
          "experts FP4 (0.5 B + block scales), the rest FP8; an MTP module (vLLM's recipe "
          "for it, vllm-project/recipes, drafts with speculative method mtp)",
          qk_rope_head_dim=64, compress_ratios=_dsv4_ratios(43, 0), sliding_window=128,
          index_head_dim=128, index_topk=512, num_experts=256, experts_per_token=6,
          moe_intermediate_size=2048, num_shared_experts=1, mtp=True,
          dense_quant="fp8_block", expert_quant="fp4", quant_block=128,
          hf_id="deepseek-ai/DeepSeek-V4-Flash"),
    Model("DeepSeek-V4-Pro", 1600, 49, 1.0, 0.53, 61, 7168, 129_280, 1_048_576,
          DSV4, 128, 1, 512, 0,
          "deepseek-ai/DeepSeek-V4-Pro config.json and model card: 61 layers, hidden 7168, "
          "128 heads, 512-wide K=V entry (rope 64), sliding window 128, compress_ratios "
          "128,128 then 4/128 alternating (31 HCA, 30 CSA layers), indexer 128-wide "
          "top-1024; 384 routed experts + 1 shared, 6 per token, expert width 3072; 1.6T "
          "total, 49B active; experts FP4, the rest FP8; an MTP module, as Flash",
          qk_rope_head_dim=64, compress_ratios=_dsv4_ratios(61, 128), sliding_window=128,
          index_head_dim=128, index_topk=1024, num_experts=384, experts_per_token=6,
          moe_intermediate_size=3072, num_shared_experts=1, mtp=True,
          dense_quant="fp8_block", expert_quant="fp4", quant_block=128,
          hf_id="deepseek-ai/DeepSeek-V4-Pro"),
)

"""DeploymentSpec: what is being served, on what, for which traffic."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotune.domain import catalogue
from autotune.errors import ConfigError

TRAFFIC_PROFILES = ("chat", "batch")
# What a deployment may be called (the API checks path names against it too).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
NAME_MAX_LENGTH = 100


class DeploymentSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=NAME_MAX_LENGTH, pattern=NAME_PATTERN)
    model: str
    gpu: str
    gpu_count: int = Field(gt=0)
    tensor_parallel_size: int = Field(gt=0)
    max_model_len: int = Field(gt=0)
    traffic_profile: str = "chat"
    # False: values that change the model's numerics (an fp8 KV cache, speculative decoding;
    # autotune/search/spaces/accuracy.py) are never searched, and a baseline or warm start
    # needing one is refused. Values the model itself requires (pins) are always run.
    allow_accuracy_affecting: bool = True

    @model_validator(mode="after")
    def _check(self) -> DeploymentSpec:
        catalogue.model(self.model)
        catalogue.gpu(self.gpu)
        if self.traffic_profile not in TRAFFIC_PROFILES:
            raise ValueError(f"traffic_profile must be one of {', '.join(TRAFFIC_PROFILES)}")
        if self.gpu_count % self.tensor_parallel_size:
            raise ValueError("gpu_count must be a multiple of tensor_parallel_size")
        return self

    @classmethod
    def build(cls, **values: object) -> DeploymentSpec:
        """Construct, turning validation failures into one-line ConfigErrors."""
        from pydantic import ValidationError

        try:
            return cls(**values)  # type: ignore[arg-type]
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "deployment"
            raise ConfigError(f"deployment {where}: {first['msg']}") from None
        except ConfigError:
            raise

    @property
    def gpu_info(self) -> catalogue.GPU:
        return catalogue.gpu(self.gpu)

    @property
    def model_info(self) -> catalogue.Model:
        return catalogue.model(self.model)

    def rule_context(self) -> dict[str, object]:
        """Deployment facts that interaction rules, pins and search-space bounds may name:
        the GPU's and the model's (catalogue) and the deployment's own."""
        g, m = self.gpu_info, self.model_info
        gdn = m.mamba_layers if isinstance(m.mamba_layers, catalogue.GatedDeltaNet) else None
        # Kimi's KDA heads split over TP as the gated delta net's (kda.py: divide(num_heads, tp)).
        kda = m.mamba_layers if isinstance(m.mamba_layers, catalogue.KimiDeltaAttention) else None
        mamba2 = m.mamba_layers if isinstance(m.mamba_layers, catalogue.Mamba2) else None
        return {"device": g.device, "gpu_memory_gib": g.memory_gib, "gpu_count": self.gpu_count,
                "compute_capability": g.compute_capability,
                "max_model_len": self.max_model_len, "model_max_len": m.max_context,
                "model_is_moe": m.num_experts > 0,
                "model_weight_gib": m.weight_bytes / 2**30,
                "model_has_mtp": m.mtp,
                "attention_kind": m.attention, "num_attention_heads": m.num_heads,
                "num_kv_heads": m.num_kv_heads, "num_experts": m.num_experts,
                "moe_intermediate_size": m.moe_intermediate_size,
                "intermediate_size": m.intermediate_size,
                "dense_quant": m.dense_quant, "expert_quant": m.expert_quant,
                "quant_block": m.quant_block,
                "model_is_hybrid": m.mamba_layers is not None,
                "linear_num_key_heads": gdn.num_key_heads if gdn else kda.num_heads if kda else 0,
                "linear_num_value_heads": (gdn.num_value_heads if gdn
                                           else kda.num_heads if kda else 0),
                "mamba_num_heads": mamba2.num_heads if mamba2 else 0,
                "mamba_n_groups": mamba2.n_groups if mamba2 else 0}


RULE_CONTEXT_NAMES = {"device", "gpu_memory_gib", "gpu_count", "compute_capability",
                      "max_model_len", "model_max_len", "model_is_moe", "model_weight_gib",
                      "model_has_mtp", "attention_kind", "num_attention_heads", "num_kv_heads",
                      "num_experts", "moe_intermediate_size", "intermediate_size", "dense_quant",
                      "expert_quant", "quant_block", "model_is_hybrid", "linear_num_key_heads",
                      "linear_num_value_heads", "mamba_num_heads", "mamba_n_groups"}

# The deployment `make tune` and the embedded defaults use.
DEMO = DeploymentSpec(
    name="demo", model="DeepSeek-V4-Flash", gpu="H200-141GB", gpu_count=8,
    tensor_parallel_size=8, max_model_len=16384, traffic_profile="chat",
)

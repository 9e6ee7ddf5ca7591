"""vLLM's own engine-config check, not only its parser: `EngineArgs(...).create_engine_config()`
in the CPU build, on tiny local configs of the real models' families (DeepSeek-V4, DeepSeek-V3,
Llama) that keep the heads, KV heads, experts and limits the rules read, so vLLM's config-time
checks (heads over TP, the scheduler's budgets, the context limit, EP on a dense model) judge
the same facts as the catalogue's entries.

Two directions: every baseline and every config a built-in space publishes is built by vLLM;
and every config vLLM refuses, autotune's rules refuse too. vLLM checks kernel block sizes and
KV dtypes only when a worker builds its attention (on a GPU), so those rules are judged by
their source, not here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from autotune.domain.deployment import DEMO, DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.measure.tiny_model import make_tiny_model
from autotune.search.baselines import baseline_configs
from autotune.search.check import check_config
from autotune.search.spaces.violations import engine_refusals
from tests.conftest import engine_python, run_cli

pytestmark = pytest.mark.integration

V3 = DeploymentSpec(name="v3", model="DeepSeek-V3", gpu="H200-141GB", gpu_count=8,
                    tensor_parallel_size=8, max_model_len=16384)
LLAMA = DeploymentSpec(name="llama", model="tiny-llama", gpu="H100-80GB", gpu_count=4,
                       tensor_parallel_size=4, max_model_len=2048)

# The real models' config.json fields the rules and vLLM's config checks read; the widths
# that only size weights are shrunk (no weights are loaded: the config is only built).
_FAMILIES: dict[str, dict[str, Any]] = {
    "DeepSeek-V4-Flash": {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
        "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 64,
        "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64,
        "n_routed_experts": 256, "num_experts_per_tok": 6, "n_shared_experts": 1,
        "moe_intermediate_size": 2048, "sliding_window": 128, "compress_ratios": [0, 0, 4, 128],
        "index_head_dim": 128, "index_topk": 512, "index_n_heads": 64, "q_lora_rank": 1024,
        "o_lora_rank": 1024, "o_groups": 8, "max_position_embeddings": 1_048_576},
    "DeepSeek-V3": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 128,
        "num_key_value_heads": 128, "n_routed_experts": 256, "num_experts_per_tok": 8,
        "n_shared_experts": 1, "n_group": 8, "topk_group": 4, "moe_intermediate_size": 2048,
        "intermediate_size": 18432, "first_k_dense_replace": 1, "kv_lora_rank": 512,
        "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "max_position_embeddings": 163_840},
}
_FP8_BLOCK = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
              "weight_block_size": [128, 128]}

BUILD = r"""
import json, sys
from vllm.engine.arg_utils import EngineArgs
out = []
for case in json.load(open(sys.argv[1])):
    try:
        EngineArgs(**case).create_engine_config()
        out.append(None)
    except Exception as exc:
        out.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]} {str(exc)[-300:]}")
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    dirs = {"tiny-llama": make_tiny_model(root / "tiny-llama")}
    for name, fields in _FAMILIES.items():
        path = make_tiny_model(root / name)  # its tokenizer; config.json is replaced
        config = {**fields, "vocab_size": json.loads((path / "config.json").read_text())[
            "vocab_size"], "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 1,
            "quantization_config": _FP8_BLOCK}
        (path / "config.json").write_text(json.dumps(config))
        dirs[name] = path
    return dirs


def _build(cases: list[tuple[Path, EngineConfig]], tmp_path: Path) -> list[str | None]:
    """vLLM's verdict on each (model directory, config): None, or why it refused."""
    docs = []
    for path, config in cases:
        args = config.explicit()
        if isinstance(args.get("speculative_config"), dict):
            args.pop("speculative_config")  # a draft needs the model's MTP weights
        docs.append({"model": str(path), "trust_remote_code": True, **args})
    (tmp_path / "cases.json").write_text(json.dumps(docs))
    proc = subprocess.run([engine_python(), "-c", BUILD, str(tmp_path / "cases.json")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return list(json.loads(line.removeprefix("RESULT ")))


def _published(space: str, dep: DeploymentSpec, tmp_path: Path) -> EngineConfig:
    """A short simulated campaign of the built-in space, published: its config."""
    env = {"AUTOTUNE_DATABASE_URL": f"sqlite:///{tmp_path / f'{space}-{dep.name}.db'}"}
    assert run_cli("db", "upgrade", env=env).returncode == 0
    tune = run_cli("tune", "--deployment", dep.name, "--campaign", space, "--space", space,
                   "--model", dep.model, "--gpu", dep.gpu, "--gpus", str(dep.gpu_count),
                   "--max-model-len", str(dep.max_model_len), "--trials", "6",
                   "--confirm-top", "0", env=env)
    assert tune.returncode == 0, tune.stderr[-2000:]
    pub = run_cli("publish", "--campaign", space, "--deployment", dep.name, env=env)
    assert pub.returncode == 0, pub.stderr[-2000:]
    api = run_cli("check-config", "--model", dep.model, "--gpu", dep.gpu, "--gpus",
                  str(dep.gpu_count), "--json", "--", *pub.stdout.splitlines()[-1].split(),
                  env=env)
    assert api.returncode == 0, api.stdout + api.stderr  # the published config passes too
    return EngineConfig(**json.loads(api.stdout)["config"])


def test_vllm_builds_every_baseline_and_every_published_config(
        model_dirs: dict[str, Path], tmp_path: Path) -> None:
    deps = (DEMO, V3, LLAMA)
    cases = [(model_dirs[d.model_info.name], c) for d in deps
             for c in baseline_configs(d).values()]
    for space in ("chat", "batch", "default"):
        cases.append((model_dirs[DEMO.model_info.name], _published(space, DEMO, tmp_path)))
    assert len(cases) >= 10
    verdicts = _build(cases, tmp_path)
    refused = [(c.to_cli_args(), v) for (_, c), v in zip(cases, verdicts, strict=True) if v]
    assert not refused


# Configs vLLM refuses when it builds its config, each with the deployment whose facts the
# rules judge it on.
_REFUSED_BY_VLLM: list[tuple[DeploymentSpec, dict[str, Any]]] = [
    (DEMO, {"tensor_parallel_size": 3}),
    (V3, {"tensor_parallel_size": 3}),
    (DEMO, {"max_num_seqs": 512, "max_num_batched_tokens": 256}),
    (DEMO, {"enable_chunked_prefill": False, "max_num_batched_tokens": 8192}),
    (DEMO, {"long_prefill_token_threshold": 32768}),
    (LLAMA, {"enable_expert_parallel": True}),
    (LLAMA, {"tensor_parallel_size": 3}),
]


def test_what_vllm_refuses_the_rules_refuse(model_dirs: dict[str, Path], tmp_path: Path) -> None:
    from autotune.search.baselines import vllm_defaults

    cases = [(dep, vllm_defaults(dep).merged(**over)) for dep, over in _REFUSED_BY_VLLM]
    # The context beyond the model's limit: a deployment the rules refuse outright.
    too_long = EngineConfig(max_model_len=4096 * 2)
    verdicts = _build([(model_dirs[d.model_info.name], c) for d, c in cases]
                      + [(model_dirs["tiny-llama"], too_long)], tmp_path)
    assert all(verdicts), verdicts  # vLLM refuses each (the last: the context limit)
    for (dep, config), verdict in zip(cases, verdicts[:-1], strict=True):
        assert engine_refusals(config, dep), (config.to_cli_args(), verdict)
    check = check_config(too_long.explicit(), model="tiny-llama", gpu="H100-80GB", gpus=1)
    assert [v.rule for v in check.refused] == ["context_within_model_limit"]

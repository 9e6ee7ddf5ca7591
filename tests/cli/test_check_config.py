"""`autotune check-config`: the rules a hand-written config breaks, with vLLM's source; the
same rules gate `autotune publish`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import run_cli

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier
V4 = ["--model", "DeepSeek-V4-Flash", "--gpu", "H200-141GB", "--gpus", "8"]

# What `make tune` published for DeepSeek-V4-Flash on 8xH200 before the rules knew the model
# (issue 28): block 16, which V4's 256-token kernels refuse.
OLD_DEMO_YAML = """\
max-model-len: 16384
tensor-parallel-size: 8
max-num-seqs: 512
max-num-batched-tokens: 4096
block-size: 16
enable-chunked-prefill: true
gpu-memory-utilization: 0.9
enable-prefix-caching: true
kv-cache-dtype: fp8
"""


def test_the_old_demo_config_names_the_block_size_rule_and_its_source(tmp_path: Path) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(OLD_DEMO_YAML)
    proc = run_cli("check-config", *V4, "--yaml", str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REFUSED  dsv4_block_size" in proc.stdout and "--block-size 16 fails" in proc.stdout
    assert "source: vllm/models/deepseek_v4/sparse_mla.py" in proc.stdout
    # vLLM's silent rewrite is shown as what it runs.
    assert "vLLM uses kv_cache_dtype=fp8_ds_mla (asked fp8)" in proc.stdout


def test_the_recipe_passes_and_unknown_flags_are_listed_not_checked() -> None:
    proc = run_cli("check-config", *V4, "--json", "--", "--tensor-parallel-size", "8",
                   "--enable-expert-parallel", "--block-size", "256", "--kv-cache-dtype", "fp8",
                   "--trust-remote-code", "--tokenizer-mode", "deepseek_v4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["passes"] and doc["violations"] == []
    assert doc["unchecked"] == ["--trust-remote-code", "--tokenizer-mode"]
    assert doc["effective"]["enable_expert_parallel"] is True
    assert doc["accuracy_affecting"] == []  # V4 on Hopper requires its fp8 cache: no change


def test_values_that_change_numerics_are_flagged_not_refused(tmp_path: Path) -> None:
    llama = ["--model", "Llama-3.1-8B", "--gpu", "H100-80GB", "--gpus", "1"]
    proc = run_cli("check-config", *llama, "--", "--kv-cache-dtype", "fp8")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("  changes numerics: kv_cache_dtype=fp8 (an 8-bit KV cache rounds the keys and "
            "values attention reads)") in proc.stdout.splitlines()
    path = tmp_path / "spec.yaml"
    path.write_text("speculative-config:\n  method: ngram\n  num_speculative_tokens: 3\n"
                    "  prompt_lookup_max: 4\n")
    doc = json.loads(run_cli("check-config", *llama, "--yaml", str(path), "--json").stdout)
    assert [(c["name"], c["value"]) for c in doc["accuracy_affecting"]] == [
        ("speculative_config", {"method": "ngram", "num_speculative_tokens": 3,
                                "prompt_lookup_max": 4})]
    plain = run_cli("check-config", *llama, "--", "--max-num-seqs", "64")
    assert plain.returncode == 0 and "changes numerics" not in plain.stdout


def test_a_slow_rule_is_a_warning_and_a_layout_rule_refuses() -> None:
    slow = run_cli("check-config", *V4, "--", "--data-parallel-size", "3",
                   "--enable-expert-parallel")
    assert slow.returncode == 0 and "slow  experts_even_over_ep" in slow.stdout
    refused = run_cli("check-config", *V4, "--", "--tensor-parallel-size", "3")
    assert refused.returncode == 1 and "tp_divides_attention_heads" in refused.stdout
    assert "(64)" in refused.stdout and "(3)" in refused.stdout


def test_bad_check_config_input_is_one_line_exit_2(tmp_path: Path) -> None:
    both = run_cli("check-config", *V4, "--yaml", str(tmp_path / "x.yaml"), "--",
                   "--block-size", "256")
    assert both.returncode == 2 and "not both or neither" in both.stderr
    missing = run_cli("check-config", *V4, "--yaml", str(tmp_path / "none.yaml"))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    removed = run_cli("check-config", *V4, "--", "--swap-space", "4")
    assert removed.returncode == 2 and "no longer exists in vLLM" in removed.stderr
    unknown = run_cli("check-config", "--model", "GPT-9", "--gpu", "H200", "--gpus", "1",
                      "--", "--block-size", "256")
    assert unknown.returncode == 2 and "unknown model 'GPT-9'" in unknown.stderr


def test_publish_refuses_a_config_the_rules_refuse(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    env = {"AUTOTUNE_DATABASE_URL": url}
    assert run_cli("db", "upgrade", env=env).returncode == 0
    assert run_cli("tune", "--trials", "3", "--confirm-top", "0", env=env).returncode == 0
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # a campaign stored before the rules knew V4's block size
        for (row_id, config) in conn.exec_driver_sql(
                "SELECT id, engine_config FROM autotune_trials").fetchall():
            doc = json.loads(config) if isinstance(config, str) else config
            conn.exec_driver_sql("UPDATE autotune_trials SET engine_config = ? WHERE id = ?",
                                 (json.dumps({**doc, "block_size": 16}), row_id))
    proc = run_cli("publish", "--campaign", "demo", env=env)
    assert proc.returncode == 2 and "breaks rule dsv4_block_size" in proc.stderr, proc.stderr
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM autotune_publications").scalar_one() == 0
    engine.dispose()


def test_a_published_yaml_reads_back_whole(tmp_path: Path) -> None:
    """What the API publishes (`model:` first, a false boolean as `no-key: true`) is read as
    the config it is: the model is no engine argument, the boolean is false, nothing unknown."""
    from autotune.domain.engine_config import EngineConfig
    from autotune.search.check import read_config_file

    config = EngineConfig(block_size=256, enable_prefix_caching=False, enforce_eager=True)
    path = tmp_path / "published.yaml"
    path.write_text(config.to_yaml(model="deepseek-ai/DeepSeek-V4-Flash"))
    values, unknown = read_config_file(path)
    assert EngineConfig(**values) == config and unknown == []

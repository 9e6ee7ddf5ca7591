"""`autotune models make-dummy`: a real model's config with a trained tokenizer of its size."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from autotune.errors import ConfigError
from autotune.measure.dummy_model import config_path, make_dummy_model
from autotune.measure.tiny_model import EOS_TOKEN, special_token_ids
from tests.conftest import engine_python


def _config(tmp_path: Path, **values: object) -> Path:
    path = tmp_path / "src" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 3000,
            "bos_token_id": 2900, "eos_token_id": [2901, 2902], "max_position_embeddings": 8192}
    path.write_text(json.dumps({**base, **values}))
    return path


def test_the_tokenizer_has_the_configs_vocabulary_and_every_id_decodes(tmp_path: Path) -> None:
    src = _config(tmp_path)
    (src.parent / "hf_quant_config.json").write_text('{"quantization": {"quant_algo": "FP8"}}')
    out = make_dummy_model(tmp_path / "m", str(src.parent))
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == 3000 and config["architectures"] == ["LlamaForCausalLM"]
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == 3000
    assert all(tok.id_to_token(i) is not None for i in range(3000))
    # The checkpoint's own end id (2901) would be an ordinary token here: the config's point at
    # the trained tokenizer's specials.
    assert config["eos_token_id"] == special_token_ids()[EOS_TOKEN]
    assert tok.id_to_token(config["eos_token_id"]) == EOS_TOKEN
    assert (out / "hf_quant_config.json").read_text() == (
        src.parent / "hf_quant_config.json").read_text()
    assert (out / "config.json").stat().st_mode & 0o044  # an engine of another user reads it


def test_bundled_ids_and_catalogue_names_find_a_config() -> None:
    by_id = config_path("meta-llama/Llama-3.1-8B")
    assert config_path("Llama-3.1-8B") == by_id  # the catalogue entry's bundled config
    assert json.loads(by_id.read_text())["vocab_size"] == 128_256


@pytest.mark.parametrize("values, fragment", [
    ({"architectures": []}, "architectures"),
    ({"vocab_size": 100}, "vocab_size"),
])
def test_bad_configs_are_refused_before_anything_is_written(
        tmp_path: Path, values: dict[str, object], fragment: str) -> None:
    src = _config(tmp_path, **values)
    with pytest.raises(ConfigError, match=fragment):
        make_dummy_model(tmp_path / "m", str(src))
    assert not (tmp_path / "m").exists()


def test_an_unknown_model_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no config.json for it"):
        make_dummy_model(tmp_path / "m", "nobody/no-such-model")


@pytest.mark.integration
def test_vllm_loads_the_8b_tokenizer_and_decodes_every_id(tmp_path: Path) -> None:
    """The GPU check's model: vLLM's own tokenizer loading (vllm.tokenizers.get_tokenizer, as
    the server's) and transformers' config, and every id of the 128256 decodes."""
    out = make_dummy_model(tmp_path / "llama8b", "meta-llama/Llama-3.1-8B")
    script = (
        "import sys, json\n"
        "from transformers import AutoConfig\n"
        "from vllm.tokenizers import get_tokenizer\n"
        "tok = get_tokenizer(sys.argv[1]); cfg = AutoConfig.from_pretrained(sys.argv[1])\n"
        "texts = tok.batch_decode([[i] for i in range(cfg.vocab_size)])\n"
        "print(json.dumps({'len': len(tok), 'vocab': cfg.vocab_size, 'eos': tok.eos_token_id,"
        " 'cfg_eos': cfg.eos_token_id, 'decoded': sum(isinstance(t, str) for t in texts)}))\n")
    done = subprocess.run([engine_python(), "-c", script, str(out)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"len": 128_256, "vocab": 128_256, "eos": found["cfg_eos"],
                     "cfg_eos": special_token_ids()[EOS_TOKEN], "decoded": 128_256}

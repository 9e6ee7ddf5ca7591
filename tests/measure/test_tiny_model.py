from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from autotune.errors import ConfigError
from autotune.measure.tiny_model import MIN_HEAD_DIM, make_tiny_model


def _bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_writes_a_llama_config_and_a_working_tokenizer(tmp_path: Path) -> None:
    path = make_tiny_model(tmp_path / "m", vocab_size=1024)
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["vocab_size"] == 1024
    assert config["hidden_size"] // config["num_attention_heads"] >= MIN_HEAD_DIM
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    assert tok.get_vocab_size() == 1024
    ids = tok.encode("def add(a, b): return a + b").ids
    assert ids and max(ids) < 1024
    assert "chat_template" in json.loads((path / "tokenizer_config.json").read_text())


def test_deterministic_for_a_seed(tmp_path: Path) -> None:
    a = _bytes(make_tiny_model(tmp_path / "a", seed=3))
    assert a == _bytes(make_tiny_model(tmp_path / "b", seed=3))
    c = _bytes(make_tiny_model(tmp_path / "c", seed=4))
    assert a["tokenizer.json"] != c["tokenizer.json"] and a["config.json"] == c["config.json"]


@pytest.mark.parametrize("kwargs, fragment", [
    ({"hidden_size": 128, "num_heads": 4}, "head"),
    ({"vocab_size": 10}, "vocab_size"),
    ({"num_heads": 4, "num_kv_heads": 3}, "num_kv_heads"),
])
def test_bad_shapes(tmp_path: Path, kwargs: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        make_tiny_model(tmp_path / "m", **kwargs)


def test_refuses_to_overwrite_other_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty|non-empty|not a model"):
        make_tiny_model(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"

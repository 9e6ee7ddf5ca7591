"""A model directory with a real model's architecture and no weights, for `vllm serve DIR
--load-format dummy`: the engine then runs that model's kernels at its size, offline.

The config.json is a bundled one (autotune/data/model_configs/, or a given file or model
directory), with its token ids pointed at a tokenizer trained here (autotune.measure.tiny_model) to
exactly the config's `vocab_size`: dummy weights sample any id of the vocabulary, so every id
must decode. A ModelOpt `hf_quant_config.json` beside the config comes along, so the engine runs
the checkpoint's weight format.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autotune.domain.catalogue import MODELS
from autotune.domain.model_sources import bundled, looks_like_path, quant_config_path
from autotune.errors import ConfigError, SettingError
from autotune.measure.tiny_model import (
    BOS_TOKEN,
    EOS_TOKEN,
    MIN_VOCAB_SIZE,
    PAD_TOKEN,
    _check_directory,
    _json,
    special_token_ids,
    tokenizer_files,
    write_model_files,
)


def config_path(name: str) -> Path:
    """The config.json a model name stands for: a model directory's, a config file, a bundled
    Hugging Face id's, or that of a catalogue entry's Hugging Face id (or name) where one is
    bundled; ConfigError if none."""
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"model directory {name}: it has no config.json")
        return path / "config.json"
    if path.is_file():
        return path
    hit = None if looks_like_path(name) else bundled(name)
    entry = next((m for key, m in MODELS.items() if key.lower() == name.lower()), None)
    if hit is None and entry is not None and entry.hf_id:
        hit = bundled(entry.hf_id)
    if hit is None:
        raise SettingError("model {name!r}: no config.json for it here (not a model directory, "
                           "a config file, nor a Hugging Face id or catalogue name with a "
                           "bundled config: `autotune models list`); pass {config} "
                           "path/to/config.json", name=name)
    return hit[1]

def dummy_config(source: Path) -> dict[str, Any]:
    """The source's config.json with its special token ids set to the trained tokenizer's."""
    try:
        config = json.loads(source.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"model config {source}: cannot read it ({exc})") from None
    if not isinstance(config, dict) or not config.get("architectures"):
        raise ConfigError(f"model config {source}: no 'architectures' list; vLLM needs it to "
                          "pick the model class")
    vocab = config.get("vocab_size")
    if not isinstance(vocab, int) or vocab < MIN_VOCAB_SIZE:
        raise ConfigError(f"model config {source}: vocab_size {vocab!r}; a trained tokenizer "
                          f"needs at least {MIN_VOCAB_SIZE}")
    ids = special_token_ids()
    # The checkpoint's ids (Llama 3's 128000...) name its own tokenizer's specials; here they
    # would be ordinary BPE tokens and an end id the model never means.
    return {**config, "bos_token_id": ids[BOS_TOKEN], "eos_token_id": ids[EOS_TOKEN],
            "pad_token_id": ids[PAD_TOKEN]}


def make_dummy_model(directory: Path, config: str, seed: int = 0) -> Path:
    """Write config.json (and hf_quant_config.json) of the model `config` names, and a trained
    tokenizer of its vocabulary size, to `directory`; return it."""
    source = config_path(config)
    directory = Path(directory)
    _check_directory(directory)
    values = dummy_config(source)
    max_len = int(values.get("max_position_embeddings") or 4096)
    files = {"config.json": _json(values),
             **tokenizer_files(int(values["vocab_size"]), max_len, seed)}
    quant = quant_config_path(source)
    if quant is not None:
        files["hf_quant_config.json"] = quant.read_text()
    write_model_files(directory, files)
    return directory

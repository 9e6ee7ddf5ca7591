"""A tiny Llama model directory, written locally, for real vLLM engines on a CPU.

`make_tiny_model` writes `config.json`, `generation_config.json` and a byte-level BPE tokenizer
trained with the `tokenizers` package on a built-in corpus (plus words drawn from `seed`), with
a chat template, so that `vllm.entrypoints.openai.api_server --model DIR --load-format dummy`
starts offline and serves both /v1/completions and /v1/chat/completions. No weights are
written: the dummy loader makes them up. The same arguments always give the same bytes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from autotune.atomic import atomic_write_text
from autotune.errors import ConfigError

BOS_TOKEN = "<|begin_of_text|>"
EOS_TOKEN = "<|end_of_text|>"
PAD_TOKEN = "<|pad|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, IM_START, IM_END)

# The vLLM CPU attention backend refuses head dimensions under 64.
MIN_HEAD_DIM = 64
# Byte-level BPE starts from the 256 byte symbols; the special tokens come first.
MIN_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)
# bfloat16 is what the CPU build runs best (AMX/AVX-512 BF16); float32 also works.
DTYPE = "bfloat16"

# Files this module writes; a directory that holds config.json is taken as a model directory.
MODEL_FILES: tuple[str, ...] = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% elif message['content'] %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}"
    "{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_CORPUS = """\
The quick brown fox jumps over the lazy dog. A model serves requests, one token at a time.
Engines schedule sequences in batches; each step prefills prompts or decodes new tokens.
The key and value cache is split into blocks, and a block holds a fixed number of tokens.
When memory runs short, the scheduler preempts a sequence and recomputes it later on.
Latency is the time to the first token and the time between tokens; throughput is tokens
per second. Tune the batch size, the token budget and the cache, then measure again.
Hello, how are you today? I am fine, thank you. What is the capital of France? Paris.
Write a short poem about the sea. Summarise this article in three sentences, please.
def add(a, b): return a + b  # numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 3.14 -1 +1 = * / %
{"role": "user", "content": "Explain paged attention."} [1, 2, 3] (x, y) <tag> a_b a-b
"""

_SYLLABLES = (
    "ka ke ki ko ku ta te ti to tu na ne ni no nu ma me mi mo mu ra re ri ro ru sa se si so su "
    "la le li lo lu pa pe pi po pu da de di do du ga ge gi go gu ba be bi bo bu va ve vi vo vu "
    "an en in on un ar er ir or ur al el il ol ul st tr pl br ch sh th qu str ing ion ent"
).split()


def make_tiny_model(
    directory: Path,
    *,
    vocab_size: int = 2048,
    hidden_size: int = 256,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    max_position_embeddings: int = 4096,
    seed: int = 0,
) -> Path:
    """Write a tiny LlamaForCausalLM directory (config and tokenizer, no weights) and return it.

    Raises ConfigError on impossible shapes, a head dimension under 64, or a directory that
    already holds something other than a model.
    """
    sizes = {
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "max_position_embeddings": max_position_embeddings,
    }
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"tiny model: {name} must be a positive integer, got {value!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ConfigError(f"tiny model: seed must be an integer, got {seed!r}")
    if vocab_size < MIN_VOCAB_SIZE:
        raise ConfigError(
            f"tiny model: vocab_size must be at least {MIN_VOCAB_SIZE} "
            f"(256 bytes + {len(SPECIAL_TOKENS)} special tokens), got {vocab_size}"
        )
    if hidden_size % num_heads:
        raise ConfigError(f"tiny model: hidden_size {hidden_size} is not a multiple of num_heads {num_heads}")
    head_dim = hidden_size // num_heads
    if head_dim < MIN_HEAD_DIM:
        raise ConfigError(
            f"tiny model: head dim hidden_size/num_heads = {head_dim} is under {MIN_HEAD_DIM}, "
            "which the vLLM CPU backend refuses; raise hidden_size or lower num_heads"
        )
    if num_kv_heads > num_heads or num_heads % num_kv_heads:
        raise ConfigError(
            f"tiny model: num_heads {num_heads} must be a multiple of num_kv_heads {num_kv_heads}"
        )
    if max_position_embeddings < 16:
        raise ConfigError(
            f"tiny model: max_position_embeddings must be at least 16, got {max_position_embeddings}"
        )

    directory = Path(directory)
    _check_directory(directory)

    ids = special_token_ids()
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": 4 * hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "use_cache": True,
        "torch_dtype": DTYPE,
        "bos_token_id": ids[BOS_TOKEN],
        "eos_token_id": ids[EOS_TOKEN],
        "pad_token_id": ids[PAD_TOKEN],
    }
    files = tokenizer_files(vocab_size, max_position_embeddings, seed)  # trained first
    write_model_files(directory, {"config.json": _json(config), **files})
    return directory


def special_token_ids() -> dict[str, int]:
    """The special tokens' ids in a tokenizer `tokenizer_files` trains: the first ids."""
    return {token: SPECIAL_TOKENS.index(token) for token in SPECIAL_TOKENS}


def tokenizer_files(vocab_size: int, model_max_length: int, seed: int) -> dict[str, str]:
    """A model directory's tokenizer files, by name: a tokenizer trained to exactly vocab_size
    ids, its chat template, and a generation config that stops on its end tokens."""
    ids = special_token_ids()
    tokenizer_json = _train_tokenizer(vocab_size, seed)
    generation_config = {
        "bos_token_id": ids[BOS_TOKEN],
        "eos_token_id": [ids[EOS_TOKEN], ids[IM_END]],
        "pad_token_id": ids[PAD_TOKEN],
    }
    special_tokens_map = {
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "additional_special_tokens": [IM_START, IM_END],
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special_tokens_map,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": model_max_length,
        "padding_side": "left",
        "chat_template": CHAT_TEMPLATE,
    }
    return {"generation_config.json": _json(generation_config), "tokenizer.json": tokenizer_json,
            "tokenizer_config.json": _json(tokenizer_config),
            "special_tokens_map.json": _json(special_tokens_map),
            "chat_template.jinja": CHAT_TEMPLATE}


def write_model_files(directory: Path, files: dict[str, str]) -> None:
    """Write each file whole (atomically) into the directory, made if missing."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        atomic_write_text(directory / name, text)
        (directory / name).chmod(0o644)  # readable by an engine running as another user


def _check_directory(directory: Path) -> None:
    """Refuse a path that is a file, or a non-empty directory that is not a model directory."""
    if not directory.exists():
        return
    if not directory.is_dir():
        raise ConfigError(f"tiny model: {directory} exists and is not a directory")
    if any(directory.iterdir()) and not (directory / "config.json").is_file():
        raise ConfigError(
            f"tiny model: {directory} is a non-empty directory without config.json; "
            "pick an empty or new directory"
        )


def _corpus(vocab_size: int, seed: int) -> list[str]:
    """The built-in text plus pseudo-words drawn from seed, enough for vocab_size merges."""
    rng = random.Random(seed)
    lines = _CORPUS.splitlines()
    words_per_line = 12
    for _ in range(max(64, vocab_size // 2)):
        words = [
            "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(words_per_line)
        ]
        lines.append(" ".join(words))
    return lines


def _train_tokenizer(vocab_size: int, seed: int) -> str:
    """Train a byte-level BPE tokenizer of exactly vocab_size tokens; return its JSON."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError("tiny model: the 'tokenizers' package is needed; pip install tokenizers") from exc

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(vocab_size, seed), trainer=trainer)
    # A corpus too small for the requested size is topped up with reserved special tokens,
    # so that every id the model can emit decodes.
    missing = vocab_size - tokenizer.get_vocab_size(with_added_tokens=True)
    if missing > 0:
        tokenizer.add_special_tokens([f"<|reserved_{i}|>" for i in range(missing)])
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B",
        special_tokens=[(BOS_TOKEN, SPECIAL_TOKENS.index(BOS_TOKEN))],
    )
    return tokenizer.to_str(pretty=True) + "\n"


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"

"""Where a model name that is not a hand-checked catalogue entry finds its config.json.

In order: a local model directory (its config.json) or a config file; then, for a Hugging
Face id (`org/name`, or the bare `name`), the configs vendored in autotune/data/model_configs/
(named as aiconfigurator-core names them, `org--name_config.json`), then those bundled with
the optional extra `aiconfigurator` (aiconfigurator_core/model_configs/, found without
importing the package). No network: an id with no config here is an unknown model.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

from autotune.domain.model_config import read_model_config
from autotune.domain.specs import Model
from autotune.errors import ConfigError, SettingError

VENDORED = Path(__file__).resolve().parents[1] / "data" / "model_configs"
SUFFIX = "_config.json"
QUANT_SUFFIX = "_hf_quant_config.json"


def _aiconfigurator_configs() -> Path | None:
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model_configs"
    return folder if folder.is_dir() else None


def config_folders() -> list[Path]:
    """The folders of bundled configs, vendored first."""
    extra = _aiconfigurator_configs()
    return [VENDORED] + ([extra] if extra else [])


def _hf_id(path: Path) -> str:
    return path.name.removesuffix(SUFFIX).replace("--", "/", 1)


@cache
def bundled_ids() -> dict[str, Path]:
    """Every bundled config by its Hugging Face id (vendored ones win)."""
    found: dict[str, Path] = {}
    for folder in reversed(config_folders()):
        for path in sorted(folder.glob(f"*{SUFFIX}")):
            if not path.name.endswith(QUANT_SUFFIX):
                found[_hf_id(path)] = path
    return found


def bundled(name: str) -> tuple[str, Path] | None:
    ids = bundled_ids()
    key = name.lower()
    for hf_id, path in ids.items():
        if hf_id.lower() == key:
            return hf_id, path
    by_tail = [(i, p) for i, p in ids.items() if i.split("/")[-1].lower() == key]
    return by_tail[0] if len(by_tail) == 1 else None


def looks_like_path(name: str) -> bool:
    return name.endswith(".json") or name.startswith((".", "/", "~")) or "\\" in name


@cache
def resolve(name: str) -> Model:
    """The Model a non-catalogue name stands for; ConfigError if none."""
    path = Path(name).expanduser()
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise ConfigError(f"model directory {name}: it has no config.json; pass the directory "
                              "of a Hugging Face checkpoint or its config.json")
        return read_model_config(config)
    if path.is_file():
        return read_model_config(path)
    if looks_like_path(name):
        raise ConfigError(f"model {name!r}: no such file or directory; pass a catalogue name, a "
                          "Hugging Face id, a model directory or a config.json path")
    hit = bundled(name)
    if hit is None:
        raise SettingError("unknown model {name!r}: not a catalogue name, nor a Hugging Face id "
                           "with a bundled config.json (`autotune models list` shows them), nor "
                           "a model directory or config.json path; pass {model} "
                           "path/to/config.json", name=name)
    hf_id, config = hit
    quant = config.with_name(config.name.removesuffix(SUFFIX) + QUANT_SUFFIX)
    return read_model_config(config, name=hf_id.split("/")[-1], hf_id=hf_id,
                             quant_path=quant if quant.is_file() else None)


def quant_config_path(config: Path) -> Path | None:
    """The ModelOpt quantisation file kept beside a config, if any (hf_quant_config.json in a
    model directory; org--name_hf_quant_config.json beside a bundled org--name_config.json)."""
    beside = config.with_name("hf_quant_config.json" if config.name == "config.json"
                              else config.name.removesuffix(SUFFIX) + QUANT_SUFFIX)
    return beside if beside != config and beside.is_file() else None

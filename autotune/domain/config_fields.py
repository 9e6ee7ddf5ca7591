"""Reading a config.json's fields: a required positive integer, the first of several names, and
the bytes of a recurrent state's dtype."""

from __future__ import annotations

from typing import Any

from autotune.errors import ConfigError

# Bytes per element of a recurrent state dtype (mamba_ssm_dtype); absent: the model's (bf16).
STATE_DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}


def need(cfg: dict[str, Any], key: str, where: str) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        found = "missing" if value is None else f"{value!r}, not a positive integer"
        raise ConfigError(f"{where}: field {key!r} is {found}; a model config needs it "
                          "(the model's published config.json has it)")
    return value


def first(cfg: dict[str, Any], *keys: str) -> Any:
    return next((cfg[k] for k in keys if cfg.get(k) is not None), None)

"""The plain-data options an engine backend is started with, resolved once in the caller so
that every worker starts the same engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.errors import SettingError, placeholder


def backend_options(backend: str, settings: Any, model_path: str | None,
                    engine_args: list[str], backend_setting: str = "backend") -> dict[str, object]:
    """`backend_setting` is the setting that chose the backend (backend, or a multi-fidelity
    campaign's confirm), named in the errors."""
    if backend != "vllm":
        if model_path or engine_args:
            raise SettingError("{model_path} and {engine_args} are for "
                               + placeholder(backend_setting) + " vllm")
        if backend != "sim":
            return {}
        sim = settings.sim  # the step model always (it decides the figures), the rest if set
        return {"step_model": sim.step_model,
                **{k: v for k, v in (("replay_delay_s", sim.replay_delay_s),
                                     ("step_precision", sim.step_precision)) if v}}
    if not model_path:
        raise SettingError(placeholder(backend_setting) + " vllm needs {model_path} (a local "
                           "model directory, e.g. one made by `autotune models make-tiny DIR`, "
                           "or a model id)")
    if (model_path.startswith((".", "/")) or Path(model_path).exists()) and not (
            Path(model_path) / "config.json").is_file():
        raise SettingError("{model_path} {got} holds no config.json; give a model directory",
                           got=model_path)
    options: dict[str, object] = {
        "model_path": str(Path(model_path).resolve()) if Path(model_path).exists() else model_path,
        "extra_args": [a for arg in engine_args for a in arg.split("=", 1)],
        "startup_timeout_s": settings.engine.startup_timeout_s,
        "log_dir": str(Path(settings.engine.log_dir).resolve()),
        "watermarks": dict(settings.engine.memory_watermarks),
    }
    if settings.engine.server_command():
        options["command"] = settings.engine.server_command()
    return options

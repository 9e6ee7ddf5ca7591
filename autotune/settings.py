"""Settings, read from the environment (prefix AUTOTUNE_) when needed, never at import time."""

from __future__ import annotations

import os
import sys
from typing import Literal

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ApiSettings(BaseModel):
    host: str = "127.0.0.1"  # the address `autotune api` binds (its --host wins)
    port: int = 8787  # the port `autotune api` listens on (its --port wins)
    # Bearer token (AUTOTUNE_API__TOKEN) for writes. None (or empty) means writes are refused.
    token: str | None = None
    # AUTOTUNE_API__PROTECT_READS=true: reads (GET /v1/..., /metrics) need the token too.
    # /healthz, /readyz and the OpenAPI docs stay open for probes and people.
    protect_reads: bool = False

    @model_validator(mode="after")
    def _reads_need_a_token(self) -> ApiSettings:
        if self.protect_reads and not self.token:
            raise ValueError("AUTOTUNE_API__PROTECT_READS is on but AUTOTUNE_API__TOKEN is unset; "
                             "set a token or turn read protection off")
        return self


class EngineSettings(BaseModel):
    """How real engines are started (the `vllm` backend)."""

    # The interpreter whose `-m vllm.entrypoints.openai.api_server` starts a server; None: this
    # one. vLLM often lives in its own venv or image, so it need not share the tuner's pins.
    python: str | None = None
    # Or a whole command (e.g. ["vllm", "serve"] or a container run); wins over `python`.
    command: list[str] | None = None
    # Seconds a server may take to answer /health; a slower start fails the trial (start_timeout).
    startup_timeout_s: float = 900.0
    # Each trial's server log is kept here, to read why an engine failed.
    log_dir: str = "runs/engine-logs"
    # GPU memory watermarks (fraction in use): note, flag, abort the trial (tuning guide).
    memory_watermarks: dict[str, float] = {"warn": 0.85, "flag": 0.90, "abort": 0.95}

    def server_command(self) -> list[str] | None:
        if self.command:
            return list(self.command)
        if self.python:
            return [self.python, "-m", "vllm.entrypoints.openai.api_server"]
        return None


class SimSettings(BaseModel):
    """The simulator backend."""

    # Profiles fitted by `autotune sim calibrate` are saved here, and found before the bundled
    # defaults when a simulated engine starts.
    profile_dir: str = "runs/sim-profiles"
    # Wall-clock seconds each simulated replay takes at least, so a simulated campaign can be
    # paced like a real one (demos, and the resume and Ray tests that kill jobs mid-trial).
    replay_delay_s: float = Field(default=0.0, ge=0)
    # GPU step times: "measured" (the committed table for the engine's GPU, model, layout and
    # step_precision, default the checkpoint's; the roofline where there is none), or
    # "roofline" (always the roofline, with the profile's uncalibrated GPU coefficients).
    step_model: Literal["measured", "roofline"] = "measured"
    # The precision the measured table is looked up at, "dense/experts" (e.g.
    # "fp8_block/fp8_block"); None: the checkpoint's own (catalogue).
    step_precision: str | None = None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="AUTOTUNE_", env_nested_delimiter="__", extra="ignore"
    )

    # SQLite (WAL) in the working directory by default; PostgreSQL in production.
    database_url: str = "sqlite:///autotune.db"
    # None starts a local Ray; "auto" or "ray://host:10001" joins a cluster.
    ray_address: str | None = None
    # Logical GPUs a local Ray declares for the simulator (default: --parallel x TP), e.g. to
    # try a campaign on a cluster smaller than its parallelism.
    ray_logical_gpus: int | None = Field(default=None, ge=1)
    api: ApiSettings = ApiSettings()
    engine: EngineSettings = EngineSettings()
    sim: SimSettings = SimSettings()
    log_level: str = "WARNING"  # module lines are INFO; progress lines show up to WARNING
    # A tuning job renews its hold on a campaign every third of this; a job whose hold has not
    # moved for this long is taken for dead, and `autotune tune` resumes its campaign.
    campaign_lease_s: float = Field(default=30.0, gt=0)


def get_settings() -> Settings:
    return Settings()


def setting_env_names() -> list[str]:
    """Every variable the settings read: AUTOTUNE_<FIELD>, and AUTOTUNE_<SECTION>__<FIELD>."""
    names = []
    for name, field in Settings.model_fields.items():
        section = field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            names += [f"AUTOTUNE_{name}__{sub}".upper() for sub in section.model_fields]
        else:
            names.append(f"AUTOTUNE_{name}".upper())
    return names


def _squashed(name: str) -> str:
    return name.upper().removeprefix("AUTOTUNE_").replace("_", "")


def _edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def misspelled_settings(environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """One line per AUTOTUNE_ variable that is no setting but nearly names one (a section's
    fields take two underscores, AUTOTUNE_SIM__STEP_MODEL; a typo): the settings ignore unknown
    variables, so such a mistake would otherwise run silently on the default. Variables of our
    scripts and tests (AUTOTUNE_GPU_DRYRUN, ...) are nowhere near a setting and pass."""
    known = setting_env_names()
    lines = []
    for var in sorted(environ):
        if not var.upper().startswith("AUTOTUNE_") or var.upper() in known:
            continue
        if var == _RETIRED_ENGINE_PYTHON_ENV:  # has its own deprecation line
            continue
        squashed = _squashed(var)
        near = [name for name in known if _edit_distance(squashed, _squashed(name)) <= 2]
        if near:
            best = min(near, key=lambda name: _edit_distance(squashed, _squashed(name)))
            lines.append(f"autotune: {var} is not a setting and is ignored; did you mean {best}?")
    return lines


ENGINE_PYTHON_ENV = "AUTOTUNE_ENGINE__PYTHON"  # the `engine.python` setting
_RETIRED_ENGINE_PYTHON_ENV = "AUTOTUNE_ENGINE_PYTHON"  # what the tests and benchmarks once read


def engine_python_env() -> str | None:
    """The vLLM interpreter named in the environment, for the tests and benchmarks that start
    the engine themselves: the same variable autotune's setting reads. The retired name still
    works, with a line that says so."""
    value = os.environ.get(ENGINE_PYTHON_ENV)
    if value:
        return value
    retired = os.environ.get(_RETIRED_ENGINE_PYTHON_ENV)
    if retired:
        print(f"autotune: {_RETIRED_ENGINE_PYTHON_ENV} is deprecated; set {ENGINE_PYTHON_ENV} "
              "(the engine.python setting) instead", file=sys.stderr)
    return retired or None

"""Settings, read from the environment (prefix AUTOTUNE_) when needed, never at import time."""

from __future__ import annotations

from pydantic import BaseModel
from pydantic_settings import BaseSettings, SettingsConfigDict


class ApiSettings(BaseModel):
    host: str = "127.0.0.1"
    port: int = 8787
    # Bearer token for writes; reads are open. None means writes are refused.
    token: str | None = None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="AUTOTUNE_", env_nested_delimiter="__", extra="ignore"
    )

    # SQLite (WAL) in the working directory by default; PostgreSQL in production.
    database_url: str = "sqlite:///autotune.db"
    # None starts a local Ray; "auto" or "ray://host:10001" joins a cluster.
    ray_address: str | None = None
    api: ApiSettings = ApiSettings()
    log_level: str = "WARNING"  # per-trial lines are INFO


def get_settings() -> Settings:
    return Settings()

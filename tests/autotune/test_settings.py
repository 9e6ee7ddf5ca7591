from __future__ import annotations

import pytest

from autotune.settings import get_settings


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AUTOTUNE_DATABASE_URL", "AUTOTUNE_API__TOKEN", "AUTOTUNE_RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    s = get_settings()
    assert s.database_url == "sqlite:///autotune.db" and s.ray_address is None
    assert (s.api.host, s.api.port, s.api.token) == ("127.0.0.1", 8787, None)


def test_environment_with_nested_api_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_DATABASE_URL", "postgresql+psycopg://u@h/db")
    monkeypatch.setenv("AUTOTUNE_API__PORT", "9000")
    monkeypatch.setenv("AUTOTUNE_API__TOKEN", "s3cret")
    monkeypatch.setenv("AUTOTUNE_RAY_ADDRESS", "auto")
    s = get_settings()
    assert s.database_url.startswith("postgresql") and s.ray_address == "auto"
    assert (s.api.port, s.api.token) == (9000, "s3cret")


def test_reads_are_open_unless_protected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOTUNE_API__PROTECT_READS", raising=False)
    assert get_settings().api.protect_reads is False
    monkeypatch.setenv("AUTOTUNE_API__PROTECT_READS", "true")
    monkeypatch.setenv("AUTOTUNE_API__TOKEN", "s3cret")
    assert get_settings().api.protect_reads is True


@pytest.mark.parametrize("token", [None, ""])
def test_protected_reads_without_a_token_are_refused_at_start(
        monkeypatch: pytest.MonkeyPatch, token: str | None) -> None:
    from pydantic import ValidationError

    monkeypatch.setenv("AUTOTUNE_API__PROTECT_READS", "1")
    if token is None:
        monkeypatch.delenv("AUTOTUNE_API__TOKEN", raising=False)
    else:
        monkeypatch.setenv("AUTOTUNE_API__TOKEN", token)
    with pytest.raises(ValidationError, match="AUTOTUNE_API__TOKEN is unset"):
        get_settings()

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


def test_a_variable_that_nearly_names_a_setting_is_named_with_the_setting() -> None:
    from autotune.settings import misspelled_settings, setting_env_names

    env = {"AUTOTUNE_SIM_STEP_MODEL": "roofline",  # one underscore: a section needs two
           "AUTOTUNE_DATABASE__URL": "sqlite:///x.db",  # two: a top-level field takes one
           "AUTOTUNE_DATABSE_URL": "sqlite:///x.db",  # a typo
           "AUTOTUNE_API__TOKEN": "s3cret",  # right
           "AUTOTUNE_GPU_DRYRUN": "1", "AUTOTUNE_TRACES_DIR": "/t",  # our scripts' own
           "AUTOTUNE_ENGINE_PYTHON": "/py",  # retired, with its own line
           "PATH": "/bin"}
    lines = misspelled_settings(env)
    assert lines == [
        "autotune: AUTOTUNE_DATABASE__URL is not a setting and is ignored; "
        "did you mean AUTOTUNE_DATABASE_URL?",
        "autotune: AUTOTUNE_DATABSE_URL is not a setting and is ignored; "
        "did you mean AUTOTUNE_DATABASE_URL?",
        "autotune: AUTOTUNE_SIM_STEP_MODEL is not a setting and is ignored; "
        "did you mean AUTOTUNE_SIM__STEP_MODEL?"]
    assert "AUTOTUNE_SIM__STEP_MODEL" in setting_env_names()
    assert misspelled_settings({name: "x" for name in setting_env_names()}) == []


def test_the_cli_says_a_misspelled_setting_once(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.cli import common

    monkeypatch.setattr(common, "_named_misspellings", set())
    monkeypatch.delenv("AUTOTUNE_SIM__STEP_MODEL", raising=False)
    monkeypatch.setenv("AUTOTUNE_SIM_STEP_MODEL", "roofline")
    assert common.load_settings().sim.step_model == "measured"  # ignored, as the line says
    common.load_settings()
    assert capsys.readouterr().err.count("did you mean AUTOTUNE_SIM__STEP_MODEL?") == 1

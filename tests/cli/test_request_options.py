"""tune's and quarterly's options come from their request models: one option per setting, under
the flag its errors name, with the model's type and default."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from pydantic import BaseModel

from autotune.campaign.requests import QuarterlyRequest, TuneRequest
from autotune.cli.flags import TUNE_FLAGS, flag_of
from autotune.cli.main import app

CLI_ONLY = {"as_json", "by"}  # the commands' own: --json, and quarterly's --by (published_by)


def _options(command: str) -> dict[str, Any]:
    params = typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]
    return {p.name: p for p in params if p.name not in CLI_ONLY}


@pytest.mark.parametrize(("command", "model", "flags", "not_options"), [
    ("tune", TuneRequest, TUNE_FLAGS, set()),
    ("quarterly", QuarterlyRequest, None, {"published_by"}),  # --by: $USER where left out
])
def test_every_setting_is_an_option_under_its_flag_with_the_models_default(
        command: str, model: type[BaseModel], flags: dict[str, str] | None,
        not_options: set[str]) -> None:
    options = _options(command)
    assert set(options) == set(model.model_fields) - not_options
    for name, option in options.items():
        assert option.opts[0] == flag_of(name, flags), name  # the flag an error names
        field = model.model_fields[name]
        if field.is_required():
            assert option.required, name
        else:
            # a repeatable option's [] shows as no default
            assert option.default == (None if field.default == [] else field.default), name


def test_the_cli_keeps_its_flags_order_and_switches() -> None:
    options = list(_options("tune").values())
    assert [o.opts[0] for o in options[:6]] == ["--deployment", "--campaign", "--model", "--gpu",
                                                "--gpus", "--tp"]
    by_name = {o.name: o for o in options}
    assert by_name["max_trials"].opts == ["--trials", "--max-trials"]
    assert by_name["allow_accuracy_affecting"].secondary_opts == ["--forbid-accuracy-affecting"]
    assert by_name["per_path"].is_flag and not by_name["per_path"].secondary_opts
    assert by_name["slo"].default == "ttft_p99<=2s,tpot_p99<=50ms"  # the text, as --help shows
    assert by_name["engine_args"].multiple

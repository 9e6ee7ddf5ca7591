"""The request models of run_campaign and run_quarterly: their errors name the setting, and the
CLI's flag table turns that into the flag its lines have always named."""

from __future__ import annotations

import pytest

from autotune.campaign.requests import QuarterlyRequest, TuneRequest
from autotune.cli.flags import TUNE_FLAGS, flag_message
from autotune.domain.slo import DEFAULT_SLO, parse_slo
from autotune.errors import ConfigError, SettingError


@pytest.mark.parametrize(("values", "library", "cli"), [
    ({"max_trials": 2}, "max_trials must be at least 3", "--trials must be at least 3"),
    ({"gpu_count": "eight"}, "gpu_count: Input should be a valid integer",
     "--gpus: Input should be a valid integer"),
    ({"max_gpu_hours": 0}, "max_gpu_hours must be positive", "--max-gpu-hours must be positive"),
    ({"screen": "sim"}, "screen sim needs confirm BACKEND", "--screen sim needs --confirm BACKEND"),
    ({"engine_args": ["--x"]}, "model_path and engine_args are for backend vllm", None),
    ({"slo_warm": "ttft_p99<=1s", "per_path": True},
     "slo_warm: warm is no path of paths hot,cold", "--slo-warm: warm is no path of --paths "
                                                    "hot,cold"),
    ({"deadline": "a{b}"}, "deadline 'a{b}' is not an ISO 8601 time",
     "--deadline 'a{b}' is not an ISO 8601 time"),
])
def test_tune_request_errors_name_the_setting(values: dict[str, object], library: str,
                                              cli: str | None) -> None:
    try:
        TuneRequest.of(**values)
    except SettingError as exc:
        assert library in str(exc) and "--" not in str(exc).split(":")[0]
        if cli is not None:
            assert cli in flag_message(exc, TUNE_FLAGS)
        return
    assert cli is None  # checked when the campaign runs (it needs the settings)


def test_a_setting_error_is_a_config_error() -> None:  # exit 2 and the JSON type, as before
    with pytest.raises(ConfigError):
        TuneRequest.of(parallel=0)


def test_quarterly_request_checks_once_and_names_its_own_flags() -> None:
    with pytest.raises(SettingError) as caught:
        QuarterlyRequest.of(deployment="d", published_by="me", max_trials=1)
    assert flag_message(caught.value).startswith("--max-trials must be at least 3")
    with pytest.raises(SettingError, match="^confirm_top must be at least 1"):
        QuarterlyRequest.of(deployment="d", published_by="me", confirm_top=0)
    request = QuarterlyRequest.of(deployment="d", published_by="me", period="2027Q1")
    assert request.period_label == "2027Q1" and request.confirm_plan(0) is not None


def test_an_slo_setting_is_read_once_into_an_slo() -> None:
    request = TuneRequest.of(slo="ttft_p99<=1s", per_path=True, slo_hot="tpot_p99<=20ms",
                             slo_cold="")
    assert request.slo == parse_slo("ttft_p99<=1s")
    assert TuneRequest.of().slo == parse_slo(DEFAULT_SLO)
    assert request.path_slos == {"hot": parse_slo("tpot_p99<=20ms")}  # empty: the campaign's
    given = parse_slo("e2e_p99<=9s")
    assert TuneRequest.of(slo=given).slo is given
    quarterly = QuarterlyRequest.of(deployment="d", published_by="me", slo="ttft_p99<=3s")
    assert quarterly.slo == parse_slo("ttft_p99<=3s")
    assert QuarterlyRequest.of(deployment="d", published_by="me").slo is None


@pytest.mark.parametrize(("values", "cli"), [
    # An SLO is read in the checks' order: a path SLO after --per-path and --paths are checked.
    ({"slo_hot": "bogus"}, "--slo-hot, --slo-warm and --slo-cold are for --per-path"),
    ({"slo_hot": "bogus", "per_path": True, "max_trials": 2}, "--trials must be at least 3"),
    ({"slo_hot": "bogus", "per_path": True}, "cannot read SLO term 'bogus'"),
    ({"slo": 5}, "--slo: Input should be a valid string"),
    ({"slo_hot": None, "slo": None}, "--slo: Input should be a valid string"),
])
def test_slo_settings_are_checked_in_order(values: dict[str, object], cli: str) -> None:
    with pytest.raises(SettingError) as caught:
        TuneRequest.of(**values)
    assert flag_message(caught.value, TUNE_FLAGS).startswith(cli)
    with pytest.raises(SettingError, match="^max_trials must be at least 3"):
        QuarterlyRequest.of(deployment="d", published_by="me", max_trials=1, slo="bogus")

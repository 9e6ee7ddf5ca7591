"""The command-line flag of each library setting (autotune.errors.SettingError names settings).

A setting's flag is its name in kebab case (max_gpu_hours: --max-gpu-hours) unless the table
says otherwise; a command whose flag differs for the same setting passes its own overrides.
"""

from __future__ import annotations

from collections.abc import Mapping

from autotune.errors import AutotuneError, SettingText

FLAGS = {
    "gpu_count": "--gpus",
    "tensor_parallel_size": "--tp",
    "traffic_profile": "--traffic",
    "engine_args": "--engine-arg",  # repeatable: one argument a flag
    "trial_number": "--trial",
    "out_dir": "--out",  # capture, report
    "config_file": "--yaml",  # check-config: a `vllm serve --config` file
    "start_s": "--start",  # traffic shape
    "end_s": "--end",
    "sample_requests": "--sample",
}
TUNE_FLAGS = {"max_trials": "--trials"}  # `quarterly` keeps --max-trials


def flag_of(setting: str, overrides: Mapping[str, str] | None = None) -> str:
    found = (overrides or {}).get(setting) or FLAGS.get(setting)
    return found or "--" + setting.replace("_", "-")


def flag_message(exc: AutotuneError | SettingText,
                 overrides: Mapping[str, str] | None = None) -> str:
    """The error's (or warning's) line as the command line says it: its settings named by their
    flags."""
    return exc.render(lambda setting: flag_of(setting, overrides))

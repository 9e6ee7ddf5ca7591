"""`tune` outside a terminal (piped to a file, CI): one log line per event on stderr at the
default log level, never a redraw; stdout keeps the tables, and with --json the one object.
`publish` logs its publication the same way."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.e2e  # the CLI as a process

FAST = ["--trials", "3", "--confirm-top", "1", "--confirm-repeats", "2"]
LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO autotune\.progress: (.*)$")


def test_piped_tune_logs_one_line_per_event(migrated_sqlite: str) -> None:
    env = {"AUTOTUNE_DATABASE_URL": migrated_sqlite}
    proc = run_cli("tune", *FAST, "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(proc.stdout.splitlines()) == 1 and "trials" in json.loads(proc.stdout)
    assert "\r" not in proc.stderr and "\x1b[" not in proc.stderr  # no redraw, no cursor moves
    events = [m.group(1) for line in proc.stderr.splitlines() if (m := LINE.match(line))]
    started = [e for e in events if re.fullmatch(r"demo:demo trial \d \([^)]+, sim\): started", e)]
    finished = [e for e in events if re.match(r"demo:demo trial \d \([^)]+, sim\): measured, "
                                              r"capacity [\d,]+ output tok/s; \d/3 trials done", e)]
    assert len(started) == len(finished) == 3, "\n".join(events)
    # Each trial's replays, the first at the recorded rate, each with the rate it offers.
    steps = [e for e in events if re.match(r"demo:demo trial 0: (ladder|bisect) step \d+/\d+, "
                                           r"x[\d.]+ \([\d.]+ req/s offered\)$", e)]
    assert steps and steps[0].startswith("demo:demo trial 0: ladder step 1/")
    assert sum("search stopped (max_trials) after 3 trials" in e for e in events) == 1
    runs = [e for e in events if re.match(r"demo:demo:confirm run \d/\d: trial \d", e)]
    assert len(runs) % 2 == 0 and len(runs) >= 4  # each run started and finished
    assert sum(e.endswith(": started") for e in runs) == len(runs) // 2
    assert all("left" in e for e in runs if not e.endswith(": started"))
    published = run_cli("publish", "--campaign", "demo", "--json", env=env)
    assert published.returncode == 0, published.stderr
    [line] = [m.group(1) for x in published.stderr.splitlines() if (m := LINE.match(x))]
    assert re.fullmatch(r"published trial \d+ of campaign 'demo' for deployment 'demo' \(.+\)",
                        line)


def test_a_raised_log_level_silences_the_progress_lines(migrated_sqlite: str) -> None:
    env = {"AUTOTUNE_DATABASE_URL": migrated_sqlite, "AUTOTUNE_LOG_LEVEL": "ERROR"}
    proc = run_cli("tune", *FAST, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "autotune.progress" not in proc.stderr
    assert "Top trials of demo:demo" in proc.stdout  # the result still prints
    # The figures depend on the simulator's step model, so the run names it.
    assert "Simulator step model: partly estimated kernel tables for TP8, TP8+EP" in proc.stdout


def test_at_info_each_event_is_still_one_line(migrated_sqlite: str) -> None:
    # INFO adds the modules' own lines; none may say again what a progress line says.
    env = {"AUTOTUNE_DATABASE_URL": migrated_sqlite, "AUTOTUNE_LOG_LEVEL": "INFO"}
    proc = run_cli("tune", "--trials", "3", "--confirm-top", "0", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()

    def count(pattern: str) -> int:
        return sum(bool(re.search(pattern, line)) for line in lines)

    for n in range(3):
        assert count(rf"demo:demo trial {n} \([^)]+\): start") == 1, proc.stderr
        assert count(rf"demo:demo trial {n} \([^)]+\): (measured|slo miss|failed|rejected)") \
            == 1, proc.stderr
        # What INFO adds: the arguments the trial's engine started with.
        assert count(rf"INFO autotune\.study: demo:demo trial {n} \([^)]+\): engine "
                     r"arguments --") == 1, proc.stderr
    assert count(r"search stopped \(max_trials\) after 3 trials") == 1, proc.stderr


@pytest.mark.integration
def test_piped_tune_on_ray_logs_each_workers_steps(migrated_sqlite: str) -> None:
    # Trials two at once on Ray workers: their ladder steps reach the driver's log lines, each
    # before its trial's result.
    env = {"AUTOTUNE_DATABASE_URL": migrated_sqlite, "AUTOTUNE_SIM__REPLAY_DELAY_S": "0.05"}
    proc = run_cli("tune", "--trials", "3", "--confirm-top", "0", "--executor", "ray",
                   "--parallel", "2", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [m.group(1) for line in proc.stderr.splitlines() if (m := LINE.match(line))]
    for n in (0, 1):  # the baselines, side by side (a proposal may repeat one: no steps)
        steps = [i for i, e in enumerate(events) if re.match(
            rf"demo:demo trial {n}: (ladder|bisect) step \d+/\d+, x[\d.]+ \([\d.]+ req/s "
            r"offered\)$", e)]
        [done] = [i for i, e in enumerate(events)
                  if re.match(rf"demo:demo trial {n} \([^)]+, sim\): (measured|slo miss)", e)]
        assert steps and events[steps[0]].startswith(f"demo:demo trial {n}: ladder step 1/")
        assert max(steps) < done, "\n".join(events)

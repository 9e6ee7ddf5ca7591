"""Bad input: one line naming the problem and the fix, exit code 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import run_cli

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier

FAST = ["--trials", "3"]


def _rows(url: str) -> dict[str, int]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return {t: conn.exec_driver_sql(f"SELECT COUNT(*) FROM {t}").scalar_one()
                    for t in ("autotune_deployments", "autotune_campaigns", "studies")}
    finally:
        engine.dispose()


def _assert_one_line_error(proc, fragment: str) -> None:  # type: ignore[no-untyped-def]
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("autotune: error: ") and fragment in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("make_args, fragment", [
    (lambda tmp: ["--space", str(_file(tmp, "s.yaml",
                                       "parameters:\n  max_num_seq: {type: int, low: 1, high: 8}\n"))],
     "unknown parameter 'max_num_seq'"),
    (lambda tmp: ["--slo", "ttft_p99<2s"], "cannot read SLO term 'ttft_p99<2s'"),
    (lambda tmp: ["--space", str(_file(
        tmp, "r.yaml", "parameters:\n  max_num_seqs: {type: int, low: 8, high: 1024, log: true}\n"
                       "rules:\n  - {name: mine, require: 'batch > 2', message: m}\n"))],
     "references unknown name(s) batch"),
    (lambda tmp: ["--trace", str(tmp / "missing.jsonl")], "does not exist"),
    (lambda tmp: ["--trace", str(_file(tmp, "bad.jsonl", '{"arrival_s": 0, "prompt_tokens": -3, '
                                                         '"output_tokens": 5}\n'))],
     "row 1, column 'prompt_tokens'"),
    (lambda tmp: ["--gpu", "TPU-v9"], "unknown GPU 'TPU-v9'"),
    (lambda tmp: ["--executor", "slurm"], "unknown executor 'slurm'"),
    (lambda tmp: ["--deadline", "2001-01-01T00:00:00"], "has already passed"),
    (lambda tmp: ["--deadline", "tomorrow"], "is not an ISO 8601 time"),
    (lambda tmp: ["--max-gpu-hours", "0"], "--max-gpu-hours must be positive"),
    (lambda tmp: ["--max-gpu-hours", "nan"], "--max-gpu-hours must be positive"),
    (lambda tmp: ["--space", "chat-speculative"],
     "searches speculative_config, which the simulator does not model"),
    # A rule file's problems name the file and the rule.
    (lambda tmp: ["--space", str(_file(
        tmp, "m.yaml", "parameters:\n  max_num_seqs: {type: int, low: 8, high: 1024, log: true}\n"
                       "rules:\n  - {name: mine, require: 'max_num_seqs >', message: m}\n"))],
     "m.yaml: rule 'mine': cannot parse"),
    (lambda tmp: ["--space", str(_file(
        tmp, "f.yaml", "parameters:\n  max_num_seqs: {type: int, low: 8, high: 1024, log: true}\n"
                       "rules:\n  - {name: mine, when: 'num_heads > 2', require: 'max_num_seqs > 8', "
                       "message: m}\n"))],
     "f.yaml: rule 'mine' references unknown name(s) num_heads"),
    # An accuracy marking must name the parameter's own values (the file is named).
    (lambda tmp: ["--space", str(_file(
        tmp, "a.yaml", "parameters:\n  kv_cache_dtype: {type: categorical, choices: [auto, fp8], "
                       "affects_accuracy: [fp16]}\n"))],
     "a.yaml: parameter 'kv_cache_dtype': 'affects_accuracy' names 'fp16', which is not among"),
    # The file's schema (autotune/search/spaces/file_schema.py): the file, the parameter, what is wrong.
    (lambda tmp: ["--space", str(_file(
        tmp, "k.yaml", "parameters:\n  block_size: {type: categorical, choices: [16], colour: red}\n"))],
     "k.yaml: parameter 'block_size': unknown key(s) colour"),
    (lambda tmp: ["--space", str(_file(
        tmp, "t.yaml", "parameters:\n  max_num_seqs: {type: int, low: eight, high: 64}\n"))],
     "t.yaml: parameter 'max_num_seqs': 'low': must be a number (got 'eight')"),
    (lambda tmp: ["--space", str(_file(
        tmp, "h.yaml", "parameters:\n  max_num_seqs: {type: int, low: 64, high: 8}\n"))],
     "h.yaml: parameter 'max_num_seqs': needs numeric 'low' <= 'high'"),
    (lambda tmp: ["--space", str(_file(
        tmp, "s0.yaml", "parameters:\n  max_num_seqs: {type: int, low: 8, high: 64, step: 0}\n"))],
     "s0.yaml: parameter 'max_num_seqs': 'step' must be positive"),
    (lambda tmp: ["--space", str(_file(
        tmp, "c.yaml", "parameters:\n  block_size: {type: categorical, choices: []}\n"))],
     "c.yaml: parameter 'block_size': needs a non-empty 'choices' list"),
    # A deployment that forbids them, with a space that offers nothing else.
    (lambda tmp: ["--model", "DeepSeek-V3", "--forbid-accuracy-affecting", "--space", str(_file(
        tmp, "o.yaml", "parameters:\n  kv_cache_dtype: {type: categorical, choices: [fp8]}\n"))],
     "every value of 'kv_cache_dtype' changes the model's numerics"),
    # A deployment vLLM cannot serve: the layout, the GPU generation.
    (lambda tmp: ["--gpus", "3"], "the layout TP3 is refused (tp_divides_attention_heads"),
    (lambda tmp: ["--gpu", "A100-80GB"], "cannot be served: dsv4_needs_hopper_or_blackwell"),
])
def test_bad_tune_input_writes_nothing(tmp_path: Path, migrated_sqlite: str, make_args,  # type: ignore[no-untyped-def]
                                       fragment: str) -> None:
    before = _rows(migrated_sqlite)
    proc = run_cli("tune", *FAST, *make_args(tmp_path),
                   env={"AUTOTUNE_DATABASE_URL": migrated_sqlite})
    _assert_one_line_error(proc, fragment)
    assert _rows(migrated_sqlite) == before


def _file(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def test_unreachable_database(tmp_path: Path) -> None:
    proc = run_cli("tune", *FAST, env={
        "AUTOTUNE_DATABASE_URL": "postgresql+psycopg://autotune@127.0.0.1:1/autotune"})
    _assert_one_line_error(proc, "cannot reach the database at")


def test_unmigrated_database_names_the_upgrade_command(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE something (x INTEGER)")
    engine.dispose()
    for args in (["tune", *FAST], ["publish", "--campaign", "demo"], ["campaigns"]):
        proc = run_cli(*args, env={"AUTOTUNE_DATABASE_URL": f"sqlite:///{db}"})
        _assert_one_line_error(proc, "run `autotune db upgrade`")
    inspector_engine = sa.create_engine(f"sqlite:///{db}")
    assert sa.inspect(inspector_engine).get_table_names() == ["something"]
    inspector_engine.dispose()


def test_missing_sqlite_database_is_not_created(tmp_path: Path) -> None:
    db = tmp_path / "absent.db"
    proc = run_cli("tune", *FAST, env={"AUTOTUNE_DATABASE_URL": f"sqlite:///{db}"})
    _assert_one_line_error(proc, "run `autotune db upgrade`")
    assert not db.exists()


def test_unknown_flag_is_one_line() -> None:
    proc = run_cli("tune", "--max-seqs", "3")
    _assert_one_line_error(proc, "No such option: --max-seqs")


def test_publish_unknown_campaign(migrated_sqlite: str) -> None:
    proc = run_cli("publish", "--campaign", "2031Q1",
                   env={"AUTOTUNE_DATABASE_URL": migrated_sqlite})
    _assert_one_line_error(proc, "no campaign named '2031Q1'")


def test_publish_survives_a_closed_stdout(tmp_path: Path) -> None:
    """`autotune publish ... | head -1`: the publication is committed before anything is printed."""
    import subprocess

    from tests.conftest import AUTOTUNE

    env = {"AUTOTUNE_DATABASE_URL": f"sqlite:///{tmp_path / 'a.db'}"}
    assert run_cli("db", "upgrade", env=env).returncode == 0
    assert run_cli("tune", "--trials", "3", env=env).returncode == 0
    subprocess.run(f"{AUTOTUNE} publish --campaign demo | head -c 1 > /dev/null", shell=True,
                   env={**__import__("os").environ, **env}, timeout=120, check=False)
    engine = sa.create_engine(env["AUTOTUNE_DATABASE_URL"])
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM autotune_publications").scalar_one() == 1
    engine.dispose()


@pytest.mark.parametrize("env, fragment", [
    ({"AUTOTUNE_API__PORT": "abc"}, "bad setting AUTOTUNE_API__PORT: Input should be a valid integer"),
    ({"AUTOTUNE_API__PROTECT_READS": "true", "AUTOTUNE_API__TOKEN": ""},
     "AUTOTUNE_API__PROTECT_READS is on but AUTOTUNE_API__TOKEN is unset"),
])
def test_bad_setting_names_the_variable(env: dict[str, str], fragment: str) -> None:
    proc = run_cli("api", env=env)
    _assert_one_line_error(proc, fragment)
    assert "errors.pydantic.dev" not in proc.stderr


def test_an_unreachable_ray_cluster_is_the_infrastructure_exit_5(migrated_sqlite: str) -> None:
    """Not bad input: the scheduler should retry, not page someone to fix a flag."""
    proc = run_cli("tune", *FAST, "--executor", "ray", "--ray-address", "127.0.0.1:1",
                   env={"AUTOTUNE_DATABASE_URL": migrated_sqlite}, timeout=180)
    assert proc.returncode == 5, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "cannot reach the Ray cluster" in lines[0], proc.stderr
    assert _rows(migrated_sqlite)["autotune_campaigns"] == 0

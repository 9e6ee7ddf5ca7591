"""The trace registry: migration 0004's table on SQLite and PostgreSQL, idempotent registration,
`traffic import --deployment` and `traffic list`, and `quarterly` finding the registered trace."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy import func, select

from autotune.domain.deployment import DeploymentSpec
from autotune.errors import ConfigError
from autotune.storage import repo
from autotune.storage.db import alembic_config, open_database, session_scope, upgrade
from autotune.storage.models import Campaign, TraceFile
from autotune.traffic.trace import DEMO_TRACE, Trace, file_digest
from tests.conftest import run_cli

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier

DAY_S = 86_400.0
SPEC = DeploymentSpec(name="llama", model="Llama-3.1-8B", gpu="H100-80GB", gpu_count=1,
                      tensor_parallel_size=1, max_model_len=8192)
COLUMNS = {"id", "deployment_id", "path", "digest", "format", "kind", "rows", "start_epoch_s",
           "end_epoch_s", "duration_s", "stats", "registered_at"}


def _azure_csv(path: Path, start_epoch_s: float, n: int, gap_s: float = 0.5) -> Path:
    """An Azure-format CSV: n requests gap_s apart from start_epoch_s (UTC wall clock)."""
    rng = np.random.default_rng(int(start_epoch_s) % 1000)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(n):
        stamp = datetime.fromtimestamp(start_epoch_s + i * gap_s, UTC)
        lines.append(f"{stamp:%Y-%m-%d %H:%M:%S.%f}0,{rng.integers(100, 1500)},"
                     f"{rng.integers(20, 300)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _check_table(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        insp = sa.inspect(engine)
        assert {c["name"] for c in insp.get_columns("autotune_traces")} == COLUMNS
        uniques = [set(u["column_names"]) for u in insp.get_unique_constraints("autotune_traces")]
        assert {"path", "digest"} in uniques
    finally:
        engine.dispose()
    command.downgrade(alembic_config(url), "0003")  # reversible
    engine = sa.create_engine(url)
    try:
        assert "autotune_traces" not in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()
    upgrade(url)
    open_database(url).dispose()  # back at head


def test_migration_creates_the_table(database_url: str) -> None:
    upgrade(database_url)
    _check_table(database_url)


def _trace(start: float | None, n: int = 10, digest: str = "sha256:x") -> Trace:
    return Trace.from_columns("t", arrival_s=np.arange(n) * 2.0, prompt_tokens=[100] * n,
                              output_tokens=[10] * n, digest=digest, start_epoch_s=start)


def test_registering_is_idempotent(migrated_sqlite: str, tmp_path: Path) -> None:
    engine = open_database(migrated_sqlite)
    path = tmp_path / "a.parquet"
    with session_scope(engine) as s:
        dep = repo.ensure_deployment(s, SPEC)
        first = repo.register_trace(s, _trace(1_800_000_000.0), path, "azure", "imported")
        again = repo.register_trace(s, _trace(1_800_000_000.0), path, "azure", "imported", dep)
        assert again.id == first.id and again.deployment_id == dep.id  # gained its deployment
        assert (first.rows, first.start_epoch_s, first.end_epoch_s, first.duration_s) == (
            10, 1_800_000_000.0, 1_800_000_018.0, 18.0)
        assert first.path == str(path.resolve()) and first.stats["requests"] == 10
        # New content at the same path is another row; no wall-clock times: no time range.
        other = repo.register_trace(s, _trace(None, digest="sha256:y"), path, "jsonl",
                                    "captured", dep)
        assert other.id != first.id and other.start_epoch_s is other.end_epoch_s is None
        assert s.scalar(select(func.count()).select_from(TraceFile)) == 2
        assert [t.id for t in repo.traces_for(s, dep)] == [first.id, other.id]
        assert [t.id for t in repo.traces_for(s, dep, since_epoch_s=1_800_000_010.0)] == [first.id]
        assert repo.traces_for(s, dep, since_epoch_s=1_800_000_019.0) == []
        with pytest.raises(ConfigError, match="trace kind 'other' is unknown"):
            repo.register_trace(s, _trace(None), path, "azure", "other")
        elsewhere = repo.ensure_deployment(s, SPEC.model_copy(update={"name": "other"}))
        with pytest.raises(ConfigError, match="already registered for deployment 'llama'"):
            repo.register_trace(s, _trace(1_800_000_000.0), path, "azure", "imported", elsewhere)
    engine.dispose()


def _seed_deployment(url: str) -> None:
    engine = open_database(url)
    with session_scope(engine) as s:
        repo.ensure_deployment(s, SPEC)
    engine.dispose()


def test_import_with_a_deployment_registers_and_lists(migrated_sqlite: str,
                                                      tmp_path: Path) -> None:
    _seed_deployment(migrated_sqlite)
    env = {"AUTOTUNE_DATABASE_URL": migrated_sqlite}
    start = 1_800_000_000.0
    src = _azure_csv(tmp_path / "az.csv", start, 40)
    out = tmp_path / "az.parquet"
    proc = run_cli("traffic", "import", str(src), "--out", str(out), "--deployment", "llama",
                   env=env)
    assert proc.returncode == 0, proc.stderr
    assert "registered trace #1 for deployment llama" in proc.stdout
    again = run_cli("traffic", "import", str(src), "--out", str(out), "--deployment", "llama",
                    env=env)
    assert again.returncode == 0 and "registered trace #1" in again.stdout, again.stderr
    listed = run_cli("traffic", "list", "--deployment", "llama", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["deployment"] == "llama" and row["kind"] == "imported"
    assert row["format"] == "azure" and row["rows"] == 40
    assert row["path"] == str(out.resolve()) and row["digest"] == file_digest(out)
    assert row["start_epoch_s"] == pytest.approx(start, abs=1e-3)
    assert row["end_epoch_s"] == pytest.approx(start + 39 * 0.5, abs=1e-3)
    assert row["duration_s"] == pytest.approx(19.5, abs=1e-3)
    assert row["stats"]["requests"] == 40 and row["start"].startswith("2027-01-15")
    table = run_cli("traffic", "list", env={**env, "COLUMNS": "300"})
    assert table.returncode == 0 and "llama" in table.stdout and "azure" in table.stdout


def test_import_without_a_database(tmp_path: Path) -> None:
    env = {"AUTOTUNE_DATABASE_URL": f"sqlite:///{tmp_path / 'none.db'}"}
    src = _azure_csv(tmp_path / "az.csv", 1_800_000_000.0, 5)
    out = tmp_path / "az.parquet"
    plain = run_cli("traffic", "import", str(src), "--out", str(out), env=env)
    assert plain.returncode == 0 and out.exists(), plain.stderr
    out.unlink()
    for flags in (["--deployment", "llama"], ["--register"]):
        proc = run_cli("traffic", "import", str(src), "--out", str(out), *flags, env=env)
        assert proc.returncode == 2 and "no database at" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()
    both = run_cli("traffic", "import", str(src), "--out", str(out), "--deployment", "llama",
                   "--no-register", env=env)
    assert both.returncode == 2 and "cannot go with --no-register" in both.stderr


def test_import_for_an_unknown_deployment_writes_nothing(migrated_sqlite: str,
                                                         tmp_path: Path) -> None:
    env = {"AUTOTUNE_DATABASE_URL": migrated_sqlite}
    src = _azure_csv(tmp_path / "az.csv", 1_800_000_000.0, 5)
    out = tmp_path / "az.parquet"
    proc = run_cli("traffic", "import", str(src), "--out", str(out), "--deployment", "nope",
                   env=env)
    assert proc.returncode == 2 and "no deployment named 'nope'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()
    listed = run_cli("traffic", "list", "--deployment", "nope", env=env)
    assert listed.returncode == 2 and "no deployment named 'nope'" in listed.stderr


def test_quarterly_uses_the_newest_registered_trace_of_the_window(migrated_sqlite: str,
                                                                  tmp_path: Path) -> None:
    env = {"AUTOTUNE_DATABASE_URL": migrated_sqlite, "USER": "scheduler"}
    tune = run_cli("tune", "--deployment", "llama", "--campaign", "first", "--model",
                   "Llama-3.1-8B", "--gpu", "H100-80GB", "--gpus", "1", "--max-model-len", "8192",
                   "--slo", "ttft_p99<=2s,tpot_p99<=100ms", "--trials", "3", "--confirm-top",
                   "0", "--max-scale", "64", "--trace", str(DEMO_TRACE), env=env, timeout=600)
    assert tune.returncode == 0, tune.stderr[-2000:]
    now = time.time()
    # Registered: one trace two months old, one a day old (the one in a 7-day window).
    old, recent = tmp_path / "old.parquet", tmp_path / "recent.parquet"
    for out, start, n in ((old, now - 60 * DAY_S, 150), (recent, now - DAY_S, 300)):
        src = _azure_csv(tmp_path / f"{out.stem}.csv", start, n)
        proc = run_cli("traffic", "import", str(src), "--out", str(out), "--deployment",
                       "llama", env=env)
        assert proc.returncode == 0, proc.stderr
    proc = run_cli("quarterly", "--deployment", "llama", "--period", "2026Q4", "--days", "7",
                   "--max-trials", "3", "--confirm-top", "1", "--confirm-repeats", "2",
                   env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"registered trace #2: {recent.resolve()}" in proc.stderr
    assert "300 of 300 requests, the last 7 days" in proc.stderr
    engine = open_database(migrated_sqlite)
    with session_scope(engine) as s:
        ran = s.scalars(select(Campaign).where(Campaign.period == "2026Q4")).one()
        assert ran.trace_ref == str(recent.resolve())
    engine.dispose()


def test_a_capture_log_registers_as_captured_traffic(migrated_sqlite: str, tmp_path: Path) -> None:
    from autotune.traffic.capture_format import CaptureRecord

    _seed_deployment(migrated_sqlite)
    env = {"AUTOTUNE_DATABASE_URL": migrated_sqlite}
    log = tmp_path / "capture-20270115T000000-1.jsonl"
    log.write_text("".join(CaptureRecord(ts=1_800_000_000.0 + i, api="chat", prompt_tokens=100 + i,
                                         output_tokens=20).to_json_line() for i in range(12)))
    proc = run_cli("traffic", "import", str(log), "--out", str(tmp_path / "c.parquet"),
                   "--deployment", "llama", env=env)
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(run_cli("traffic", "list", "--json", env=env).stdout)
    assert (row["kind"], row["format"], row["rows"]) == ("captured", "openai-log", 12)

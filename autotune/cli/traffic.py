"""`autotune traffic ...`: synthesise, import, show, split and shape traces. Bad input is an
AutotuneError, which `autotune.cli.main` prints as one line with exit code 2."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from autotune.cli import output
from autotune.cli.common import open_db
from autotune.errors import ConfigError
from autotune.traffic.formats.registry import TRACE_FORMATS

traffic_app = typer.Typer(no_args_is_help=True, help="Traffic traces: synth, import, show, "
                                                     "split, shape.")
console = Console()
if not console.is_terminal:
    console = Console(width=160)

HotMax = Annotated[int, typer.Option(help="Hot path: max_tokens (else output tokens) at most this.")]
WarmShare = Annotated[float, typer.Option(
    help="Warm path: a first prefix block shared by at least this fraction of requests.")]


def _format_help() -> str:
    """--format's choices, as the trace format registry lists them."""
    names = [f"{f.name} ({f.help})" if f.help else f.name for f in TRACE_FORMATS]
    return f"auto (by content), {', '.join(names[:-1])} or {names[-1]}."


def _check_paths(hot_max_tokens: int, warm_min_share: float) -> None:
    if hot_max_tokens < 1 or not 0 <= warm_min_share <= 1:
        raise ConfigError("--hot-max-tokens must be at least 1 and --warm-min-share in [0, 1]")


@traffic_app.command("synth")
def traffic_synth(
    out: Annotated[Path, typer.Option(help="Where to write the JSONL trace.")],
    requests: Annotated[int, typer.Option(help="Number of requests.")] = 600,
    rate: Annotated[float, typer.Option(help="Mean arrival rate, requests/s.")] = 5.0,
    seed: Annotated[int, typer.Option(help="Seed; equal seeds give equal files.")] = 0,
    arrivals: Annotated[str, typer.Option(help="poisson, or gamma (bursty: --gap-cv > 1).")] = "poisson",
    gap_cv: Annotated[float, typer.Option(help="Gamma arrivals: CV of the inter-arrival gaps.")] = 2.0,
    document_share: Annotated[float, typer.Option(
        help="Fraction of requests that are documents (long prompts, short answers).")] = 0.0,
) -> None:
    """Write a synthetic chat-like trace (the bundled demo trace is the default one)."""
    from autotune.traffic.synthetic import chat_trace_rows, write_jsonl

    if requests < 1 or rate <= 0:
        raise ConfigError("--requests must be at least 1 and --rate positive")
    if arrivals not in ("poisson", "gamma") or gap_cv <= 0 or not 0 <= document_share <= 1:
        raise ConfigError("--arrivals must be poisson or gamma, --gap-cv positive and "
                          "--document-share in [0, 1]")
    write_jsonl(chat_trace_rows(requests=requests, rate_rps=rate, seed=seed, arrivals=arrivals,
                                gap_cv=gap_cv, document_share=document_share), out)
    console.print(f"wrote {requests} requests to {out}")


@traffic_app.command("import")
def traffic_import(
    file: Annotated[Path, typer.Argument(help="The trace or log to import.")],
    out: Annotated[Path, typer.Option(help="The Parquet trace to write.")],
    fmt: Annotated[str, typer.Option("--format", help=_format_help())] = "auto",
    model: Annotated[str | None, typer.Option(help="BurstGPT: keep only this model's rows.")] = None,
    map_spec: Annotated[str | None, typer.Option(
        "--map", help="Read any CSV or JSONL: target=source,... with targets arrival, "
                      "prompt_tokens, output_tokens, max_tokens, api, session_id, tenant, "
                      "priority, hash_ids, hash_block_tokens, text; dotted sources walk into "
                      "nested JSON (usage.prompt_tokens).")] = None,
    time_unit: Annotated[str | None, typer.Option(
        help="With --map: the arrival column's unit, s, ms, us, ns or iso (default s).")] = None,
    deployment: Annotated[str | None, typer.Option(
        help="Register the written file in the database as this deployment's traffic.")] = None,
    register: Annotated[bool | None, typer.Option(
        "--register/--no-register", help="Register the written file in the database "
        "(default: only with --deployment; needs a migrated database).")] = None,
) -> None:
    """Import a trace file into the Parquet store (validated; written atomically).

    With --deployment (or --register) the written file is also registered in the database
    (path, digest, time range, rows, statistics): `autotune quarterly` then finds it.
    Without either, no database is needed."""
    from autotune.traffic.formats import import_file
    from autotune.traffic.formats.mapped import check_time_unit, parse_mapping
    from autotune.traffic.parquet_store import write_parquet

    if time_unit is not None and map_spec is None:
        raise ConfigError("--time-unit goes with --map (the known formats know their units)")
    if register is False and deployment is not None:
        raise ConfigError("--deployment registers the file; it cannot go with --no-register")
    # Checked before the import's work: a missing or unmigrated database, or an unknown
    # deployment, is one error line and no file written.
    engine = _registry_db(deployment) if register or deployment is not None else None
    mapping = parse_mapping(map_spec) if map_spec is not None else None
    unit = check_time_unit(time_unit or "s")
    imported = import_file(file, fmt, model=model, mapping=mapping, time_unit=unit)
    write_parquet(imported.trace, out)
    t = imported.trace
    console.print(f"imported {len(t):,} requests ({imported.format}) spanning "
                  f"{t.duration_s:,.1f} s into {out}", soft_wrap=True)
    for note in imported.notes:
        console.print(f"  {note}", soft_wrap=True)
    if engine is not None:
        from dataclasses import replace

        from autotune.traffic.trace import file_digest

        # The written file's digest: what a campaign replaying it records as trace_digest.
        # Our capture proxy's logs are captured traffic; anything else was imported.
        kind = "captured" if imported.format == "openai-log" else "imported"
        row = _register(engine, replace(t, digest=file_digest(out)), out, imported.format,
                        kind, deployment)
        console.print(f"registered trace #{row['id']}"
                      + (f" for deployment {deployment}" if deployment else ""), soft_wrap=True)


def _registry_db(deployment: str | None = None) -> Any:
    """The migrated database, where the deployment (if named) exists."""
    from autotune.storage import repo
    from autotune.storage.db import session_scope

    engine = open_db()[0]
    if deployment is not None:
        try:
            with session_scope(engine) as s:
                repo.get_deployment(s, deployment)
        except BaseException:
            engine.dispose()
            raise
    return engine


def _register(engine: Any, trace: Any, path: Path, fmt: str, kind: str,
              deployment: str | None) -> dict[str, Any]:
    from autotune.storage import repo
    from autotune.storage.db import session_scope

    try:
        with session_scope(engine) as s:
            dep = repo.get_deployment(s, deployment) if deployment else None
            return _trace_row(repo.register_trace(s, trace, path, fmt, kind, dep))
    finally:
        engine.dispose()


def _iso(epoch_s: float | None) -> str | None:
    from datetime import UTC, datetime

    return None if epoch_s is None else datetime.fromtimestamp(epoch_s, UTC).isoformat()


def _trace_row(row: Any) -> dict[str, Any]:
    return {"id": row.id, "deployment": row.deployment.name if row.deployment else None,
            "path": row.path, "digest": row.digest, "format": row.format, "kind": row.kind,
            "rows": row.rows, "start_epoch_s": row.start_epoch_s, "end_epoch_s": row.end_epoch_s,
            "start": _iso(row.start_epoch_s), "end": _iso(row.end_epoch_s),
            "duration_s": row.duration_s, "stats": row.stats,
            "registered_at": row.registered_at.isoformat()}


@traffic_app.command("list")
def traffic_list(
    deployment: Annotated[str | None, typer.Option(help="Only this deployment's traces.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list.")] = False,
) -> None:
    """Registered traces, newest traffic first (see `traffic import --deployment`)."""
    from rich.table import Table

    from autotune.storage import repo
    from autotune.storage.db import session_scope

    engine = _registry_db(deployment)
    try:
        with session_scope(engine) as s:
            dep = repo.get_deployment(s, deployment) if deployment else None
            rows = [_trace_row(r) for r in repo.traces_for(s, dep)]
    finally:
        engine.dispose()
    if as_json:
        output.emit(rows)
        return
    table = Table(title="Registered traces", title_justify="left")
    for col in ("id", "deployment", "kind", "format", "rows", "from (UTC)", "to (UTC)", "path"):
        table.add_column(col)
    for r in rows:
        table.add_row(str(r["id"]), r["deployment"] or "-", r["kind"], r["format"],
                      f"{r['rows']:,}", (r["start"] or "-")[:16], (r["end"] or "-")[:16],
                      r["path"])
    console.print(table)


@traffic_app.command("show")
def traffic_show(
    trace: Annotated[Path, typer.Argument(help="A trace: Parquet or any file an importer reads.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
    plot: Annotated[Path | None, typer.Option(
        help="Also write a PNG: rate over time and the length distributions.")] = None,
    hot_max_tokens: HotMax = 512,
    warm_min_share: WarmShare = 0.01,
) -> None:
    """Statistics of a trace: rate, burstiness, length percentiles, prefix sharing, path mix."""
    from autotune.traffic.formats import load_trace
    from autotune.traffic.stats import trace_stats

    _check_paths(hot_max_tokens, warm_min_share)
    loaded = load_trace(trace)
    stats = trace_stats(loaded, hot_max_tokens=hot_max_tokens, warm_min_share=warm_min_share)
    if plot is not None:
        from autotune.traffic.plot import plot_trace

        plot_trace(loaded, plot, hot_max_tokens=hot_max_tokens, warm_min_share=warm_min_share)
    if as_json:
        output.emit(stats)
        return
    _print_stats(stats)
    if plot is not None:
        console.print(f"wrote {plot}")


def _print_stats(stats: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"Trace {stats['name']}", title_justify="left", show_header=False)
    table.add_row("requests", f"{stats['requests']:,}")
    table.add_row("duration", f"{stats['duration_s']:,.1f} s")
    table.add_row("rate", f"{stats['rate_rps']:.2f} requests/s (burstiness CV "
                          f"{stats['burstiness_cv']:.2f})")
    for key in ("prompt_tokens", "output_tokens"):
        p = stats[key]
        table.add_row(key.replace("_", " "), f"p50 {p['p50']:,.0f}  p90 {p['p90']:,.0f}  "
                                             f"p99 {p['p99']:,.0f}")
    table.add_row("prefix share", f"{stats['prefix_share_ratio']:.1%} of prompt tokens")
    mix = stats["path_mix"]
    table.add_row("paths", f"hot {mix['hot']:.1%}  warm {mix['warm']:.1%}  cold {mix['cold']:.1%}")
    console.print(table)


@traffic_app.command("split")
def traffic_split(
    trace: Annotated[Path, typer.Argument(help="A trace: Parquet or any file an importer reads.")],
    out: Annotated[Path, typer.Option(help="Directory for hot.parquet, warm.parquet, cold.parquet.")],
    hot_max_tokens: HotMax = 512,
    warm_min_share: WarmShare = 0.01,
) -> None:
    """Write one sub-trace per path (hot / warm / cold; a path without requests gets no file)."""
    from autotune.traffic.formats import load_trace
    from autotune.traffic.split import PATH_NAMES, split_by_path, write_split

    _check_paths(hot_max_tokens, warm_min_share)
    loaded = load_trace(trace)
    parts = split_by_path(loaded, hot_max_tokens=hot_max_tokens, warm_min_share=warm_min_share)
    written = write_split(parts, out)
    for name in PATH_NAMES:
        if name in written:
            console.print(f"{name}: {len(parts[name]):,} requests -> {written[name]}")
        else:
            console.print(f"{name}: no requests, no file")


@traffic_app.command("shape")
def traffic_shape(
    trace: Annotated[Path, typer.Argument(help="A trace: Parquet or any file an importer reads.")],
    out: Annotated[Path, typer.Option(help="The Parquet trace to write.")],
    start: Annotated[str | None, typer.Option(
        help="Window start: seconds from the first request, or an ISO time.")] = None,
    end: Annotated[str | None, typer.Option(help="Window end (exclusive), like --start.")] = None,
    last_days: Annotated[float | None, typer.Option(help="Window: the last N days.")] = None,
    sample: Annotated[int | None, typer.Option(
        help="Keep N requests, spread so the rate over time keeps its shape.")] = None,
    rate_scale: Annotated[float, typer.Option(help="Multiply the arrival rate by this.")] = 1.0,
    max_model_len: Annotated[int | None, typer.Option(
        help="Cap prompt + output tokens to this context length.")] = None,
    seed: Annotated[int, typer.Option(help="Sampling seed; equal seeds give equal traces.")] = 0,
) -> None:
    """Window, down-sample, rate-scale and length-cap a trace for replay (deterministic)."""
    from autotune.traffic.formats import load_trace
    from autotune.traffic.parquet_store import write_parquet
    from autotune.traffic.shape import ShapeSpec, shape, time_offset_s

    loaded = load_trace(trace)
    spec = ShapeSpec(start_s=None if start is None else time_offset_s(start, loaded),
                     end_s=None if end is None else time_offset_s(end, loaded),
                     last_days=last_days, sample_requests=sample, rate_scale=rate_scale,
                     max_model_len=max_model_len, seed=seed)
    shaped = shape(loaded, spec)
    write_parquet(shaped, out)
    console.print(f"wrote {len(shaped):,} of {len(loaded):,} requests spanning "
                  f"{shaped.duration_s:,.1f} s to {out}", soft_wrap=True)

"""`autotune bench sweep`: a closed-loop concurrency sweep on the simulator or a real engine,
named to sit beside `vllm bench sweep` (autotune.measure.sweep)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from autotune.cli import output
from autotune.cli.common import load_settings
from autotune.cli.sim import GPU_HELP, MODEL_HELP, _parse_sets
from autotune.errors import ConfigError

bench_app = typer.Typer(no_args_is_help=True,
                        help="Benchmarks of one engine, named after vllm bench's.")
console = Console(stderr=True)  # progress and the table; stdout is kept for --json
if not console.is_terminal:  # logs: wide enough for the table
    console = Console(stderr=True, width=160)
BACKENDS = ("sim", "vllm")
# The table's columns: (row key, header, format).
COLUMNS = (("max_concurrency", "clients", "{:d}"), ("completed", "done", "{:d}"),
           ("request_throughput", "req/s", "{:.2f}"), ("output_throughput", "out tok/s", "{:,.0f}"),
           ("median_ttft_ms", "TTFT p50", "{:.1f}"), ("p99_ttft_ms", "TTFT p99", "{:.1f}"),
           ("median_tpot_ms", "TPOT p50", "{:.2f}"), ("p99_tpot_ms", "TPOT p99", "{:.2f}"),
           ("median_itl_ms", "ITL p50", "{:.2f}"), ("p99_itl_ms", "ITL p99", "{:.2f}"),
           ("median_e2el_ms", "E2E p50", "{:.0f}"), ("p99_e2el_ms", "E2E p99", "{:.0f}"),
           ("send_clump_mean", "clump", "{:.1f}"))  # 1: clients desynchronised; N: phase-locked


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return fmt.format(value)


def _decode_step_ms(row: dict[str, Any]) -> str:
    """The decode step time at the row's own concurrency (the bin all its clients decode in),
    else '-': a real engine's, read off its token streams."""
    for s in row.get("step_times", ()):
        if s["batch"] == row["max_concurrency"] and not s["prompt_tokens"]:
            return f"{s['step_ms']:.2f}"
    return "-"


def _table(record: dict[str, Any]) -> Table:
    load = record["load"]
    lengths = (f"{load['input_len']} in / {load['output_len']} out" if load["input_len"]
               else f"lengths of {load['trace']}")
    table = Table(title=f"{record['backend']} sweep, {record['model']} on "
                        f"{record['tensor_parallel_size']}x{record['gpu']}, {lengths}")
    for _, header, _ in COLUMNS:
        table.add_column(header, justify="right")
    table.add_column("decode step ms", justify="right")
    for row in record["runs"]:
        table.add_row(*(_cell(row.get(key), fmt) for key, _, fmt in COLUMNS), _decode_step_ms(row))
    return table


@bench_app.command("sweep")
def sweep(
    max_concurrency: Annotated[str, typer.Option(
        help="Client counts to run in turn, comma-separated, e.g. 1,4,16,64 (each as vllm bench "
             "serve --max-concurrency at request rate inf).")],
    backend: Annotated[str, typer.Option(help="sim (the simulator) or vllm (a real engine, "
                                              "started once for the whole sweep).")] = "sim",
    input_len: Annotated[int | None, typer.Option(help="Every prompt's tokens.")] = None,
    output_len: Annotated[int | None, typer.Option(help="Every request's output tokens.")] = None,
    trace: Annotated[Path | None, typer.Option(
        help="Take the requests' lengths (and prefix hashes) from this trace, in order, "
             "instead of --input-len/--output-len.")] = None,
    num_prompts: Annotated[int | None, typer.Option(
        help="Requests per concurrency (default: 1000 with fixed lengths, as vllm bench serve; "
             "the whole trace with --trace).")] = None,
    prompts_per_client: Annotated[int | None, typer.Option(
        help="Instead of --num-prompts: this many requests per client, so each concurrency "
             "runs about as long (N x the concurrency in all).")] = None,
    model: Annotated[str | None, typer.Option(
        help=MODEL_HELP + " Default with --backend vllm: --model-path's config.")] = None,
    gpu: Annotated[str, typer.Option(help=GPU_HELP + " cpu for the vLLM CPU build.")
                   ] = "H200-141GB",
    tp: Annotated[int, typer.Option(help="Tensor-parallel size (GPUs of the engine).")] = 1,
    max_model_len: Annotated[int, typer.Option(help="Context length served.")] = 4096,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="An engine argument both backends see, name=value (repeatable), e.g. "
                      "--set max_num_seqs=128; unset ones take vLLM's defaults.")] = None,
    model_path: Annotated[str | None, typer.Option(
        help="vllm backend: the model directory or id the engine loads, e.g. one from "
             "`autotune models make-dummy`.")] = None,
    engine_arg: Annotated[list[str] | None, typer.Option(
        help="vllm backend: an extra server argument the simulator does not model, e.g. "
             "--engine-arg=--load-format=dummy (repeatable).")] = None,
    step_model: Annotated[str | None, typer.Option(
        help="sim backend: GPU step times measured (the committed table for this GPU, model, "
             "layout and precision; the roofline where there is none) or roofline "
             "[default: AUTOTUNE_SIM__STEP_MODEL, else measured]")] = None,
    step_precision: Annotated[str | None, typer.Option(
        help="sim backend, --step-model measured: the table's dense[/experts] precision "
             "(default: the checkpoint's).")] = None,
    profile: Annotated[Path | None, typer.Option(
        help="sim backend: a simulator profile file (default: the newest calibrated one, else "
             "bundled).")] = None,
    client_starts: Annotated[str, typer.Option(
        help="sim backend: together (every client's first request at once, as vllm bench "
             "serve sends them; with equal lengths the simulated clients stay phase-locked) "
             "or spread (first requests spread over one request's service time: the "
             "desynchronised state). A real engine's TTFT lies between the two.")
    ] = "together",
    seed: Annotated[int, typer.Option(help="Replay seed.")] = 0,
    out: Annotated[Path | None, typer.Option(
        help="Also write the sweep's JSON object to this file (atomically), e.g. under "
             "benchmarks/measurements/.")] = None,
    with_requests: Annotated[bool, typer.Option(
        "--per-request", help="Also keep each request's send time, TTFT, E2E and output tokens "
                              "in every run (key `requests`), for reading the clients' clumping "
                              "round by round.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the sweep as one JSON object "
                                                         "(keys: docs/reference/json-output.md).")
                       ] = False,
) -> None:
    """Run closed-loop clients at each --max-concurrency in turn against one engine (the
    simulator's, or a real vLLM server started once) and print, per concurrency, vllm bench
    serve's figures: request and output token throughput, TTFT, TPOT, ITL and E2E mean, median
    and P99, and for a real engine its decode step times."""
    from autotune.atomic import atomic_write_text
    from autotune.domain.deployment import DeploymentSpec
    from autotune.domain.engine_config import EngineConfig
    from autotune.measure.backend_options import backend_options
    from autotune.measure.backends import load_backend
    from autotune.measure.sweep import SweepLoad, parse_concurrencies, run_sweep, sweep_record
    from autotune.traffic.formats import load_trace

    # Everything is checked before an engine starts: a bad value costs nothing.
    if backend not in BACKENDS:
        raise ConfigError(f"--backend {backend!r}: expected sim or vllm")
    if backend == "vllm" and (profile or step_precision or step_model is not None):
        raise ConfigError("--step-model, --step-precision and --profile are for --backend sim; "
                          "a real engine has its own step times")
    if backend == "vllm" and client_starts != "together":
        raise ConfigError(f"--client-starts {client_starts!r}: a real engine's clients all send "
                          "at once (together), as vllm bench serve's do; spread is for "
                          "--backend sim")
    if profile is not None and not profile.is_file():
        raise ConfigError(f"--profile {profile}: no such file")
    if out is not None and out.is_dir():
        raise ConfigError(f"--out {out}: a directory; give a file name, e.g. {out}/sweep.json")
    settings = load_settings()
    options = backend_options(backend, settings, model_path, engine_arg or [])
    if backend == "sim":
        options = {**options, "step_model": step_model or options["step_model"],
                   "step_precision": step_precision or options.get("step_precision"),
                   "profile": str(profile) if profile else None, "client_starts": client_starts}
    if model is None:
        if backend == "sim":
            raise ConfigError("--backend sim needs --model (a catalogue name, Hugging Face id or "
                              "config.json), e.g. --model Llama-3.1-8B")
        model = str(options["model_path"])
    load = SweepLoad(tuple(parse_concurrencies(max_concurrency)), num_prompts,
                     prompts_per_client, input_len, output_len, client_starts)
    if trace is not None and input_len is not None:
        raise ConfigError("give --trace or --input-len/--output-len, not both")
    dep = DeploymentSpec.build(name="bench-sweep", model=model, gpu=gpu, gpu_count=tp,
                               tensor_parallel_size=tp, max_model_len=max_model_len)
    config = EngineConfig.from_mapping({"max_model_len": max_model_len,
                                        "tensor_parallel_size": tp, **_parse_sets(set_ or [])})
    loaded = load_trace(trace) if trace is not None else None
    requests = load.requests(loaded, config.max_model_len or max_model_len)
    engine = load_backend(backend, **options)
    step_label: list[str] = []

    def progress(row: dict[str, Any]) -> None:
        if not step_label and engine.notes():
            step_label.append(engine.notes()["step_model"])
        console.print(f"concurrency {row['max_concurrency']}: {row['completed']}/"
                      f"{row['num_prompts']} done, {row['output_throughput']:,.0f} output tok/s, "
                      f"TPOT p50 {_cell(row['median_tpot_ms'], '{:.2f}')} ms", highlight=False)

    rows = run_sweep(engine, config, dep, load, requests, seed, on_row=progress,
                     with_requests=with_requests)
    extra = list(options.get("extra_args", []))  # type: ignore[call-overload]
    record = sweep_record(backend=backend, deployment=dep, config=config, extra_engine_args=extra,
                          load=load, trace_name=loaded.name if loaded is not None else None,
                          seed=seed, step_model=step_label[0] if step_label else None, rows=rows)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, json.dumps(output.clean(record), indent=1, allow_nan=False) + "\n")
    console.print(_table(record))
    if record["step_model"]:
        console.print(f"step model: {record['step_model']}; clients' first requests: "
                      f"{client_starts}", highlight=False)
    if out is not None:
        console.print(f"wrote {out}", highlight=False)
    if as_json:
        output.emit(record)

"""`autotune simulate` (one simulated replay) and `autotune sim calibrate`."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from autotune.cli import output
from autotune.cli.common import load_settings, open_db
from autotune.errors import ConfigError

if TYPE_CHECKING:
    from autotune.domain.records import LatencySummary

# What --model and --gpu take (autotune.domain.catalogue.model / gpu resolve them).
MODEL_HELP = ("Model: a catalogue name, a Hugging Face id with a bundled config.json "
              "(`autotune models list`), a model directory or a config.json path.")
GPU_HELP = "GPU (catalogue name, or its short form: H100, H200, B200, B300, A100, L40S)."

# What `simulate` reports of the other client start state (closed loop, equal lengths).
BAND_FIELDS = ("output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms")

sim_app = typer.Typer(no_args_is_help=True, help="The simulator's calibration.")
console = Console()


def _parse_sets(items: list[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--set {item!r}: expected name=value, e.g. --set max_num_seqs=128")
        values[name.strip().replace("-", "_")] = value.strip()
    return values


def simulate(
    trace: Annotated[Path | None, typer.Option(
        help="Any trace file an importer reads: replayed open-loop, or with --max-concurrency "
             "the lengths (and prefix hashes) of its requests, in order.")] = None,
    model: Annotated[str, typer.Option(help=MODEL_HELP)] = "DeepSeek-V4-Flash",
    gpu: Annotated[str, typer.Option(help=GPU_HELP)] = "H200-141GB",
    tp: Annotated[int, typer.Option(help="Tensor-parallel size (GPUs of the engine).")] = 8,
    max_model_len: Annotated[int, typer.Option(help="Context length served.")] = 16384,
    rate_scale: Annotated[float | None, typer.Option(
        help="Open loop: arrival-rate multiplier (default 1).")] = None,
    max_concurrency: Annotated[int | None, typer.Option(
        help="Closed loop: this many clients, each sending its next request when its last "
             "finished (as vllm bench serve --max-concurrency).")] = None,
    num_prompts: Annotated[int | None, typer.Option(
        help="Closed loop: requests to send (default: 1000 with --input-len/--output-len, as "
             "vllm bench serve; the whole trace with --trace).")] = None,
    input_len: Annotated[int | None, typer.Option(
        help="Closed loop without a trace: every prompt's tokens.")] = None,
    output_len: Annotated[int | None, typer.Option(
        help="Closed loop without a trace: every request's output tokens.")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="An engine argument, name=value (repeatable), e.g. --set max_num_seqs=128; "
                      "unset ones take vLLM's defaults.")] = None,
    seed: Annotated[int, typer.Option(help="Replay seed (run-to-run jitter).")] = 0,
    profile: Annotated[Path | None, typer.Option(
        help="A simulator profile file (default: the newest calibrated one, else bundled).")] = None,
    step_model: Annotated[str | None, typer.Option(
        help="GPU step times: measured (the committed measured table for this GPU, model, "
             "layout and --step-precision; the roofline where there is none) or roofline "
             "[default: AUTOTUNE_SIM__STEP_MODEL, else measured]")] = None,
    step_precision: Annotated[str | None, typer.Option(
        help="With --step-model measured: the table's dense[/experts] precision, e.g. "
             "fp8_block/fp8_block (default: the checkpoint's).")] = None,
    client_starts: Annotated[str, typer.Option(
        help="Closed loop: together (every client's first request at once, as vllm bench serve "
             "sends them) or spread (over one request's service time: the desynchronised "
             "state; with equal lengths a real engine's TTFT lies between the two).")
    ] = "together",
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object.")] = False,
) -> None:
    """Replay a trace once on the simulator (open loop), or run closed-loop clients against it
    (--max-concurrency), and print the latency summary (the same fields as a real trial's)."""
    from autotune.domain.deployment import DeploymentSpec
    from autotune.domain.engine_config import EngineConfig
    from autotune.domain.vllm_defaults import effective_values
    from autotune.measure.backends import load_backend
    from autotune.measure.metrics import summarize
    from autotune.traffic.formats import load_trace
    from autotune.traffic.load import ClosedLoop, Load, OpenLoop

    load: Load
    if max_concurrency is None:
        for flag, given in (("--num-prompts", num_prompts), ("--input-len", input_len),
                            ("--output-len", output_len)):
            if given is not None:
                raise ConfigError(f"{flag} applies to a closed loop: add --max-concurrency N")
        if client_starts != "together":
            raise ConfigError("--client-starts applies to a closed loop: add --max-concurrency N")
        if trace is None:
            raise ConfigError("an open-loop replay needs --trace FILE (or give --max-concurrency "
                              "N with --input-len/--output-len for a closed loop)")
        load = OpenLoop(1.0 if rate_scale is None else rate_scale)
    else:
        if rate_scale is not None:
            raise ConfigError("--rate-scale applies to an open loop; a closed loop's rate is set "
                              "by --max-concurrency and the engine's speed")
        load = ClosedLoop(max_concurrency, num_prompts, input_len, output_len)
    if profile is not None and not profile.is_file():
        raise ConfigError(f"--profile {profile}: no such file")
    dep = DeploymentSpec.build(name="simulate", model=model, gpu=gpu, gpu_count=tp,
                               tensor_parallel_size=tp, max_model_len=max_model_len)
    config = EngineConfig.from_mapping({"max_model_len": max_model_len, "tensor_parallel_size": tp,
                                        **_parse_sets(set_ or [])})
    if isinstance(load, ClosedLoop) and load.fixed_lengths and trace is not None:
        raise ConfigError("give --trace or --input-len/--output-len, not both")
    loaded = load_trace(trace) if trace is not None else None
    if isinstance(load, ClosedLoop):
        loaded = load.requests(loaded, config.max_model_len or max_model_len)
    assert loaded is not None
    def run(starts: str) -> tuple[LatencySummary, str]:
        backend = load_backend("sim", profile=str(profile) if profile else None,
                               step_model=step_model or load_settings().sim.step_model,
                               step_precision=step_precision, client_starts=starts)
        backend.start(config, dep, label="simulate")
        try:
            label = backend.notes()["step_model"]
            result = (backend.replay(loaded, load.rate_scale, seed) if isinstance(load, OpenLoop)
                      else backend.replay_closed_loop(loaded, load.max_concurrency, seed))
            return summarize(result), label
        finally:
            backend.stop()

    summary, step_label = run(client_starts)
    # Equal-length clients on a deterministic simulator stay as they started, phase-locked or
    # spread for ever; a real engine's jitter leaves them in clumps between the two
    # (docs/benchmarks/gpu-fidelity.md), so its TTFT lies between the two states' figures.
    other: dict[str, object] | None = None
    if isinstance(load, ClosedLoop) and load.fixed_lengths and load.max_concurrency > 1:
        other_starts = "spread" if client_starts == "together" else "together"
        other_summary, _ = run(other_starts)
        other = {"client_starts": other_starts,
                 **{k: getattr(other_summary, k) for k in BAND_FIELDS}}
    if as_json:
        described = load.describe()
        if isinstance(load, ClosedLoop):
            described["client_starts"] = client_starts
        output.emit({**summary.model_dump(), "step_model": step_label, "load": described,
                     **({"other_client_starts": other} if other else {})})
        return
    args = effective_values(config, dep)
    how = (f"x{load.rate_scale:g}" if isinstance(load, OpenLoop)
           else f"at concurrency {load.max_concurrency}")
    table = Table(title=f"{loaded.name} {how} on {tp}x{dep.gpu_info.name}, {model}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in summary.model_dump().items():
        if key != "engine_stats" and value not in (None, ()):  # no step timings in a simulation
            table.add_row(key, f"{value:,.3f}" if isinstance(value, float) else str(value))
    for key, value in summary.engine_stats.items():
        table.add_row(key, f"{value:,.3f}")
    console.print(table)
    console.print("engine arguments: " + ", ".join(f"{k}={v}" for k, v in args.items()))
    console.print(f"step model: {step_label}")
    if other:
        console.print(f"clients {other['client_starts']} instead of {client_starts}: "
                      + ", ".join(f"{k} {other[k]:,.1f}" for k in BAND_FIELDS)
                      + "; with equal lengths a real engine's figures lie between the two")


@sim_app.command("calibrate")
def calibrate(
    campaign: Annotated[str, typer.Option(help="A campaign whose trials ran on real engines.")],
    deployment: Annotated[str | None, typer.Option(help="Its deployment, if the name is shared.")] = None,
    max_evals: Annotated[int, typer.Option(help="Simulations the fit may spend.")] = 300,
    save: Annotated[bool, typer.Option(help="Save the fitted profile to the profile directory "
                                            "(AUTOTUNE_SIM__PROFILE_DIR).")] = True,
) -> None:
    """Fit the simulator's profile for a campaign's GPU and model to its measured replays,
    report the fit error, and save the profile under the next version."""
    from autotune.measure.backends import backend_class
    from autotune.measure.calibration.measurements import campaign_measurements
    from autotune.storage import repo
    from autotune.storage.db import session_scope

    if max_evals < 10:
        raise ConfigError("--max-evals must be at least 10")
    engine, _ = open_db()
    with session_scope(engine) as s:
        found = repo.find_campaign(s, campaign, deployment)
        measurements = campaign_measurements(found)
        spec = repo.spec_of(found.deployment)
        source_backend = found.backend
    if not measurements:
        raise ConfigError(f"campaign {campaign!r} has no measured replays to calibrate against")
    if source_backend == "sim":
        console.print("note: this campaign ran on the simulator; calibrating a model against "
                      "itself only shows the fit works")
    result = backend_class("sim").calibrate(
        measurements, spec, save_to=load_settings().sim.profile_dir if save else None,
        max_evals=max_evals)  # type: ignore[call-arg]
    table = Table(title=f"Calibration of {spec.gpu_info.name} / {spec.model_info.name} on "
                        f"{result.measurements} measured replays ({result.evaluations} fits)")
    for col in ("metric", "mean |error| before", "after"):
        table.add_column(col, justify="right")
    for metric, before in result.error_before.items():
        table.add_row(metric, f"{before:.1%}", f"{result.error_after[metric]:.1%}")
    console.print(table)
    if result.profile_path:
        console.print(f"saved {result.profile_path}")
    else:
        console.print(result.profile_yaml)


@sim_app.command("fit-cpu")
def fit_cpu_cmd(
    sweep: Annotated[Path, typer.Argument(
        help="A real engine's sweep: the --out file of `autotune bench sweep --backend vllm`.")],
    step_model: Annotated[str, typer.Option(
        help="The GPU time of each step: measured (the committed table for the sweep's GPU, "
             "model, layout and precision; on a GPU, the source to use) or roofline (the CPU "
             "build, which has no table).")] = "measured",
    step_precision: Annotated[str | None, typer.Option(
        help="With --step-model measured: the table's dense[/experts] precision (default: the "
             "checkpoint's).")] = None,
    profile: Annotated[Path | None, typer.Option(
        help="The profile to start from (default: the newest calibrated one for the sweep's "
             "GPU and model, else bundled); only its CPU step terms change.")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Write the fitted profile here (default: the profile directory, "
             "AUTOTUNE_SIM__PROFILE_DIR, under the next version).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the fit as one JSON object.")
                       ] = False,
) -> None:
    """Fit the simulator's CPU cost per step (cpu_step_s, cpu_seq_s and, where the sweep timed
    small batches, cpu_small_batch_seq_s) to a real sweep's decode step times less the step
    model's GPU time at the same batches; check it against the sweep's median TPOT; write the
    profile."""
    from autotune.measure.sim_tools import simulator_tools

    fit = simulator_tools().fit_cpu_cost(
        sweep, step_model=step_model, step_precision=step_precision, profile=profile, out=out,
        profile_dir=lambda: Path(load_settings().sim.profile_dir))
    table = Table(title=f"CPU step cost of {fit.model} on {fit.gpu} from {sweep.name} "
                        f"(GPU time: {fit.step_model})")
    for col in ("batch", "measured ms", "GPU ms", "fitted CPU ms", "used"):
        table.add_column(col, justify="right")
    for p in fit.points:
        table.add_row(str(p.batch), f"{p.measured_ms:.3f}", f"{p.gpu_ms:.3f}",
                      f"{p.cpu_ms:.3f}", "yes" if p.used else "GPU-bound")
    console.print(table)
    c = fit.coefficients
    console.print(f"cpu_step_s {c['cpu_step_s']:.3e}, cpu_seq_s {c['cpu_seq_s']:.3e}, "
                  f"cpu_small_batch_seq_s {c['cpu_small_batch_seq_s']:.3e} "
                  f"({'overlapped with the GPU' if fit.overlapped else 'added to the GPU time'}"
                  f"); RMS residual {fit.rms_ms:.3f} ms", highlight=False)
    for row in fit.tpot_check:
        console.print(f"TPOT p50 at concurrency {row['max_concurrency']}: measured "
                      f"{row['measured_ms']:.2f} ms, simulated {row['before_ms']:.2f} before, "
                      f"{row['after_ms']:.2f} after", highlight=False)
    if fit.unmodelled_args:
        console.print("note: the simulator did not see these engine arguments of the sweep: "
                      + " ".join(fit.unmodelled_args), highlight=False)
    console.print(f"wrote {fit.profile_path}", highlight=False)
    if as_json:
        output.emit({"profile": str(fit.profile_path), **fit.summary})


kernels_app = typer.Typer(no_args_is_help=True,
                          help="Measured step-time tables (from aiconfigurator-core's kernel data).")
sim_app.add_typer(kernels_app, name="kernels")


@kernels_app.command("build")
def kernels_build(
    gpu: Annotated[str, typer.Option(help=GPU_HELP)],
    model: Annotated[str, typer.Option(help=MODEL_HELP)],
    parallel: Annotated[list[str], typer.Option(
        help="Parallel layout, repeatable: TP8, TP8+EP, DP2xTP4+EP, DP8+EP.")],
    precision: Annotated[str | None, typer.Option(
        help="dense[/experts] quantisation, e.g. fp8_block/fp8_block (default: the "
             "checkpoint's, as the catalogue gives it).")] = None,
    backend_version: Annotated[str, typer.Option(
        help="The vLLM version whose kernel tables to read.")] = "0.24.0",
    out: Annotated[Path | None, typer.Option(
        help="Folder for the tables (default: autotune/workers/sim/kernels/, which the simulator reads).")
    ] = None,
    estimate_moe_from: Annotated[str | None, typer.Option(
        help="For FP4 experts the package has no rows for: estimate the routed MoE from "
             "this measured kernel on other shapes (w4a16_mxfp4: vLLM's Marlin) and take "
             "everything else from the package; the table records which parts are estimated.")
    ] = None,
    kv_cache_dtype: Annotated[str, typer.Option(
        help="The KV cache the attention kernels read: auto (the model's default) or fp8; an "
             "engine with an fp8 cache reads the fp8 table where there is one.")] = "auto",
) -> None:
    """Sample aiconfigurator-core's forward-pass model (NVIDIA-measured kernels) over a grid
    of decode and prefill batches and write one step-time table per layout. Needs the
    optional extra: pip install 'autotune[aiconfigurator]'. Offline: the simulator reads the
    tables, never the package."""
    from autotune.measure.sim_tools import simulator_tools

    written = simulator_tools().build_step_tables(
        gpu, model, parallel, precision=precision, backend_version=backend_version, out=out,
        estimate_moe_from=estimate_moe_from, kv_cache_dtype=kv_cache_dtype)
    for t in written:
        console.print(f"{t.path}: decode of {_slashed(t.decode_ms)} sequences at "
                      f"{t.decode_context} context {_slashed(t.decode_ms.values(), '.2f')} ms, "
                      f"prefill of {_slashed(t.prefill_ms)} tokens "
                      f"{_slashed(t.prefill_ms.values(), '.2f')} ms")


def _slashed(values: Iterable[object], spec: str = "") -> str:
    """`1 / 32 / 256`: values side by side, each formatted by spec."""
    return " / ".join(format(v, spec) for v in values)


@kernels_app.command("fit-roofline")
def kernels_fit_roofline(
    gpu: Annotated[list[str] | None, typer.Option(
        help="GPU to fit, repeatable (default: every GPU whose tables cover at least three "
             "models).")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Folder for the profiles (default: the bundled autotune/workers/sim/profiles/gpu/, which "
             "the simulator uses for a GPU where an engine has no measured table).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the fits as one JSON object.")] = False,
) -> None:
    """Fit the roofline's GPU coefficients to the committed measured tables of each GPU and
    write one profile per GPU (<out>/<GPU>.yaml). Prints each model's error with the generic
    coefficients (profiles/gpu.yaml) and with those fitted to the other models' tables: how
    the roofline does on a model that has no table. Reads only the committed tables; no
    optional extra needed."""
    from autotune.measure.sim_tools import simulator_tools

    fits = simulator_tools().fit_roofline(gpu or [], out)
    for f in fits:
        before, after = f.fit["error_generic"], f.fit["error_fitted"]
        console.print(f"{f.profile_path}: {len(f.fit['tables'])} tables; step time off the "
                      f"tables (median |%|, signed median): generic coefficients "
                      f"{before['ape_median']} ({before['signed_median']:+}), fitted "
                      f"{after['ape_median']} ({after['signed_median']:+})", highlight=False)
        for model, row in f.fit["leave_one_model_out"].items():
            left_out = row.get("fitted_without_it")
            console.print(f"  {model}: generic {row['generic']['ape_median']}, fitted without "
                          f"it {left_out['ape_median'] if left_out else '-'}", highlight=False)
    if as_json:
        output.emit({f.gpu: {"coefficients": f.coefficients, "fit": f.fit} for f in fits})

"""The `autotune` command line. Errors become one line on stderr and the error's exit code
(2: bad input); with --json, also one JSON error object on stdout (see autotune.cli.output)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.campaign.requests import TuneRequest
from autotune.cli import output
from autotune.cli.bench import bench_app
from autotune.cli.capture import capture
from autotune.cli.common import console, err, load_settings, open_db, setup_logging
from autotune.cli.flags import TUNE_FLAGS, flag_message
from autotune.cli.quarterly import HELP as QUARTERLY_HELP
from autotune.cli.quarterly import quarterly
from autotune.cli.request_options import Setting, given, request_options
from autotune.cli.sim import GPU_HELP, MODEL_HELP, sim_app, simulate
from autotune.cli.space import space_app
from autotune.cli.traffic import traffic_app
from autotune.errors import AutotuneError, ConfigError, SettingError

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None,
                  help="Find, prove and publish the vLLM engine arguments with the most "
                       "capacity under a P99 latency SLO.")
db_app = typer.Typer(no_args_is_help=True, help="Database migrations.")
models_app = typer.Typer(no_args_is_help=True,
                         help="The models --model knows; model directories for real engines.")
app.add_typer(db_app, name="db")
app.add_typer(models_app, name="models")
app.add_typer(traffic_app, name="traffic")
app.add_typer(sim_app, name="sim")
app.add_typer(space_app, name="space")
app.add_typer(bench_app, name="bench")
app.command("simulate")(simulate)
app.command("capture")(capture)
app.command("quarterly", help=QUARTERLY_HELP)(quarterly)

JSON_HELP = "Print one JSON object on stdout (keys: docs/reference/json-output.md); the tables go to stderr."


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        console.print(f"autotune {version('autotune')}", markup=False, highlight=False)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_version, help="Print the version and exit.")] = False,
) -> None:
    pass


# -- db ---------------------------------------------------------------------------------------
@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the database (autotune's tables and Optuna's) to the latest revision."""
    from autotune.storage.db import upgrade

    url = load_settings().database_url
    before, after = upgrade(url)
    console.print(f"database at revision {after} (was {before or 'empty'})")


@db_app.command("current")
def db_current() -> None:
    """Show the database's revision and the head revision."""
    from autotune.storage.db import current_revision, head_revision, make_engine

    engine = make_engine(load_settings().database_url)
    console.print(f"current {current_revision(engine) or 'none'}, head {head_revision()}")


# -- tune -------------------------------------------------------------------------------------
# tune's options, in --help order: each a setting of TuneRequest, its type and default the model's.
TUNE_SETTINGS = (
    Setting("deployment", "Deployment name."),
    Setting("campaign", "Campaign name, e.g. 2026Q4."),
    Setting("model", MODEL_HELP),
    Setting("gpu", GPU_HELP),
    Setting("gpu_count", "GPUs of one engine replica."),
    Setting("tensor_parallel_size", "Tensor-parallel size (default: --gpus)."),
    Setting("max_model_len", "Context length served."),
    Setting("traffic_profile", "Traffic profile: chat or batch."),
    Setting("allow_accuracy_affecting", off="--forbid-accuracy-affecting",
            help="Whether the deployment's campaigns may search values that change the model's "
                 "numerics (an fp8 KV cache, speculative decoding); forbidden, they are left out "
                 "of the space and a baseline needing one is refused. Values the model requires "
                 "are always run. Stored with the deployment."),
    Setting("trace", "Trace file (default: bundled demo)."),
    Setting("slo", 'P99 ceilings, e.g. "ttft_p99<=2s,tpot_p99<=50ms".'),
    Setting("backend", "Engine backend of a one-backend campaign: sim or vllm (default sim)."),
    Setting("screen", "Multi-fidelity: run the search on this simulator backend (sim), then its "
                      "best configs on the --confirm backend."),
    Setting("confirm", "Multi-fidelity: the real backend (vllm) that measures the baselines and "
                       "the best screened configs; only its results are confirmed and published."),
    Setting("screen_top", "Multi-fidelity: screened configs measured on the --confirm backend "
                          "besides the baselines (default 3)."),
    Setting("executor", "inline or ray."),
    Setting("parallel", "Trials in flight (ray executor)."),
    Setting("ray_address", "Join this Ray cluster."),
    Setting("space", "Search space: built-in name or YAML file (default: the traffic profile's, "
                     "chat or batch)."),
    Setting("sampler", "tpe (constrained TPE), gp (Gaussian process, small budgets; needs torch), "
                       "random, or grid (max_num_seqs x max_num_batched_tokens, like vLLM's "
                       "auto-tune script)."),
    Setting("max_trials", "Trials to measure, baselines included (with --screen: screening "
                          "trials).", aliases=("--max-trials",)),
    Setting("max_gpu_hours", "Stop the search once the trials have used this many GPU-hours "
                             "(engine wall time x GPUs); confirmation follows."),
    Setting("deadline", "Stop the search at this ISO 8601 time (UTC if no zone); trials in "
                        "flight finish, confirmation follows."),
    Setting("seed", "Sampler and replay seed."),
    Setting("max_scale", "Highest rate multiplier tried."),
    Setting("bisect_steps", "Bisection steps after the ladder."),
    Setting("max_send_lag_ms", "A replay whose client sent later than this (P99) is client-bound, "
                               "not a measurement; raise it only on machines too small to keep "
                               "the schedule."),
    Setting("model_path", "vllm backend: the model directory or id the engine loads."),
    Setting("engine_args", "vllm backend: an extra server argument, e.g. "
                           "--engine-arg=--load-format=dummy (repeatable)."),
    Setting("confirm_top", "Confirm the best K feasible configs after the search (0: publish the "
                           "best single measurement)."),
    Setting("confirm_repeats", "Re-runs per confirmed config, each with another arrival seed (at "
                               "least 2)."),
    Setting("per_path", "Also tune one config per traffic path (hot / cold, the tuning guide's "
                        "separation), each as deployment DEPLOYMENT.PATH; --trials applies to each "
                        "campaign."),
    Setting("paths", "With --per-path: hot,cold (default; warm folded into cold) or "
                     "hot,warm,cold (implies --per-path)."),
    Setting("slo_hot", "The hot path's SLO (default --slo)."),
    Setting("slo_warm", "The warm path's SLO (default --slo)."),
    Setting("slo_cold", "The cold path's SLO (default --slo)."),
    Setting("min_path_requests", "A path with fewer requests is not tuned (it keeps the single "
                                 "config)."),
    Setting("new_campaign", "If --campaign already exists, start a new campaign named CAMPAIGN.2 "
                            "(or .3, ...: the first free name) instead of resuming it or "
                            "reporting its result."),
)


@app.command()
@request_options(TuneRequest, TUNE_SETTINGS, TUNE_FLAGS)
def tune(
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
    **asked: Any,
) -> None:
    """Run a tuning campaign (defaults: the demo deployment on the simulator). The best configs
    are then confirmed: re-run with other arrival seeds, the winner is the one with the best 90%
    lower confidence bound on capacity. With --screen sim --confirm vllm the search runs on the
    simulator, then the baselines and the --screen-top best configs run on real engines, and
    only those real results are confirmed and published.
    With --per-path, then one campaign per traffic path on its sub-trace (hot: the chat space,
    cold: the batch space, unless --space), each compared with the whole trace's winner
    measured on the same sub-trace.
    The search stops at --trials, --max-gpu-hours or --deadline, whichever comes first; what
    was spent and what stopped it are recorded and printed.
    Running it again with the same settings resumes a campaign whose job died, or prints a
    completed campaign's result; other settings (SLO, trace, space, backend, trials, seed,
    deployment) are refused, naming what differs, unless --new-campaign; another --sampler is
    not refused, but said in a warning line (a resumed campaign continues with it).
    Exit code 0 once the campaign completes, whatever stopped its search; 2 bad input."""
    from autotune.campaign.run import run_campaign
    from autotune.cli.tune_output import TuneOutput, render_paths

    settings = load_settings()
    setup_logging(settings.log_level)
    # Every value is checked before the database is touched.
    try:
        request = TuneRequest.of(**given(asked))
        shown = TuneOutput(console, err)
        ran = run_campaign(request, settings=settings, out=shown)
    except SettingError as exc:
        raise ConfigError(flag_message(exc, TUNE_FLAGS)) from None
    view = shown.view
    if ran.path_campaign is not None:
        view["paths"] = render_paths(console, ran.paths, ran.path_campaign, request.deployment)
    if as_json:
        output.emit(view)


# -- check-config -------------------------------------------------------------------------------
@app.command("check-config", context_settings={"allow_extra_args": True,
                                                "ignore_unknown_options": True})
def check_config(
    ctx: typer.Context,
    model: Annotated[str, typer.Option(help=MODEL_HELP)],
    gpu: Annotated[str, typer.Option(help=GPU_HELP)],
    gpus: Annotated[int, typer.Option(help="GPUs the engine may use.")],
    yaml_file: Annotated[Path | None, typer.Option(
        "--yaml", help="A `vllm serve --config` file (or a published config's YAML).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Check a hand-written config against the rules vLLM enforces for the model and GPU, each
    with its vLLM source: `autotune check-config --model M --gpu G --gpus N --yaml FILE` or
    `... -- --tensor-parallel-size 8 --block-size 16`. Prints the rules it breaks and the values
    vLLM will use. Exit 0: vLLM would start it (rules known to be slow are warnings); 1: a rule
    says vLLM refuses it; 2: bad input."""
    from autotune.search import check

    if (yaml_file is None) == (not ctx.args):
        raise ConfigError("give the config either as --yaml FILE or as engine arguments after "
                          "`--` (e.g. -- --tensor-parallel-size 8), not both or neither")
    if gpus < 1:
        raise ConfigError("--gpus must be at least 1")
    values, unknown = (check.read_config_file(yaml_file) if yaml_file is not None
                       else check.parse_cli_args(list(ctx.args)))
    result = check.check_config(values, model=model, gpu=gpu, gpus=gpus, unchecked=unknown)
    if as_json:
        output.emit(result.to_json())
    else:
        for line in check.render(result):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    if result.refused:
        raise typer.Exit(1)


# -- publish / read -----------------------------------------------------------------------------
@app.command()
def publish(
    campaign: Annotated[str, typer.Option(help="Campaign whose winner to publish.")],
    deployment: Annotated[str | None, typer.Option(help="Needed if several have it.")] = None,
    trial: Annotated[int | None, typer.Option(help="Publish this trial instead.")] = None,
    period: Annotated[str | None, typer.Option(
        help="Period label (default: the campaign's name if it is one, like 2026Q4, "
             "else this quarter).")] = None,
    by: Annotated[str | None, typer.Option(help="Who publishes (default: $USER).")] = None,
    note: Annotated[str | None, typer.Option(help="A note kept with the publication.")] = None,
    per_path: Annotated[bool, typer.Option(
        "--per-path", help="Publish each path's winner of a --per-path campaign as deployment "
                           "DEPLOYMENT.PATH (all or none).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Publish a campaign's winner (or a given trial) as the deployment's config: the
    confirmed config, or without confirmation the best feasible trial."""
    import getpass

    from autotune.cli import json_views
    from autotune.release.publish import publish_campaign
    from autotune.storage.db import session_scope

    engine, _ = open_db()
    if per_path:
        if trial is not None:
            raise ConfigError("--trial names one trial of one campaign; publish a path's trial "
                              "with --deployment DEPLOYMENT.PATH --trial N")
        from autotune.campaign.per_path import publish_paths

        with session_scope(engine) as s:
            pubs = publish_paths(s, campaign, deployment=deployment, period_label=period,
                                 published_by=by or getpass.getuser(), note=note)
            s.flush()  # the publications' ids
            views = [json_views.publication(pub) for pub in pubs]
    else:
        with session_scope(engine) as s:
            pub = publish_campaign(s, campaign, deployment=deployment, trial_number=trial,
                                   period_label=period, published_by=by or getpass.getuser(),
                                   note=note)
            s.flush()
            views = [json_views.publication(pub)]
    # Printed after the commit: a closed stdout (`| head -1`) must not undo the publication.
    from autotune.cli.live import log_outside_terminal

    for view in views:
        line = (f"published trial {view['trial']} of campaign {view['campaign']!r} for "
                f"deployment {view['deployment']!r} ({view['period']})")
        console.print(f"{line}:")
        log_outside_terminal(console, line)
        console.print("  " + " ".join(view["engine_args"]), soft_wrap=True)
    if as_json:
        output.emit({"publications": views})


@app.command()
def report(
    campaign: Annotated[str, typer.Option(help="Campaign name (or its numeric id).")],
    out: Annotated[Path, typer.Option(
        help="Directory to write index.html (self-contained), its PNGs and the CSV/JSON exports "
             "of trials and replays to.")],
    deployment: Annotated[str | None, typer.Option(help="Needed if several have it.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Write a campaign's HTML report: latency against offered load, latency distributions and
    tokens/s per GPU against per user, the winner beside the incumbent and baselines, every
    trial; with CSV and JSON exports of trials and replays."""
    from autotune.release.report import INDEX, find_campaign, gather, write_report
    from autotune.storage.db import session_scope

    engine, url = open_db()
    with session_scope(engine) as s:
        data = gather(s, find_campaign(s, campaign, deployment), url)
        s.rollback()  # read only
    written = write_report(data, out)
    console.print(f"wrote the report of {data.study_name} ({len(data.trials)} trials) to "
                  f"{written / INDEX}", soft_wrap=True)
    if as_json:
        from autotune.cli.json_views import report_written

        output.emit(report_written(data, written / INDEX))


@app.command()
def campaigns(
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """List campaigns."""
    from rich.table import Table

    from autotune.cli.json_views import campaign_row
    from autotune.storage import repo
    from autotune.storage.db import session_scope

    engine, _ = open_db()
    table = Table(title="Campaigns", title_justify="left")
    for col in ("deployment", "campaign", "status", "backend", "trials", "best tok/s", "GPU-h",
                "stopped by", "started", "decision"):
        table.add_column(col, overflow="fold")
    rows = []
    with session_scope(engine) as s:
        for c in repo.list_campaigns(s):
            rows.append(campaign_row(c))
            best = repo.best_trial(c)
            decision = f"{c.decision}: {c.decision_note}" if c.decision else "-"
            backend = f"{c.screen_backend}->{c.backend}" if c.screen_backend else c.backend
            table.add_row(c.deployment.name, c.name, c.status, backend, str(len(c.trials)),
                          f"{best.capacity_output_tok_s:,.0f}" if best else "-",
                          f"{c.gpu_hours or 0:.3g}", (c.stop_reason or "-").replace("_", " "),
                          c.started_at.strftime("%Y-%m-%d %H:%M"), decision)
        s.rollback()  # read only
    console.print(table)
    if as_json:
        output.emit({"campaigns": rows})


# -- services -----------------------------------------------------------------------------------
@app.command()
def api(
    host: Annotated[str | None, typer.Option(help="Bind address (AUTOTUNE_API__HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (AUTOTUNE_API__PORT).")] = None,
) -> None:
    """Serve the REST API for published configs."""
    import uvicorn

    from autotune.api.app import create_app

    settings = load_settings()
    open_db(settings.database_url)[0].dispose()  # refuse to start on an unusable database
    uvicorn.run(create_app(settings), host=host or settings.api.host,
                port=port or settings.api.port, log_level=settings.log_level.lower())


@app.command()
def dashboard(
    host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8080,
) -> None:
    """Serve optuna-dashboard on the same storage."""
    import optuna_dashboard

    engine, url = open_db()
    engine.dispose()
    console.print(f"optuna-dashboard on http://{host}:{port}/ (storage {engine.url!r})")
    optuna_dashboard.run_server(url, host=host, port=port)


# -- models -------------------------------------------------------------------------------------
@models_app.command("list")
def models_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """The models --model knows by name: the catalogue's hand-checked entries and the Hugging
    Face ids with a bundled config.json (vendored, or the aiconfigurator extra's). A model
    directory or a config.json path works too."""
    from autotune.domain import catalogue
    from autotune.domain.model_sources import bundled_ids, resolve

    hand = {m.name: m.hf_id for m in catalogue.MODELS.values()}
    bundled = {hf_id: str(path) for hf_id, path in bundled_ids().items()
               if hf_id.lower() not in {h.lower() for h in hand.values() if h}}
    # A bundled config the simulator cannot model (linear-attention layers, a field it does not
    # read) is listed with why, so nobody picks it and only then meets the error.
    not_simulated = {}
    for hf_id, path in bundled.items():
        try:
            resolve(hf_id)
        except ConfigError as exc:
            not_simulated[hf_id] = str(exc).removeprefix(f"{path}: ")
    if as_json:
        output.emit({"catalogue": hand, "bundled_configs": bundled,
                     "not_simulated": not_simulated})
        return
    from rich.table import Table

    table = Table(title="Models --model resolves by name")
    for col in ("name", "Hugging Face id", "source", "simulated"):
        table.add_column(col)
    for name, hf_id in hand.items():
        table.add_row(name, hf_id, "catalogue (hand-checked)", "yes")
    for hf_id, path in sorted(bundled.items()):
        table.add_row(hf_id.split("/")[-1], hf_id, path, f"no: {not_simulated[hf_id]}"
                      if hf_id in not_simulated else "yes")
    console.print(table)


@models_app.command("make-tiny")
def models_make_tiny(
    directory: Annotated[Path, typer.Argument(help="Where to write the model directory.")],
    vocab_size: Annotated[int, typer.Option(help="Tokenizer and embedding size.")] = 2048,
    max_position_embeddings: Annotated[int, typer.Option(help="Longest context.")] = 4096,
    seed: Annotated[int, typer.Option(help="Tokenizer training seed.")] = 0,
) -> None:
    """Write a tiny Llama model (config and a locally trained tokenizer) for CPU engines; serve it
    with --load-format dummy."""
    from autotune.measure.tiny_model import make_tiny_model

    path = make_tiny_model(directory, vocab_size=vocab_size,
                           max_position_embeddings=max_position_embeddings, seed=seed)
    console.print(f"wrote a tiny Llama model to {path} (serve with --load-format dummy)")


@models_app.command("make-dummy")
def models_make_dummy(
    directory: Annotated[Path, typer.Argument(help="Where to write the model directory.")],
    config: Annotated[str, typer.Option(
        help="The model whose architecture to take: a Hugging Face id with a bundled config "
             "(e.g. meta-llama/Llama-3.1-8B), a catalogue name, a config.json or a model "
             "directory.")],
    seed: Annotated[int, typer.Option(help="Tokenizer training seed.")] = 0,
) -> None:
    """Write a model directory with a real model's config and a locally trained tokenizer of
    its vocabulary size, no weights: `vllm serve DIR --load-format dummy` then runs that
    model's kernels at full size, offline (the GPU check's 8B engine)."""
    from autotune.measure.dummy_model import make_dummy_model

    path = make_dummy_model(directory, config, seed=seed)
    console.print(f"wrote a dummy-weight model of {config} to {path} (serve with "
                  "--load-format dummy)")


# -- shell completion ----------------------------------------------------------------------------
SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


@app.command()
def completion(
    ctx: typer.Context,
    shell: Annotated[str, typer.Argument(help=f"One of {', '.join(SHELLS)}.")],
) -> None:
    """Print the shell completion script, e.g. `autotune completion bash >
    ~/.local/share/bash-completion/completions/autotune` (or `eval "$(autotune completion
    bash)"` in ~/.bashrc). `autotune --install-completion` installs it for the current shell."""
    # Click's ShellComplete classes as typer registers them for each shell (typer vendors Click
    # as typer._click, so the installed click's registry knows neither typer's scripts nor pwsh).
    from typer.completion import shell_completion

    complete = shell_completion.get_completion_class(shell) if shell in SHELLS else None
    if complete is None:
        raise ConfigError(f"no completion for shell {shell!r}; give one of {', '.join(SHELLS)}")
    root = ctx.find_root()
    print(complete(root.command, {}, "autotune", "_AUTOTUNE_COMPLETE").source().strip())


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if not output.requested(args):
        return _main(args)
    with output.json_session():
        return _main(args)


def _main(args: list[str]) -> int:
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name="autotune", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except AutotuneError as exc:  # a library's settings named by their flags
        kind = ConfigError if isinstance(exc, SettingError) else type(exc)
        output.error(flag_message(exc), exc.exit_code, kind.__name__)
        return exc.exit_code
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        err.print("autotune: interrupted", markup=False)
        output.error_json("interrupted", 130, "Interrupted")
        return 130
    except typer.TyperException as exc:  # usage errors: unknown flag, bad value, ...
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `autotune` or `autotune db`
            console.print(exc.format_message(), markup=False, highlight=False)  # type: ignore[attr-defined]
            return 2
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        output.error(f"{message} (see `autotune --help`)", 2, "UsageError")
        return 2


if __name__ == "__main__":
    sys.exit(main())

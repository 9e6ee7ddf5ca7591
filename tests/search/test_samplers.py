"""Samplers by flag: each runs a tiny campaign on the simulator; the grid is vLLM's two axes."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import numpy as np
import optuna
import pytest
import sqlalchemy as sa

from autotune.campaign.study import CampaignRequest, StudyController
from autotune.domain import optuna_keys as keys
from autotune.domain.deployment import DEMO
from autotune.domain.records import CapacitySearch
from autotune.domain.slo import parse_slo
from autotune.errors import ConfigError
from autotune.measure.executors import InlineExecutor
from autotune.search.samplers import (
    GRID_PARAMS,
    SAMPLERS,
    STARTUP_TRIALS,
    OrdinalParzenEstimator,
    make_sampler,
)
from autotune.search.spaces.deployment import deployment_space
from autotune.storage.db import open_database, session_scope
from autotune.storage.models import Campaign
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE
from tests.conftest import run_cli

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier

TINY = load_trace(DEMO_TRACE).slice(0, 120)
# The GP needs the `gp` extra, whose pinned torch CPU wheel these machines hold for Python 3.11
# only: the 3.12 and 3.13 runs (make test-py312, test-py313) skip it.
NEEDS_TORCH = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("torch", "scipy")),
    reason="--sampler gp needs torch and scipy: pip install 'autotune[gp]'")
EXPECTED = {"tpe": optuna.samplers.TPESampler, "gp": optuna.samplers.GPSampler,
            "random": optuna.samplers.RandomSampler, "grid": optuna.samplers.GridSampler}


def _optuna_sampler(sampler: optuna.samplers.BaseSampler) -> optuna.samplers.BaseSampler:
    """The Optuna sampler inside autotune's wrappers (line sweep, distinct proposals)."""
    while hasattr(sampler, "inner"):
        sampler = sampler.inner
    return sampler


def _campaign(url: str, sampler: str, trials: int = 4
              ) -> tuple[Campaign, optuna.Study, optuna.samplers.BaseSampler]:
    request = CampaignRequest(deployment=DEMO, campaign=f"s-{sampler}", slo=parse_slo(
        "ttft_p99<=2s,tpot_p99<=50ms"), trace=TINY, trace_ref="tiny", search_space="chat",
        sampler=sampler, max_trials=trials, seed=3,
        search=CapacitySearch(max_scale=32.0, bisect_steps=1))
    engine = open_database(url)
    controller = StudyController(engine, url, request, InlineExecutor())
    campaign_id = controller.run()
    with session_scope(engine) as s:
        c = s.get(Campaign, campaign_id)
        assert c is not None
        _ = [t.engine_config for t in c.trials]
    engine.dispose()
    return c, optuna.load_study(study_name=request.study_name, storage=url), controller.plan.sampler


@pytest.mark.parametrize("sampler", [pytest.param(s, marks=NEEDS_TORCH) if s == "gp" else s
                                     for s in SAMPLERS])
def test_each_sampler_runs_a_campaign(migrated_sqlite: str, sampler: str) -> None:
    c, study, used = _campaign(migrated_sqlite, sampler)
    assert c.status == "completed"
    assert isinstance(_optuna_sampler(used), EXPECTED[sampler])
    assert study.user_attrs["sampler"] == sampler
    measured = [t for t in c.trials if t.state != "rejected"]
    assert len(measured) == 4 and any(t.role == "proposed" for t in measured)
    # Infeasible configs are completed trials with constraints, never a silent FAIL.
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    assert all(t.constraints for t in study.trials)


def test_grid_proposals_vary_only_seqs_and_tokens(migrated_sqlite: str) -> None:
    c, _, _ = _campaign(migrated_sqlite, "grid", trials=5)
    proposed = [t.engine_config for t in c.trials if t.role == "proposed"]
    assert proposed
    for config in proposed:  # everything else is left to vLLM's defaults (V4's pins are set)
        assert set(config) == {"max_model_len", "tensor_parallel_size", *GRID_PARAMS,
                               "block_size", "kv_cache_dtype"}


def test_the_grid_is_the_spaces_two_axes() -> None:
    plan = make_sampler("grid", deployment_space("chat", DEMO), seed=0)
    assert plan.space.param_names == GRID_PARAMS
    assert plan.space.param("max_num_seqs").grid() == (16, 32, 64, 128, 256, 512, 1024)
    assert plan.space.param("max_num_batched_tokens").grid() == (1024, 2048, 4096, 8192, 16384)
    assert plan.space.rules  # rules still apply: tokens < seqs is rejected for free


def test_gp_without_torch_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    fake = {"torch": None, "scipy": object()}  # scipy there or not, only torch is missing
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: fake[name] if name in fake else real(name, *a))
    with pytest.raises(ConfigError, match=r"needs torch \(.*autotune\[gp\]"):
        make_sampler("gp", deployment_space("chat", DEMO), seed=0)


def test_unknown_sampler_is_one_line_exit_2(migrated_sqlite: str) -> None:
    proc = run_cli("tune", "--trials", "3", "--sampler", "nope",
                   env={"AUTOTUNE_DATABASE_URL": migrated_sqlite})
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert lines == ["autotune: error: unknown sampler 'nope'; choose one of tpe, gp, random, grid"]
    engine = sa.create_engine(migrated_sqlite)
    with engine.connect() as conn:  # nothing written
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM autotune_campaigns").scalar_one() == 0
    engine.dispose()


def test_sampler_space_names_are_checked(tmp_path: Path) -> None:
    space = tmp_path / "s.yaml"
    space.write_text("parameters:\n  block_size: {type: categorical, choices: [16, 32]}\n")
    from autotune.search.spaces.deployment import load_search_space

    with pytest.raises(ConfigError, match="grid searches max_num_seqs x max_num_batched_tokens"):
        make_sampler("grid", load_search_space(str(space)).bind(DEMO.rule_context()), seed=0)


SMALL_SPACE = """
name: small
parameters:
  max_num_seqs: {type: categorical, choices: [16, 32, 64, 128]}
  max_num_batched_tokens: {type: categorical, choices: [1024, 2048, 4096, 8192]}
  enable_chunked_prefill: {type: bool}
  long_prefill_token_threshold: {type: categorical, choices: [0, 512], when: enable_chunked_prefill}
"""


def _repeats(sampler: optuna.samplers.BaseSampler, space: object, trials: int) -> int:
    """Model-based proposals that repeat an earlier config, on a one-peak objective."""
    study = optuna.create_study(direction="maximize", sampler=sampler)
    seen: set[tuple[tuple[str, object], ...]] = set()
    repeats = 0
    for i in range(trials):
        trial = study.ask()
        params = space.suggest(trial)  # type: ignore[attr-defined]
        key = tuple(sorted(params.items()))
        repeats += i >= STARTUP_TRIALS and key in seen
        seen.add(key)
        peak = -abs(params["max_num_seqs"] - 64) - abs(params["max_num_batched_tokens"] - 4096) / 64
        study.tell(trial, peak + 10 * params.get("long_prefill_token_threshold", 0) / 512)
    return repeats


@pytest.mark.parametrize("sampler", ["tpe", pytest.param("gp", marks=NEEDS_TORCH)])
def test_model_based_samplers_propose_distinct_configs(tmp_path: Path, sampler: str) -> None:
    """Without the wrapper TPE re-proposes its best config over and over in a discrete space
    (the first assertion shows it); with it, no model-based proposal repeats while unmeasured
    configs remain (48 here, 30 trials). The GP models only the parameters every trial has, so
    a conditional one is drawn at random after its proposal and cannot be checked: its space
    here has none."""
    path = tmp_path / "small.yaml"
    text = SMALL_SPACE if sampler == "tpe" else SMALL_SPACE.replace(
        "when: enable_chunked_prefill", "when: enable_chunked_prefill and False")
    path.write_text(text)
    space = deployment_space(str(path), DEMO)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    plan = make_sampler(sampler, space, seed=1)
    if sampler == "tpe":
        assert _repeats(_optuna_sampler(plan.sampler), space, 30) > 0
    trials = 30 if sampler == "tpe" else 16  # the GP costs seconds a trial
    assert _repeats(make_sampler(sampler, space, seed=1).sampler, space, trials) == 0


def _density(estimator_cls: type, choices: list[object], observed: list[int]) -> list[float]:
    """The estimator's probability of each choice, given observations (choice positions)."""
    from optuna.samplers._tpe.parzen_estimator import _ParzenEstimatorParameters
    from optuna.samplers._tpe.sampler import default_weights

    dist = optuna.distributions.CategoricalDistribution(choices)
    params = _ParzenEstimatorParameters(prior_weight=1.0, consider_magic_clip=True,
                                        consider_endpoints=False, weights=default_weights,
                                        multivariate=True)
    pe = estimator_cls({"x": np.asarray(observed, dtype=float)}, {"x": dist}, params)
    return list(np.exp(pe.log_pdf({"x": np.arange(len(choices), dtype=float)})))


def test_ordinal_kernel_spreads_to_neighbouring_choices() -> None:
    from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator

    seqs = [16, 32, 64, 128, 256]
    p = _density(OrdinalParzenEstimator, seqs, [2])  # 64 measured
    assert p[1] == pytest.approx(p[3]) and p[0] == pytest.approx(p[4])
    assert p[2] > p[1] > p[0]
    assert sum(p) == pytest.approx(1.0)
    # Optuna's own kernel: every choice but the observed one alike.
    plain = _density(_ParzenEstimator, seqs, [2])
    assert plain[1] == pytest.approx(plain[0])
    # Unordered choices keep Optuna's kernel.
    for choices in ([False, True, None], ["auto", "fp8", "fp8_e5m2"], [64, 16, 32]):
        assert _density(OrdinalParzenEstimator, choices, [1]) == pytest.approx(
            _density(_ParzenEstimator, choices, [1]))


def test_tpe_models_numeric_choices_as_ordered() -> None:
    """The hook the ordinal kernel goes through exists in this Optuna, and TPE uses it."""
    plan = make_sampler("tpe", deployment_space("chat", DEMO), seed=0)
    tpe = _optuna_sampler(plan.sampler)
    assert tpe._parzen_estimator_cls is OrdinalParzenEstimator  # type: ignore[attr-defined]
    built: list[object] = []

    class Counting(OrdinalParzenEstimator):
        def __init__(self, *args: object, **kwargs: object) -> None:
            built.append(self)
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    tpe._parzen_estimator_cls = Counting  # type: ignore[attr-defined]
    study = optuna.create_study(direction="maximize", sampler=tpe)
    study.optimize(lambda t: -abs(t.suggest_categorical("max_num_seqs", [16, 64, 256, 1024])
                                 - 256), n_trials=STARTUP_TRIALS + 2)
    assert built, "TPE never built its density estimator through _parzen_estimator_cls"


# A peak at budget 4096 and 32 sequences, chunked prefill on, threshold 512; the reference starts
# at the corner (16 sequences, budget 1024).
REFERENCE = {"max_num_seqs": 16, "max_num_batched_tokens": 1024, "enable_chunked_prefill": True,
             "long_prefill_token_threshold": 0}


def _peak(params: dict[str, object]) -> float:
    seqs, tokens = float(params["max_num_seqs"]), float(params["max_num_batched_tokens"])  # type: ignore[arg-type]
    return (100 - abs(np.log2(seqs / 32)) * 10 - abs(np.log2(tokens / 4096)) * 10
            - 5 * (not params["enable_chunked_prefill"])
            + (params.get("long_prefill_token_threshold") == 512))


def _sweep_study(tmp_path: Path, storage: str | None = None, seed: int = 0,
                 text: str = SMALL_SPACE) -> tuple[optuna.Study, object]:
    path = tmp_path / "small.yaml"
    path.write_text(text)
    space = deployment_space(str(path), DEMO)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="maximize", storage=storage, study_name="sweep",
                                load_if_exists=True,
                                sampler=make_sampler("tpe", space, seed=seed).sampler)
    return study, space


def _run(study: optuna.Study, space: object, trials: int,
         objective: Callable[[dict[str, object]], float] = _peak) -> list[dict[str, object]]:
    out = []
    for _ in range(trials):
        trial = study.ask()
        params = space.suggest(trial)  # type: ignore[attr-defined]
        trial.set_constraint("slo", -1.0)  # feasible
        study.tell(trial, objective(params))
        out.append(params)
    return out


def _moved(before: dict[str, object], after: dict[str, object]) -> set[str]:
    """Arguments set in both and changed (a move can switch a conditional one on or off)."""
    return {k for k in before.keys() & after.keys() if before[k] != after[k]}


def test_line_sweep_moves_one_argument_at_a_time_from_the_best_reference(tmp_path: Path) -> None:
    study, space = _sweep_study(tmp_path)
    study.enqueue_trial(REFERENCE)
    proposed = _run(study, space, 8)
    assert proposed[0] == REFERENCE  # enqueued trials run as enqueued
    # The step budget first: up while it improves (2048, 4096), one past the peak (8192).
    assert [p["max_num_batched_tokens"] for p in proposed[1:4]] == [2048, 4096, 8192]
    # Then the sequence count from the best so far (4096): up to the peak and one past it.
    assert [(p["max_num_batched_tokens"], p["max_num_seqs"]) for p in proposed[4:6]] == [
        (4096, 32), (4096, 64)]
    # Every sweep trial is the best config measured before it, one argument moved.
    trials = study.trials
    for i in range(1, 8):
        best = max(trials[:i], key=lambda t: t.value or 0.0)
        assert len(_moved(best.params, trials[i].params)) == 1, trials[i].params
        assert trials[i].system_attrs[keys.SWEEP_AXIS] in _moved(best.params, trials[i].params)
    assert len({tuple(sorted(p.items())) for p in proposed}) == len(proposed)


def test_line_sweep_resumes_where_it_stopped(tmp_path: Path) -> None:
    """The sweep keeps its state in the study: a new process (sampler) on the same storage
    proposes what the old one would have, and nothing twice."""
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study, space = _sweep_study(tmp_path, url)
    study.enqueue_trial(REFERENCE)
    first = _run(study, space, 4)
    study, space = _sweep_study(tmp_path, url)  # a restarted job: fresh sampler, same study
    rest = _run(study, space, 6)
    (tmp_path / "whole").mkdir()
    whole_study, whole_space = _sweep_study(tmp_path / "whole", None)  # the same, uninterrupted
    whole_study.enqueue_trial(REFERENCE)
    assert first + rest == _run(whole_study, whole_space, 10)


def test_line_sweep_gives_parallel_asks_distinct_moves(tmp_path: Path) -> None:
    study, space = _sweep_study(tmp_path)
    study.enqueue_trial(REFERENCE)
    _run(study, space, 1)
    asked = [study.ask() for _ in range(3)]  # three workers, none told yet
    params = [space.suggest(t) for t in asked]  # type: ignore[attr-defined]
    assert len({tuple(sorted(p.items())) for p in params}) == 3
    for p in params:
        assert len(_moved(REFERENCE, p)) == 1


def test_line_sweep_needs_a_feasible_start(tmp_path: Path) -> None:
    """With nothing feasible yet there is nowhere to sweep from: the model's own start-up
    proposes (random draws), and the sweep begins from the first feasible config."""
    study, space = _sweep_study(tmp_path)
    for _ in range(2):
        trial = study.ask()
        space.suggest(trial)  # type: ignore[attr-defined]
        trial.set_constraint("slo", 1.0)  # an SLO miss
        study.tell(trial, 0.0)
    assert not any(keys.SWEEP_AXIS in t.system_attrs for t in study.trials)
    _run(study, space, 2)
    assert keys.SWEEP_AXIS not in study.trials[2].system_attrs
    assert keys.SWEEP_AXIS in study.trials[3].system_attrs


def test_line_sweep_walks_across_a_plateau(tmp_path: Path) -> None:
    """A step that measures the same as the best does not end the line: above the load a
    trace offers, more sequences change nothing until the count that helps is reached."""
    study, space = _sweep_study(tmp_path)
    study.enqueue_trial(REFERENCE)

    def flat_then_better(params: dict[str, object]) -> float:
        return 60.0 if params["max_num_seqs"] == 128 else 50.0

    _run(study, space, 12, flat_then_better)
    seqs = [t.params["max_num_seqs"] for t in study.trials
            if t.system_attrs.get(keys.SWEEP_AXIS) == "max_num_seqs"]
    assert seqs == [32, 64, 128], seqs  # past 32 and 64, which measured as the reference did


def test_line_sweep_goes_round_the_axes_again_after_a_late_improvement(tmp_path: Path) -> None:
    study, space = _sweep_study(tmp_path)
    study.enqueue_trial(REFERENCE)
    _run(study, space, 24)
    axes = [t.system_attrs.get(keys.SWEEP_AXIS) for t in study.trials]
    late = axes.index("long_prefill_token_threshold")  # +1 on _peak: the incumbent moved
    assert "max_num_batched_tokens" in axes[late:], axes


LAYOUT_SPACE = """
name: layouts
parameters:
  parallelism: {type: categorical, choices: [tp, tep, dep]}
  max_num_seqs: {type: categorical, choices: [32, 64, 128, 256, 512, 1024]}
  enable_chunked_prefill: {type: bool}
  long_prefill_token_threshold: {type: categorical, choices: [0, 512, 2048],
                                 when: enable_chunked_prefill}
"""


def test_a_layout_move_keeps_the_sequence_count_and_tries_prefill_caps_in_lockstep(
        tmp_path: Path) -> None:
    """max_num_seqs is per DP rank, so TP8 at 1024 moves to DP8+EP at 128; a layout whose
    ranks step in lockstep is tried with each long-prefill cap, every layout at its tightest
    cap before any at its next."""
    study, space = _sweep_study(tmp_path, text=LAYOUT_SPACE)
    reference = {"parallelism": "TP8", "max_num_seqs": 1024, "enable_chunked_prefill": True,
                 "long_prefill_token_threshold": 0}
    study.enqueue_trial(reference)
    _run(study, space, 12, lambda params: 50.0)  # all alike: every move is from the reference
    moves = [t.params for t in study.trials
             if t.system_attrs.get(keys.SWEEP_AXIS) == "parallelism"]
    by_layout: dict[object, list[dict[str, object]]] = {}
    for params in moves:
        by_layout.setdefault(params["parallelism"], []).append(params)
    assert set(by_layout) == {"TP8+EP", "DP2xTP4+EP", "DP4xTP2+EP", "DP8+EP"}
    assert [p["max_num_seqs"] for p in by_layout["TP8+EP"]] == [1024]
    assert {p["max_num_seqs"] for p in by_layout["DP2xTP4+EP"]} == {512}
    assert {p["max_num_seqs"] for p in by_layout["DP8+EP"]} == {128}
    assert sorted(p["long_prefill_token_threshold"] for p in by_layout["DP8+EP"]) == [
        0, 512, 2048]
    # Every layout once, at the tightest cap, before any layout at a second cap (none last).
    first = [(p["parallelism"], p.get("long_prefill_token_threshold")) for p in moves[:4]]
    assert first == [("TP8+EP", 0), ("DP2xTP4+EP", 512), ("DP4xTP2+EP", 512), ("DP8+EP", 512)]
    assert [p["long_prefill_token_threshold"] for p in moves[4:]] == [2048] * 3 + [0] * 3


def test_line_sweep_goes_on_from_the_runner_up_layout(tmp_path: Path) -> None:
    """Where no step from the incumbent is left, the sweep searches the best config of the
    next layout (its layout held), which may beat the incumbent at its own batch shape."""
    study, space = _sweep_study(tmp_path, text=LAYOUT_SPACE)
    study.enqueue_trial({"parallelism": "TP8", "max_num_seqs": 1024,
                         "enable_chunked_prefill": True, "long_prefill_token_threshold": 0})

    def runner_up_peaks(params: dict[str, object]) -> float:
        if params["parallelism"] == "TP8":
            return 60.0
        if params["parallelism"] == "DP8+EP":
            return 70.0 if params["max_num_seqs"] == 64 else 55.0
        return 50.0

    _run(study, space, 30, runner_up_peaks)
    found = [t for t in study.trials if t.value == 70.0]
    assert found and found[0].system_attrs.get(keys.SWEEP_AXIS) == "max_num_seqs"


def _tell_reference(study: optuna.Study, space: object, reference: dict[str, object],
                    slo_use: dict[str, float], peak: int) -> None:
    """The reference measured, with what the recorder sets from its replay at capacity."""
    study.enqueue_trial(reference)
    trial = study.ask()
    space.suggest(trial)  # type: ignore[attr-defined]
    trial.set_user_attr(keys.SLO_USE, slo_use)
    trial.set_user_attr(keys.PEAK_IN_FLIGHT, peak)
    trial.set_constraint("slo", -1.0)
    study.tell(trial, 50.0)


TP8_1024 = {"parallelism": "TP8", "max_num_seqs": 1024, "enable_chunked_prefill": True,
            "long_prefill_token_threshold": 0}


def test_where_tpot_bound_the_count_goes_first_and_layouts_hold_the_requests_reached(
        tmp_path: Path) -> None:
    """A reference bound by its TPOT ceiling, with 220 requests in flight at capacity: the
    count can cut the batch, so it is swept first, and each layout is judged at the smallest
    count that holds 220 requests over its ranks (not at 1024 spread over them, a count its
    engine never reaches)."""
    study, space = _sweep_study(tmp_path, text=LAYOUT_SPACE)
    _tell_reference(study, space, TP8_1024, {"ttft_p99_ms": 0.1, "tpot_p99_ms": 0.9}, 220)
    _run(study, space, 16, lambda params: 50.0)
    axes = [t.system_attrs.get(keys.SWEEP_AXIS) for t in study.trials[1:]]
    assert axes[:5] == ["max_num_seqs"] * 5, axes  # 512 ... 32 across the plateau
    layouts = {t.params["parallelism"]: t.params["max_num_seqs"] for t in study.trials
               if t.system_attrs.get(keys.SWEEP_AXIS) == "parallelism"}
    assert layouts == {"TP8+EP": 256, "DP2xTP4+EP": 128, "DP4xTP2+EP": 64, "DP8+EP": 32}


@pytest.mark.parametrize("slo_use, peak", [
    ({"ttft_p99_ms": 0.9, "tpot_p99_ms": 0.5}, 220),  # TTFT bound: fewer sequences queue more
    ({"ttft_p99_ms": 0.4, "tpot_p99_ms": 0.95}, 35),  # prefill-stalled: no count cuts 35 by half
    ({"ttft_p99_ms": 0.99, "tpot_p99_ms": 1.0}, 220),  # both at the ceiling: no TTFT to trade
])
def test_where_the_count_cannot_relieve_the_bound_the_layout_goes_first(
        tmp_path: Path, slo_use: dict[str, float], peak: int) -> None:
    study, space = _sweep_study(tmp_path, text=LAYOUT_SPACE)
    _tell_reference(study, space, TP8_1024, slo_use, peak)
    _run(study, space, 3, lambda params: 50.0)
    assert study.trials[1].system_attrs[keys.SWEEP_AXIS] == "parallelism"
    assert study.trials[1].params["parallelism"] == "TP8+EP"
    assert study.trials[1].params["max_num_seqs"] == 1024  # the deployment's count kept

"""autotune.campaign.per_path without a tuning run: the split into path campaigns, the path deployments
and their spaces, the refusals, and all-or-none publication on a database seeded through the
repository functions."""

from __future__ import annotations

from collections import Counter

import pytest

from autotune.campaign import per_path as pp
from autotune.campaign.study import CampaignRequest
from autotune.domain import optuna_keys as keys
from autotune.domain.deployment import DEMO
from autotune.domain.slo import parse_slo
from autotune.errors import ConfigError, NotFoundError, SearchSpaceError
from autotune.storage import repo
from autotune.storage.db import open_database, session_scope
from autotune.storage.models import Campaign, Publication
from autotune.traffic.stats import paths
from autotune.traffic.trace import Trace
from autotune.vocabulary import Role


def _trace(hot: int, warm: int, cold: int) -> Trace:
    """Interleaved requests: hot ones ask for <= 512 tokens; warm ones share one system prompt
    block (id 7), cold ones start with a block of their own."""
    kinds = ["hot"] * hot + ["warm"] * warm + ["cold"] * cold
    order = sorted(range(len(kinds)), key=lambda i: (i * 7919) % len(kinds))  # a fixed shuffle
    rows: list[dict[str, object]] = []
    for n, i in enumerate(order):
        kind = kinds[i]
        rows.append({"arrival_s": 10.0 + n * 0.5, "prompt_tokens": 400,
                     "output_tokens": 100 if kind == "hot" else 900,
                     "max_tokens": 256 if kind == "hot" else 2048,
                     "hash_ids": [7, 10_000 + n] if kind == "warm" else [20_000 + n],
                     "hash_block_tokens": 256})
    return Trace.from_rows("mix", rows)


def _request(trace: Trace) -> CampaignRequest:
    return CampaignRequest(deployment=DEMO, campaign="2026Q4", slo=parse_slo("ttft_p99<=2s"),
                           trace=trace, trace_ref="/traces/mix.jsonl", search_space="chat",
                           max_trials=5)


def test_hot_cold_split_folds_warm_into_cold_and_keeps_order() -> None:
    trace = _trace(hot=120, warm=30, cold=40)
    assert Counter(paths(trace)) == {"hot": 120, "warm": 30, "cold": 40}  # the fixture's mix
    plans = pp.plan_paths(trace, pp.parse_paths("hot,cold"), min_requests=50)
    assert [(p.path, p.members, p.requests, p.of_requests) for p in plans] == [
        ("hot", ("hot",), 120, 190), ("cold", ("warm", "cold"), 70, 190)]
    labels = paths(trace)
    for plan in plans:
        assert plan.trace is not None and plan.skipped is None
        want = [i for i, label in enumerate(labels) if label in plan.members]
        assert plan.trace.arrival_s[0] == 0  # shifted, as `traffic split` writes them
        assert list(plan.trace.arrival_s + trace.arrival_s[want[0]]) == pytest.approx(
            [trace.arrival_s[i] for i in want])
        assert plan.trace.digest != trace.digest
    hot_trace = plans[0].trace
    assert hot_trace is not None and max(hot_trace.budget_tokens()) <= pp.HOT_MAX_TOKENS


def test_three_paths_and_a_path_too_small_is_skipped_with_a_note() -> None:
    trace = _trace(hot=120, warm=30, cold=60)
    plans = pp.plan_paths(trace, pp.parse_paths("cold, warm,hot"), min_requests=50)
    assert [p.path for p in plans] == ["hot", "warm", "cold"]
    warm = plans[1]
    assert warm.trace is None and warm.requests == 30
    assert warm.skipped is not None and "30 requests, fewer than 50" in warm.skipped
    assert "keeps the single config" in warm.skipped
    requests = pp.path_requests(_request(trace), plans, slos={}, space=None)
    assert [r.deployment.name for r in requests] == ["demo.hot", "demo.cold"]  # warm: none


def test_no_path_big_enough_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"no path .* has the 500 requests .*hot 120, cold 70"):
        pp.plan_paths(_trace(120, 30, 40), pp.parse_paths("hot,cold"), min_requests=500)
    with pytest.raises(ConfigError, match="at least 1"):
        pp.plan_paths(_trace(120, 30, 40), pp.parse_paths("hot,cold"), min_requests=0)


@pytest.mark.parametrize("bad", ["hot", "hot,warm", "hot,cold,tepid", "", "cold"])
def test_bad_path_sets_are_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="use hot,cold .* or hot,warm,cold"):
        pp.parse_paths(bad)


def test_path_requests_spaces_slos_links_and_the_single_config() -> None:
    trace = _trace(hot=120, warm=30, cold=40)
    parent = _request(trace)
    plans = pp.plan_paths(trace, pp.parse_paths("hot,cold"))
    hot_slo = parse_slo("ttft_p99<=500ms,tpot_p99<=30ms")
    hot, cold = pp.path_requests(parent, plans, slos={"hot": hot_slo}, space=None)
    # The guide's tiers: hot is latency-sensitive (chat), cold throughput (batch).
    assert (hot.deployment.traffic_profile, hot.search_space) == ("chat", "chat")
    assert (cold.deployment.traffic_profile, cold.search_space) == ("batch", "batch")
    assert hot.slo == hot_slo and cold.slo == parent.slo
    assert hot.deployment.model_dump(exclude={"name", "traffic_profile"}) == \
        DEMO.model_dump(exclude={"name", "traffic_profile"})
    assert hot.campaign == cold.campaign == "2026Q4"
    assert hot.study_name == "demo.hot:2026Q4"
    assert cold.trace_ref == "/traces/mix.jsonl#path=cold"
    assert cold.study_attrs[keys.PATH] == {
        "path": "cold", "rule": pp.rule_of(("warm", "cold")), "requests": 70,
        "of_requests": 190, "parent_deployment": "demo", "parent_campaign": "2026Q4"}
    assert hot.max_trials == parent.max_trials  # --trials applies to each campaign
    assert hot.compare == () and hot.references == ()
    # An asked-for space applies to every path.
    assert {r.search_space for r in pp.path_requests(parent, plans, slos={},
                                                     space="default")} == {"default"}
    config = {"max_num_seqs": 16, "max_model_len": 16384}
    compared = pp.with_single_config(hot, config)
    assert [(c.role, c.config) for c in compared.compare] == [(Role.SINGLE_CONFIG, config)]
    # The path's search starts from it (a reference, so it is confirmed with the path's best).
    assert [(c.role, c.config) for c in compared.references] == [(Role.SINGLE_CONFIG, config)]
    assert pp.with_single_config(hot, None) is hot


def test_a_parent_name_too_long_for_its_path_deployments_is_refused() -> None:
    long = DEMO.model_copy(update={"name": "d" * 98})
    with pytest.raises(ConfigError, match="deployment name"):
        pp.path_deployment(long, "cold")


def _seed(url: str, *, cold_feasible: bool) -> None:
    """A parent campaign and its two path campaigns, each completed with one trial."""
    engine = open_database(url)
    with session_scope(engine) as s:
        for dep_spec, ref, feasible in (
                (DEMO, "/t.jsonl", True),
                (pp.path_deployment(DEMO, "hot"), "/t.jsonl#path=hot", True),
                (pp.path_deployment(DEMO, "cold"), "/t.jsonl#path=cold", cold_feasible)):
            dep = repo.ensure_deployment(s, dep_spec)
            when = repo.now()
            c = Campaign(deployment_id=dep.id, name="c1", slo={"ttft_p99_ms": 2000.0},
                         trace_ref=ref, trace_digest="x", backend="sim", executor="inline",
                         search_space="chat", study_name=f"{dep.name}:c1", max_trials=3, seed=0,
                         status="completed", started_at=when, finished_at=when)
            s.add(c)
            s.flush()
            repo.add_trial(s, c, number=0, role="proposed",
                           engine_config={"max_num_seqs": 64 if "hot" in dep.name else 512},
                           state="measured", feasible=feasible,
                           capacity_output_tok_s=1000.0 if feasible else 0.0,
                           capacity_rate_scale=2.0, latency={},
                           latency_recorded_rate={"requests": 77}, constraints={}, replays=[],
                           start_s=1.0, measure_s=1.0, worker={}, telemetry={})
    engine.dispose()


def test_publish_paths_is_all_or_none(migrated_sqlite: str) -> None:
    _seed(migrated_sqlite, cold_feasible=False)
    engine = open_database(migrated_sqlite)
    with pytest.raises(NotFoundError, match=r"path cold \(deployment 'demo.cold'\).*no feasible"):
        with session_scope(engine) as s:
            pp.publish_paths(s, "c1", deployment="demo", period_label=None, published_by="t",
                             note=None)
    with session_scope(engine) as s:
        assert s.query(Publication).count() == 0  # hot was not published alone
        with pytest.raises(NotFoundError, match="no per-path campaigns"):
            pp.publish_paths(s, "c1", deployment="demo.hot", period_label=None,
                             published_by="t", note=None)
    engine.dispose()


def test_publish_paths_publishes_each_path_deployment(migrated_sqlite: str) -> None:
    _seed(migrated_sqlite, cold_feasible=True)
    engine = open_database(migrated_sqlite)
    with session_scope(engine) as s:
        parent = repo.find_campaign(s, "c1", "demo")
        assert set(pp.path_campaigns(s, parent)) == {"hot", "cold"}
        pubs = pp.publish_paths(s, "c1", deployment="demo", period_label="2026Q4",
                                published_by="t", note=None)
        got = {p.deployment.name: (p.engine_config, p.period_label, p.note) for p in pubs}
    assert got == {
        "demo.hot": ({"max_num_seqs": 64}, "2026Q4",
                     "path hot of campaign 'c1' of 'demo', tuned on its 77 requests"),
        "demo.cold": ({"max_num_seqs": 512}, "2026Q4",
                      "path cold of campaign 'c1' of 'demo', tuned on its 77 requests")}
    with session_scope(engine) as s:
        # A same-named campaign of D.cold on another trace is not this campaign's path.
        cold = repo.find_campaign(s, "c1", "demo.cold")
        cold.trace_ref = "/elsewhere.jsonl#path=cold"
        s.flush()
        assert set(pp.path_campaigns(s, repo.find_campaign(s, "c1", "demo"))) == {"hot"}
    engine.dispose()


def test_a_paths_space_is_widened_to_hold_the_single_config() -> None:
    """The chat space's winner (a long-prefill cap of 256, which the batch space lacks) starts
    the cold path's search in the batch space."""
    from autotune.search.baselines import vllm_defaults
    from autotune.search.spaces.deployment import deployment_space, hold_config, space_params

    cold = DEMO.model_copy(update={"traffic_profile": "batch"})
    single = vllm_defaults(cold).merged(long_prefill_token_threshold=256, max_num_seqs=16,
                                        gpu_memory_utilization=0.97)
    batch = deployment_space("batch", cold)
    with pytest.raises(SearchSpaceError):
        space_params(batch, single, cold)
    held = hold_config(batch, single, cold)
    params = space_params(held, single, cold)
    assert (params["long_prefill_token_threshold"], params["max_num_seqs"],
            params["gpu_memory_utilization"]) == (256, 16, 0.97)
    assert held.param("long_prefill_token_threshold").choices[:2] == (0, 256)  # still in order
    assert held.param("gpu_memory_utilization").high == 0.97


def test_a_paths_winner_that_changes_numerics_is_flagged(migrated_sqlite: str) -> None:
    """In the per-path rows (`tune --per-path --json`, the table), as in the summary: the hot
    path's winner drafts (speculative decoding); the cold one's changes nothing."""
    import io

    from rich.console import Console

    from autotune.cli.json_views import path_result
    from autotune.cli.render import per_path_table

    _seed(migrated_sqlite, cold_feasible=True)
    mtp = {"method": "mtp", "num_speculative_tokens": 2}
    engine = open_database(migrated_sqlite)
    with session_scope(engine) as s:
        hot = repo.find_campaign(s, "c1", "demo.hot")
        hot.trials[0].engine_config = {"max_num_seqs": 64, "speculative_config": mtp}
        s.flush()
        rows = [pp.summarise(repo.find_campaign(s, "c1", f"demo.{path}"),
                             pp.PathPlan(path, (path,), 77, 154, None), "demo", [])
                for path in ("hot", "cold")]
    engine.dispose()
    hot_row, cold_row = (path_result(r) for r in rows)
    [change] = hot_row["winner_accuracy_affecting"]
    assert (change["name"], change["value"]) == ("speculative_config", mtp)
    assert "rejection sampling" in change["why"]
    assert cold_row["winner_accuracy_affecting"] == []
    console = Console(width=160, file=io.StringIO(), color_system=None)
    console.print(per_path_table(rows))
    [line] = [x for x in console.file.getvalue().splitlines() if "changes numerics" in x]
    assert 'speculative_config={"method": "mtp"' in line and line.rstrip(" │").endswith("-")

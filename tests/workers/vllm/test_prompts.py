"""The prompts the vllm backend sends: no replay on an engine reuses an earlier one's, so the
prefix cache never serves a measured rung from a previous rung's prompts."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from autotune.domain.engine_config import EngineConfig
from autotune.measure.tiny_model import make_tiny_model
from autotune.traffic.trace import Trace
from autotune.workers.vllm.backend import VllmBackend

ROWS = [{"arrival_s": 0.1 * i, "prompt_tokens": 96, "output_tokens": 4, "hash_ids": [7, 100 + i],
         "hash_block_tokens": 32} for i in range(4)]


def _prompts(backend: VllmBackend, trace: Trace) -> list[list[int]]:
    plan = backend._plan(trace, 1.0, backend._prompt_seed(0))
    return [list(p) for p in plan.prompts]  # type: ignore[arg-type]


def test_each_replay_on_an_engine_gets_prompts_of_its_own(tmp_path: Path) -> None:
    model = make_tiny_model(tmp_path / "tiny")
    backend = VllmBackend(model_path=str(model))
    backend._engine = SimpleNamespace(base_url="http://127.0.0.1:9")  # type: ignore[assignment]
    backend._config = EngineConfig(max_model_len=512)
    trace = Trace.from_rows("shared", ROWS)
    first, second = _prompts(backend, trace), _prompts(backend, trace)
    # Within a replay the shared block (hash 7) is the same tokens in every request ...
    assert all(p[:32] == first[0][:32] for p in first)
    assert len({tuple(p[32:64]) for p in first}) == 4
    # ... and no block of one replay comes back in the next.
    blocks = {tuple(p[i:i + 32]) for p in first for i in (0, 32, 64)}
    assert not blocks & {tuple(p[i:i + 32]) for p in second for i in (0, 32, 64)}

"""`autotune models list` says which bundled configs the simulator can model, and why not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.cli.main import models_list
from autotune.domain import model_sources


def test_a_bundled_config_the_simulator_cannot_model_is_listed_with_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    llama = json.loads((model_sources.VENDORED / "meta-llama--Llama-3.1-8B_config.json")
                       .read_text())
    (tmp_path / "acme--Dense-8B_config.json").write_text(json.dumps(llama))
    hybrid = {**llama, "full_attention_interval": 4, "linear_conv_kernel_dim": 4}
    (tmp_path / "acme--Hybrid-8B_config.json").write_text(json.dumps(hybrid))
    monkeypatch.setattr(model_sources, "config_folders", lambda: [tmp_path])
    model_sources.bundled_ids.cache_clear()
    model_sources.resolve.cache_clear()
    try:
        models_list(as_json=True)
    finally:
        model_sources.bundled_ids.cache_clear()
        model_sources.resolve.cache_clear()
    listed = json.loads(capsys.readouterr().out)
    assert set(listed["bundled_configs"]) == {"acme/Dense-8B", "acme/Hybrid-8B"}
    assert list(listed["not_simulated"]) == ["acme/Hybrid-8B"]
    reason = listed["not_simulated"]["acme/Hybrid-8B"]
    assert reason.startswith("full_attention_interval, linear_conv_kernel_dim: layers other "
                             "than attention") and str(tmp_path) not in reason

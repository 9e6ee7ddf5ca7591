"""Every config the search spaces can produce goes through vLLM's own argument parser.

vLLM runs in its own venv (`make engine-venv`); AUTOTUNE_ENGINE__PYTHON names its interpreter.
The check parses both `to_cli_args()` and `to_yaml()` and compares the parsed values, so a flag
vLLM does not know, or a YAML key it silently drops, fails here.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path

import pytest

from autotune.domain.deployment import DEMO, DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.search.baselines import guide_heuristic, vllm_defaults
from autotune.search.spaces.deployment import deployment_space, engine_args, load_search_space
from autotune.search.spaces.load import builtin_names
from tests.conftest import engine_python

pytestmark = pytest.mark.integration

PARSE = r"""
import json, sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
cases = json.load(open(sys.argv[1]))
parser = make_arg_parser(FlexibleArgumentParser())
# `vllm serve`'s parser as vllm/entrypoints/cli/main.py builds it: the top-level parser reads
# the config file, not the serve subparser (which knows the engine's flags).
serve = FlexibleArgumentParser()
ServeSubcommand().subparser_init(serve.add_subparsers(dest="subparser"))
out = []
for case in cases:
    names = case["names"]
    a = vars(parser.parse_args(case["cli"]))
    b = vars(parser.parse_args(["--config", case["yaml_path"]]))
    c = vars(serve.parse_args(["serve", "--config", case["yaml_path"]]))
    out.append({"cli": {n: a[n] for n in names}, "yaml": {n: b[n] for n in names},
                "serve": {n: c[n] for n in names}, "model": c["model"]})
print("RESULT " + json.dumps(out))
"""


_engine_python = engine_python


# A dense model on 8 GPUs: the spaces' DP x TP layouts are active there (DEMO's TEP and DEP).
DENSE = DeploymentSpec(name="dense", model="Llama-3.1-8B", gpu="H100-80GB", gpu_count=8,
                       tensor_parallel_size=8, max_model_len=8192)


def _configs() -> list[EngineConfig]:
    """Every value of every parameter of every built-in space (conditional ones included, bound
    to a MoE and a dense deployment), plus the baselines."""
    configs = [vllm_defaults(DEMO), guide_heuristic(DEMO)]
    base = guide_heuristic(DEMO)
    for name in builtin_names():
        for dep in (DEMO, DENSE):
            for p in deployment_space(name, dep).params:
                for value in p.grid() if p.type != "int" else (int(p.low), int(p.high), 100):
                    configs.append(base.merged(**engine_args({p.name: value})))
    # Arguments no built-in space tunes (pipeline parallelism) or tunes only in part (chat-
    # speculative offers mtp drafting only).
    configs += [base.merged(pipeline_parallel_size=2),
                base.merged(speculative_config={"method": "mtp", "num_speculative_tokens": 3}),
                base.merged(async_scheduling=False, speculative_config={
                    "method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4,
                    "prompt_lookup_min": 2})]
    space = load_search_space("chat")
    bools = [p.name for p in space.params if p.type == "bool"]
    for combo in itertools.product((True, False), repeat=len(bools)):
        configs.append(base.merged(**dict(zip(bools, combo, strict=True))))
    return configs


def test_vllm_parser_accepts_every_config_as_cli_and_yaml(tmp_path: Path) -> None:
    python = _engine_python()
    configs = _configs()
    cases = []
    for i, config in enumerate(configs):
        path = tmp_path / f"c{i}.yaml"
        path.write_text(config.to_yaml(model="deepseek-ai/DeepSeek-V4-Flash"))
        cases.append({"names": list(config.explicit()), "cli": config.to_cli_args(),
                      "yaml_path": str(path)})
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    proc = subprocess.run([python, "-c", PARSE, str(tmp_path / "cases.json")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    results = json.loads(line.removeprefix("RESULT "))
    for config, parsed in zip(configs, results, strict=True):
        expected = config.explicit()
        assert parsed["cli"] == expected, config.to_cli_args()
        assert parsed["yaml"] == expected, config.to_yaml()
        assert parsed["serve"] == expected, config.to_yaml()
        assert parsed["model"] == "deepseek-ai/DeepSeek-V4-Flash"


def test_vllm_parser_rejects_a_removed_flag() -> None:
    """The same parser refuses what REMOVED_ARGS refuses, so the list is not stale."""
    python = _engine_python()
    code = ("from vllm.entrypoints.launchers.cli_args import make_arg_parser\n"
            "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
            "make_arg_parser(FlexibleArgumentParser()).parse_args(['--swap-space', '4'])")
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "unrecognized arguments: --swap-space" in proc.stderr


SERVE = r"""
import json, sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
# `vllm serve`'s own parser, as vllm/entrypoints/cli/main.py builds it.
parser = FlexibleArgumentParser()
ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
out = {}
for name, argv in json.load(open(sys.argv[1])).items():
    try:
        a = parser.parse_args(argv)
    except ValueError as exc:
        out[name] = {"error": str(exc)}
        continue
    # ServeSubcommand.cmd: a positional model_tag wins over --model (and the config's model:).
    out[name] = {"model": a.model_tag if a.model_tag is not None else a.model,
                 "block_size": a.block_size, "enable_prefix_caching": a.enable_prefix_caching}
print("RESULT " + json.dumps(out))
"""


def test_vllm_serve_runs_the_published_yaml_as_it_is(tmp_path: Path) -> None:
    """`vllm serve --config config.yaml` takes the model from the YAML's `model:`; without it
    vLLM refuses to start; a positional model still wins over it."""
    python = _engine_python()
    config = EngineConfig(block_size=32, enable_prefix_caching=False)
    served, bare = tmp_path / "served.yaml", tmp_path / "bare.yaml"
    served.write_text(config.to_yaml(model="deepseek-ai/DeepSeek-V4-Flash"))
    bare.write_text(config.to_yaml())
    cases = {"served": ["serve", "--config", str(served)],
             "positional": ["serve", "/models/local", "--config", str(served)],
             "bare": ["serve", "--config", str(bare)]}
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    proc = subprocess.run([python, "-c", SERVE, str(tmp_path / "cases.json")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    parsed = json.loads(line.removeprefix("RESULT "))
    engine_args = {"block_size": 32, "enable_prefix_caching": False}
    assert parsed["served"] == {"model": "deepseek-ai/DeepSeek-V4-Flash", **engine_args}
    assert parsed["positional"] == {"model": "/models/local", **engine_args}
    assert "No model specified" in parsed["bare"]["error"]

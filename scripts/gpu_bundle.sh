#!/usr/bin/env bash
# Builds what scripts/gpu_check.sh needs on a lent GPU machine that has CUDA PyTorch but no vLLM
# and no network: the wheels of vLLM and of the packages it and autotune need that the
# machine's image lacks, and the trace, split into parts each small enough to carry in one
# call. Run here, with network:
#   scripts/gpu_bundle.sh [OUT]            (default .gpu-bundle; 2 minutes, 194 MiB in 4 parts)
# Then carry OUT/p1, OUT/p2, ... in consecutive calls, each within the machine's warm window
# (30 s after the last call returns; a part left there stays while the machine is held), the
# last one running: eval "$(scripts/gpu_bundle.sh --install OUT)" && scripts/gpu_check.sh
# How long each call took on an H200: docs/benchmarks/gpu.md.
# Env: VLLM_VERSION (0.21.0: the last one built for the image's torch 2.11 and CUDA 13),
#      PYTHON312 (python3.12: the image's Python, for resolving),
#      GPU_IMAGE_PACKAGES (the image's package names; default scripts/gpu_image_packages.txt),
#      PART_MIB (59: the working tree that travels may be 64 MiB, the repo's files included).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--install" ]]; then  # on the GPU machine
  out="${2:-.gpu-bundle}"
  cat "$out"/p*/part-* | tar -x -C /tmp
  (cd /tmp/gpu-bundle && sha256sum -c --quiet SHA256SUMS)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site /tmp/gpu-bundle/*.whl
  echo "export PYTHONPATH=/tmp/site AUTOTUNE_TRACES_DIR=/tmp/gpu-bundle/traces"
  exit 0
fi

out=$(realpath -m "${1:-.gpu-bundle}")
vllm_version="${VLLM_VERSION:-0.21.0}"
image_list="${GPU_IMAGE_PACKAGES:-scripts/gpu_image_packages.txt}"
part_mib="${PART_MIB:-59}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wheels="$work/gpu-bundle"
mkdir -p "$wheels/traces"
# 1. Everything vLLM and autotune need, resolved by a Python 3.12 that believes it holds the
# image's torch stack (stub metadata, no files: resolving torch itself asks for CUDA wheels of
# versions PyPI no longer has) and pinned to the image's versions where they are known; the rest
# of the image's packages are taken as they are there.
"${PYTHON312:-python3.12}" -m venv "$work/venv"
site=$("$work/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
for stub in torch==2.11.0 torchaudio==2.11.0 torchvision==0.26.0 triton==3.6.0; do
  info="$site/${stub%%==*}-${stub##*==}.dist-info"
  mkdir -p "$info"
  printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' "${stub%%==*}" "${stub##*==}" \
    > "$info/METADATA"
  : > "$info/RECORD"
done
python3 - > "$work/autotune-deps.txt" <<'EOF'
import tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["dependencies"]))
EOF
printf '%s\n' transformers==5.17.0 tokenizers==0.23.2 huggingface-hub==1.33.0 \
  safetensors==0.8.0 > "$work/image-pins.txt"
"$work/venv/bin/pip" install -q --dry-run --only-binary=:all: --report "$work/report.json" \
  -c "$work/image-pins.txt" "vllm==$vllm_version" -r "$work/autotune-deps.txt"

# 2. What the image lacks.
python3 - "$work/report.json" "$image_list" > "$work/wanted.txt" <<'EOF'
import json, re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
image = {norm(line.split("#")[0].strip()) for line in open(sys.argv[2]) if line.split("#")[0].strip()}
skip = {"ray"}  # 70 MB, and only `--executor ray` imports it: the checks run trials inline
# Kernel libraries vLLM loads only for the backends that use them (FlashInfer is replaced by
# VLLM_USE_FLASHINFER_SAMPLER=0 in gpu_check.sh; a bf16 dense model uses FA3); together some
# GB, more than a lease's transfers allow.
skip |= {"flashinfer-python", "flashinfer-cubin", "tilelang", "nvidia-cutlass-dsl",
         "quack-kernels", "tokenspeed-mla", "cuda-tile", "fastsafetensors",
         "nvidia-cudnn-frontend",
         "tokenspeed-triton", "z3-solver"}  # what tokenspeed-mla and tilelang pull in
# vLLM 0.21 asks for xgrammar 0.2.3 (43 MB); 0.2.9 (1 MB, with the apache-tvm-ffi it needs
# in place of the pinned 0.1.9) serves a dense model too (docs/benchmarks/gpu.md), installed
# without dependency checks as everything here is.
swap = {"xgrammar": "0.2.9", "apache-tvm-ffi": "0.1.11"}
for item in json.load(open(sys.argv[1]))["install"]:
    name, version = norm(item["metadata"]["name"]), item["metadata"]["version"]
    if name not in image | skip and not name.startswith(("nvidia-", "cuda-")):
        print(f"{name}=={swap.get(name, version)}")
EOF
echo "gpu_bundle: $(wc -l < "$work/wanted.txt") packages the image lacks" >&2
"$work/venv/bin/pip" download -q --no-deps --only-binary=:all: -d "$wheels" \
  -r "$work/wanted.txt"

# 3. vLLM without the kernels a bf16 dense model on Hopper does not load: FlashAttention 2 (FA3
# serves sm90), the fused-MoE ops (imported under suppress(ImportError)) and FlashMLA. That
# takes its 237 MiB wheel to 127; RECORD is rewritten to match.
python3 - "$wheels"/vllm-*.whl <<'EOF'
import re, sys, zipfile
from pathlib import Path
path = Path(sys.argv[1])
drop = re.compile(r"(_vllm_fa2_C|_moe_C|_flashmla_C|_flashmla_extension_C)\.abi3\.so$")
src = zipfile.ZipFile(path)
kept = [i for i in src.infolist() if not drop.search(i.filename)]
tmp = path.with_suffix(".tmp")
with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
    for info in kept:
        data = src.read(info)
        if info.filename.endswith(".dist-info/RECORD"):
            data = "".join(line for line in data.decode().splitlines(keepends=True)
                           if not drop.search(line.split(",")[0])).encode()
        dst.writestr(info, data)
tmp.replace(path)
print(f"gpu_bundle: vllm wheel {path.stat().st_size / 2**20:.0f} MiB, "
      f"{len(src.infolist()) - len(kept)} kernels dropped", file=sys.stderr)
EOF
cp "${AUTOTUNE_TRACES_DIR:-traces}/azure_llm_2023_code.csv" "$wheels/traces/"
(cd "$wheels" && sha256sum ./*.whl traces/* > SHA256SUMS)

# 4. Parts of at most PART_MIB, one folder each (one folder a call).
rm -rf "$out"
mkdir -p "$out"
tar -C "$work" -c gpu-bundle | split -b "${part_mib}M" -d -a 1 - "$work/part-"
i=1
for part in "$work"/part-*; do
  mkdir -p "$out/p$i"
  mv "$part" "$out/p$i/part-$i"
  i=$((i + 1))
done
du -sh "$out"/p* >&2

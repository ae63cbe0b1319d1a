#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The CUDA code paths on a Linux machine with an NVIDIA GPU, in one run (docs/gpu.md holds its measured table):
#   1. every cuda-labelled test: the log-prob, linear and loss kernels' device paths against the CPU, blocked
#      attention and the model, the sampler on the GPU, GrpoTrainer's step and checkpoint there, ProcessGroup on NCCL
#   2. one GRPO step of the Qwen2.5-0.5B-shaped model (random weights it makes itself; 8 completions of 128 + 512
#      tokens; NCCL with world size 1) in fp32, bf16 and bf16 with checkpointing, beside the plain-LibTorch eager
#      step: generation tok/s, the log-prob passes, the update, peak GPU memory, and the GPU's bf16 and fp32
#      matrix-product rates at the model's shapes as the bound (benchmarks/bench_step.cpp --device cuda)
#
# Needs: nvidia-smi and a driver, a python3 whose torch is a CUDA build (or GRPO_PYTHON), and either
#   - grpo's build dependencies (scripts/install-deps.sh on Debian) with a CUDA toolkit and CMake: it builds
#     test_cuda and bench_step in build-gpu/ against that python's torch (GRPO_TORCH=pip), or
#   - --bundle DIR, made by scripts/gpu-bundle.sh on a machine that builds grpo, against the same torch version: for
#     a GPU machine with no internet and none of grpo's packages.
# Takes about 3 minutes with a bundle on an H100/H200, plus the build without one (~4 minutes on 16 cores).
# Usage: scripts/gpu-check.sh [--bundle DIR] [--layers N] [--completion N]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bundle="" layers=24 completion=512
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle="$(cd "$2" && pwd)"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --completion) completion="$2"; shift 2 ;;
    *) echo "gpu-check: unknown argument $1 (--bundle DIR, --layers N, --completion N)" >&2; exit 2 ;;
  esac
done
python="${GRPO_PYTHON:-$(command -v python3)}"

nvidia-smi -L >/dev/null 2>&1 || { echo "gpu-check: nvidia-smi sees no GPU" >&2; exit 1; }
read -r torch_version torch_lib cuda_ok <<<"$("$python" -c '
import os, torch
print(torch.__version__, os.path.join(os.path.dirname(torch.__file__), "lib"), int(torch.cuda.is_available()))')"
[ "$cuda_ok" = 1 ] || { echo "gpu-check: $python's torch $torch_version sees no GPU (a CPU build?)" >&2; exit 1; }
echo "gpu-check: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader); torch $torch_version"

if [ -n "$bundle" ]; then
  built="$(cat "$bundle/TORCH_VERSION")"
  [ "${built%%+*}" = "${torch_version%%+*}" ] ||
    { echo "gpu-check: the bundle was built against torch $built, this machine has $torch_version" >&2; exit 1; }
  bin="$bundle/bin"
  export LD_LIBRARY_PATH="$bundle/lib:$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  build="$root/build-gpu"
  start=$SECONDS
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRPO_TORCH=pip -DGRPO_PYTHON="$python" \
        -DGRPO_CUDA=ON -DGRPO_BUILD_EXAMPLES=OFF -DGRPO_BUILD_TOOLS=OFF -DGRPO_INSTALL=OFF >/dev/null
  cmake --build "$build" -j "$(nproc)" --target test_cuda bench_step
  echo "gpu-check: built in $((SECONDS - start)) s"
  mkdir -p "$build/gpu-check/bin"
  cp "$build/tests/test_cuda" "$build/benchmarks/bench_step" "$build/gpu-check/bin/"
  bin="$build/gpu-check/bin"
fi

# The step is timed even when a test fails (one run says as much as it can); the exit status says whether all passed.
echo "== the cuda-labelled tests"
start=$SECONDS
tests=0
"$bin/test_cuda" "[cuda]" --reporter compact --durations yes || tests=$?
echo "gpu-check: the cuda-labelled tests $([ $tests -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - start)) s"

echo "== one GRPO step at Qwen2.5-0.5B's shape on the GPU (bench_step --device cuda)"
"$bin/bench_step" --device cuda --layers "$layers" --completion "$completion" \
                  --only eager_fp32,fp32,bf16,bf16_ckpt,bf16_lora
exit "$tests"

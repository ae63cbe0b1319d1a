#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packs what scripts/gpu-check.sh runs, for a GPU machine that cannot build grpo itself (no internet, none of grpo's
# Debian packages; it has a CUDA torch, the toolkit and a driver):
#   DIR/bin/test_cuda, DIR/bin/bench_step   built here against the torch wheel of .venv (GRPO_TORCH=pip, CUDA code on)
#   DIR/lib/*                               the shared libraries they need that a torch machine lacks (yaml-cpp,
#                                           simdjson, FLINT, PCRE2, curl, ...): their ldd closure, less glibc, the C++
#                                           runtime, and what the torch wheel and NVIDIA's packages provide
#   DIR/TORCH_VERSION                       the wheel's version: gpu-check.sh refuses a machine whose torch differs
# Usage: scripts/gpu-bundle.sh DIR     (DIR is emptied first; about 20 MB)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/gpu-bundle.sh DIR}"
build="${GRPO_BUILD_DIR:-$root/build}"

GRPO_TORCH=pip "$root/scripts/build.sh" test_cuda bench_step
grep -q '^GRPO_CUDA:BOOL=ON' "$build/CMakeCache.txt" ||
  { echo "gpu-bundle: $build was configured without GRPO_CUDA (a CPU-only LibTorch)" >&2; exit 1; }
python="$(sed -n 's/^GRPO_PYTHON:FILEPATH=//p' "$build/CMakeCache.txt")"
torch_lib="$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null)"
site="$(dirname "$(dirname "$torch_lib")")"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
cp "$build/tests/test_cuda" "$build/benchmarks/bench_step" "$out/bin/"
"$python" -c 'import torch; print(torch.__version__)' 2>/dev/null >"$out/TORCH_VERSION"
# Every library ldd resolves outside glibc, the compiler runtime, the torch wheel and NVIDIA's wheels.
for binary in "$out"/bin/*; do
  LD_LIBRARY_PATH="$torch_lib" ldd "$binary"
done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
  case "$lib" in
    "$site"/*) ;;                                                            # torch, nvidia-*
    */libc.so.*|*/libm.so.*|*/libpthread.so.*|*/libdl.so.*|*/librt.so.*|*/libresolv.so.*|*/libutil.so.*) ;;  # glibc
    */ld-linux*|*/libstdc++.so.*|*/libgcc_s.so.*|*/libgomp.so.*) ;;           # the compiler's runtime
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
echo "gpu-bundle: $out ($(du -sh "$out" | cut -f1)): $(ls "$out/lib" | wc -l) libraries, torch $(cat "$out/TORCH_VERSION")"

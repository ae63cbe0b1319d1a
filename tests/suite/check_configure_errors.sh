#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Bad LibTorch configurations stop CMake's configure with a message naming the setting (cmake/TorchPackage.cmake):
# GRPO_CUDA=ON with a CPU-only LibTorch, a torch wheel whose C++ ABI differs from the compiler's, a GRPO_PYTHON that
# does not exist, an unknown GRPO_TORCH, and a LibTorch older than 1.13. Each case configures a fresh build directory
# and must fail with its message. Usage: check_configure_errors.sh SOURCE_DIR WORK_DIR
set -euo pipefail
source_dir="$1" work="$2"
rm -rf "$work" && mkdir -p "$work"
status=0
expect_failure() {  # NAME MESSAGE CMAKE-ARGS...
  local name="$1" message="$2"
  shift 2
  local out
  if out="$(cmake -S "$source_dir" -B "$work/$name" -DGRPO_BUILD_TESTS=OFF -DGRPO_BUILD_BENCHMARKS=OFF \
                  -DGRPO_BUILD_EXAMPLES=OFF -DGRPO_BUILD_TOOLS=OFF "$@" 2>&1)"; then
    echo "FAIL: $name: configure succeeded"
    status=1
  elif ! grep -qF -- "$message" <<<"$(tr -s ' \n' ' ' <<<"$out")"; then
    echo "FAIL: $name: the error does not say '$message':"
    echo "$out" | tail -15
    status=1
  else
    echo "ok: $name: $message"
  fi
}

# A "python" whose torch wheel reports the old C++ ABI (as wheels before torch 2.6 did).
cat >"$work/old-abi-python" <<'PY'
#!/bin/sh
printf '%s\n0\n' "$(dirname "$0")"
PY
chmod +x "$work/old-abi-python"
# A LibTorch package that says it is 1.12.
mkdir -p "$work/torch-1.12"
echo 'set(TORCH_FOUND TRUE)' >"$work/torch-1.12/TorchConfig.cmake"
printf 'set(PACKAGE_VERSION 1.12.1)\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n' >"$work/torch-1.12/TorchConfigVersion.cmake"

expect_failure cuda-on-cpu-libtorch "GRPO_CUDA=ON, but LibTorch" -DGRPO_TORCH=system -DGRPO_CUDA=ON
expect_failure wheel-abi "was built with _GLIBCXX_USE_CXX11_ABI=0, the compiler" -DGRPO_TORCH=pip \
               -DGRPO_PYTHON="$work/old-abi-python"
expect_failure missing-python "GRPO_TORCH=pip: GRPO_PYTHON=$work/none does not exist" -DGRPO_TORCH=pip \
               -DGRPO_PYTHON="$work/none"
expect_failure unknown-torch "GRPO_TORCH=conda: expected system or pip" -DGRPO_TORCH=conda
expect_failure old-libtorch "is older than 1.13, the oldest grpo supports" -DGRPO_TORCH=system -DTorch_DIR="$work/torch-1.12"
exit "$status"

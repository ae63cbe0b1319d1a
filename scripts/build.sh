#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, configures a Release build in $GRPO_BUILD_DIR (default build/) and builds the given
# targets (all when none). Used by demo.sh and test.sh.
# $GRPO_TORCH picks the LibTorch (cmake/TorchPackage.cmake): pip (default: the torch wheel install-deps.sh puts in
# .venv, LibTorch 2.x with CUDA) or system (Debian's libtorch-dev 1.13, CPU). A build directory configured for the
# other one is configured anew.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${GRPO_BUILD_DIR:-$root/build}"
jobs="${GRPO_JOBS:-$(nproc)}"
torch="${GRPO_TORCH:-pip}"

"$root/scripts/install-deps.sh"
launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=)  # none, also in a build directory configured with ccache before
# ccache (install-deps.sh installs it) makes rebuilds of unchanged translation units near free, in this checkout and
# in another one (CI's clone): paths are hashed relative to the checkout, and the only absolute paths of the tests are
# in tests/support/test_paths.cpp. Measured 2 December: a clean clone's whole build.sh after this checkout's build,
# 3 min 50 s (214 of 218 compiles reused, the test files that use the precompiled header included). Those hit only
# while the cache still holds the .gch they were compiled with: GCC writes different bytes each time it compiles the
# same header, and ccache hashes the .gch a file uses (sloppiness pch_defines,time_macros and -fpch-preprocess:
# ccache's manual, "Precompiled headers"). GRPO_CCACHE=0 builds without it.
if [ "${GRPO_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$root"
  export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
fi
if [ -f "$build/CMakeCache.txt" ] && ! grep -qx "GRPO_TORCH:STRING=$torch" "$build/CMakeCache.txt"; then
  echo "build: $build was configured for another LibTorch; configuring it anew for GRPO_TORCH=$torch"
  rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
fi
# Quiet unless it fails; the one line that says which LibTorch and which CUDA code paths this build has is shown.
if ! configure_log="$(cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRPO_TORCH="$torch" \
                            "${launcher[@]}" 2>&1)"; then
  echo "$configure_log" >&2
  exit 1
fi
grep '^-- grpo:' <<<"$configure_log" || true
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"

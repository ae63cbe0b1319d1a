#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, configures a Release build in $GRPO_BUILD_DIR (default build/) and builds the given
# targets (all when none). Used by demo.sh and test.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${GRPO_BUILD_DIR:-$root/build}"
jobs="${GRPO_JOBS:-$(nproc)}"

"$root/scripts/install-deps.sh"
launcher=()
# ccache, when installed, makes rebuilds of unchanged translation units (and other checkouts under the same base
# directory) near free; it is optional and not installed by install-deps.sh.
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"

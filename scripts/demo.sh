#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, builds (Release) and runs the main demo: the smallest complete GRPO loop, which learns
# a toy counting task in seconds on a CPU.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${GRPO_BUILD_DIR:-$root/build}"
jobs="${GRPO_JOBS:-$(nproc)}"

"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$jobs" --target minimal_loop
exec "$build/examples/minimal_loop" "$@"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, builds everything (Release) and runs the whole test suite with ctest.
# Extra arguments go to ctest (e.g. -L loss, -R install).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/build.sh"
cd "${GRPO_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "${GRPO_JOBS:-$(nproc)}" "$@"

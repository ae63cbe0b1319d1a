#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, builds (Release) and runs the main demo: the smallest complete GRPO loop, which learns
# a toy counting task in seconds on a CPU.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/build.sh" minimal_loop
exec "${GRPO_BUILD_DIR:-$root/build}/examples/minimal_loop" "$@"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, builds everything (Release) and runs the whole test suite with ctest
# (scripts/run-tests.sh: skipped tests are listed by name, and fail the run under CI=true).
# Extra arguments go to ctest (e.g. -L loss, -R install).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/build.sh"
exec "$root/scripts/run-tests.sh" "$@"

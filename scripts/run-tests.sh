#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs ctest in the build directory ($GRPO_BUILD_DIR, default build/) with the given arguments, then lists by name
# the tests ctest reported as skipped (a missing dependency: the reference tokenizers, a working sandbox) with the
# reason each printed. A skipped test never counts as passed: under CI=true any skip fails the run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${GRPO_BUILD_DIR:-$root/build}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

# The cuda label's tests need a GPU: without one visible (nvidia-smi), they are left out, unless the arguments choose
# labels themselves (-L / -LE).
args=("$@")
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; } &&
   [[ " $* " != *" -L "* && " $* " != *" -LE "* ]]; then
  echo "run-tests: no GPU visible: the tests labelled cuda are left out"
  args+=(-LE '^cuda$')
fi

status=0
ctest --output-on-failure -j "${GRPO_JOBS:-$(nproc)}" "${args[@]}" 2>&1 | tee "$log" || status=$?

# ctest's summary lists them as "<n> - <name> (Skipped)"; each test printed "GRPO_TEST_SKIPPED: <reason>".
skipped="$(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$log")"
if [ -n "$skipped" ]; then
  echo
  echo "run-tests: $(grep -c . <<<"$skipped") test(s) did not run because a dependency is missing:"
  sed 's/^/  /' <<<"$skipped"
  if [ -f Testing/Temporary/LastTest.log ]; then
    echo "run-tests: reasons given:"
    grep -ho 'GRPO_TEST_SKIPPED: .*' Testing/Temporary/LastTest.log | sort -u | sed 's/^GRPO_TEST_SKIPPED: /  /'
  fi
  if [ "${CI:-}" = true ]; then
    echo "run-tests: CI=true: a skipped test is a failure (scripts/install-deps.sh installs what the tests need)" >&2
    [ "$status" -ne 0 ] || status=1
  fi
fi
exit "$status"

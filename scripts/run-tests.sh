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

# Unless the arguments choose labels themselves (-L / -LE): the learning_controls label (each learning test run again
# with the learning rate at 0, where it must fail: 20 minutes of CPU; run it with -L learning_controls when a learning
# test or its threshold changes) is left out, and so is the cuda label's tests when no GPU is visible (nvidia-smi).
args=("$@")
if [[ " $* " != *" -L "* && " $* " != *" -LE "* ]]; then
  excluded=learning_controls
  if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
    echo "run-tests: no GPU visible: the tests labelled cuda are left out"
    excluded="cuda|$excluded"
  fi
  echo "run-tests: left out: the labels $excluded (choose labels with -L to run them)"
  args+=(-LE "^($excluded)\$")
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

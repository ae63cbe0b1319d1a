#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The suite's honesty, checked on itself (ctest: suite/…):
#  1. no test reads a folder outside the repository: nothing under tests/ names ../shared or GRPO_SHARED_DIR, and
#     the data the tests read is in tests/data;
#  2. a test whose dependency is missing is reported as skipped, by name, never as passed: the tests that need the
#     reference tokenizers run through scripts/run-tests.sh with an empty tokenizer folder ($GRPO_TOKENIZER_DIR, as
#     where a user points the tests elsewhere); run-tests.sh must list them and exit 0, and exit non-zero under CI=true.
# The tests run in a CTest project of their own (a scratch folder including test_text's discovered tests), so this
# nested ctest never writes the outer run's Testing/ logs.
# Usage: check_skips_reported.sh <source dir> <build dir>
set -euo pipefail
source_dir="$1"
build_dir="$2"
fail() { echo "check_skips_reported: $*" >&2; exit 1; }

# 1. Data inside the repository.
if grep -rn --include='*.cpp' --include='*.hpp' --include='*.txt' --include='*.cmake' -e '\.\./shared' -e 'GRPO_SHARED_DIR' \
     "$source_dir/tests" "$source_dir/CMakeLists.txt" | grep -v 'tests/suite/'; then
  fail "the lines above read data outside the repository"
fi
for file in conformance/math_verify_cases.jsonl datasets/roll_math_benchmarks.jsonl README.md; do
  [ -f "$source_dir/tests/data/$file" ] || fail "tests/data/$file is missing"
done

# 2. Skips are reported.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
shopt -s nullglob
includes=("$build_dir"/tests/test_text_include-*.cmake)
[ ${#includes[@]} -gt 0 ] || fail "no discovered test_text tests under $build_dir/tests"
include="${includes[0]}"
echo "include(\"$include\")" >"$work/CTestTestfile.cmake"
mkdir "$work/no-tokenizers"
filter='Qwen3 tokenizer.json: ids identical|qwen3 chat ids equal'
run() { env -u CI GRPO_TOKENIZER_DIR="$work/no-tokenizers" GRPO_BUILD_DIR="$work" GRPO_JOBS=1 "$@" \
          "$source_dir/scripts/run-tests.sh" -R "$filter" >"$work/out.txt" 2>&1; }

status=0
run || status=$?
cat "$work/out.txt"
[ "$status" -eq 0 ] || fail "without CI, skipped tests must not fail the run (exit $status)"
grep -q '2 test(s) did not run' "$work/out.txt" || fail "run-tests.sh did not count the 2 skipped tests"
grep -q 'text/Qwen3 tokenizer.json: ids identical' "$work/out.txt" || fail "the skipped tokenizer test is not named"
grep -q 'text/qwen3 chat ids equal' "$work/out.txt" || fail "the skipped chat test is not named"
grep -q 'reference tokenizer qwen3 is not installed' "$work/out.txt" || fail "the reason is not printed"
grep -q '(Skipped)' "$work/out.txt" || fail "ctest did not report the tests as skipped"

status=0
run CI=true || status=$?
cat "$work/out.txt"
[ "$status" -ne 0 ] || fail "under CI=true a skipped test must fail the run"
grep -q 'CI=true: a skipped test is a failure' "$work/out.txt" || fail "no CI=true message"
echo "check_skips_reported: ok"

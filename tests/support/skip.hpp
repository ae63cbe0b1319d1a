// SPDX-License-Identifier: Apache-2.0
// A test that cannot run here because a dependency is missing (the reference tokenizers, a working sandbox) says
// so: it prints the skip marker and returns. tests/CMakeLists.txt gives every test the SKIP_REGULAR_EXPRESSION that
// matches the marker, so ctest reports the test as skipped, never as passed, and scripts/run-tests.sh lists the
// skipped tests by name and fails under CI=true. Missing data is never a skip: every file a test reads is in the
// repository (tests/data) and its absence is a failure.
#pragma once

#include <iostream>
#include <string_view>

namespace grpo::testing {

/// The marker ctest matches (tests/CMakeLists.txt, SKIP_REGULAR_EXPRESSION); followed by the reason.
inline constexpr std::string_view kSkipMarker = "GRPO_TEST_SKIPPED:";

/// Prints "GRPO_TEST_SKIPPED: <reason>" on its own line. The caller returns at once (GRPO_SKIP does both): a test
/// that goes on to fail would still be reported as skipped.
inline void report_skip(std::string_view reason) { std::cout << '\n' << kSkipMarker << ' ' << reason << std::endl; }

}  // namespace grpo::testing

/// Reports the test as skipped for `reason` (a string) and returns from the test case.
#define GRPO_SKIP(reason)                    \
  do {                                       \
    ::grpo::testing::report_skip(reason);    \
    return;                                  \
  } while (false)

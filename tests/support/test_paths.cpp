// SPDX-License-Identifier: Apache-2.0
// The one test file compiled with absolute paths (GRPO_PATH_* definitions, tests/CMakeLists.txt): see test_paths.hpp.
#include <support/test_paths.hpp>

namespace grpo::testing {

const char* test_data_dir() { return GRPO_PATH_TEST_DATA; }
const char* text_fixture_dir() { return GRPO_PATH_TEXT_FIXTURES; }
const char* reference_tokenizer_dir() { return GRPO_PATH_REFERENCE_TOKENIZERS; }
const char* source_dir() { return GRPO_PATH_SOURCE; }
const char* launch_script() { return GRPO_PATH_SOURCE "/scripts/launch.sh"; }
const char* r1_zero_path() { return GRPO_PATH_R1_ZERO; }
const char* sft_path() { return GRPO_PATH_SFT; }
const char* cli_path() { return GRPO_PATH_CLI; }

}  // namespace grpo::testing

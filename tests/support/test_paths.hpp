// SPDX-License-Identifier: Apache-2.0
// Where the tests find their files and the programs they run: absolute paths fixed by the build
// (tests/CMakeLists.txt) in one translation unit, test_paths.cpp. No other test file's compile line holds an absolute
// path, so ccache (scripts/build.sh, base_dir = the checkout) reuses their objects in another checkout: CI's clone
// builds from the objects of the developer's build.
#pragma once

namespace grpo::testing {

const char* test_data_dir();            ///< tests/data (conformance cases, data sets, GGUF files, tokenizers' sources)
const char* text_fixture_dir();         ///< tests/text/data (the tokenizer parity fixtures)
const char* reference_tokenizer_dir();  ///< the build's unpacked tests/data/tokenizers (cmake/ReferenceTokenizers.cmake)
const char* source_dir();               ///< the checkout's root
const char* launch_script();            ///< scripts/launch.sh
const char* r1_zero_path();             ///< the r1_zero example program ("" without GRPO_BUILD_EXAMPLES)
const char* sft_path();                 ///< the sft example program ("" without GRPO_BUILD_EXAMPLES)
const char* cli_path();                 ///< the grpo command-line tool ("" without GRPO_BUILD_TOOLS)

}  // namespace grpo::testing

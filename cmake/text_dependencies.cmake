# SPDX-License-Identifier: Apache-2.0
# Dependencies of the tokenizer and chat templates (src/text), as the INTERFACE target grpo_text_deps:
#   PCRE2 (8-bit, UTF + UCP, JIT)  pre-tokenizer split patterns   Debian: libpcre2-dev    (BSD-3-Clause)
#   utf8proc                       Unicode normalization, classes  Debian: libutf8proc-dev  (MIT)
# simdjson (tokenizer.json, tokenizer_config.json) is linked by the top-level CMakeLists.txt for every area.
# None of them appears in a public header.
include_guard(GLOBAL)
find_package(PkgConfig REQUIRED)
pkg_check_modules(GRPO_PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(GRPO_UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)

add_library(grpo_text_deps INTERFACE)
target_link_libraries(grpo_text_deps INTERFACE PkgConfig::GRPO_PCRE2 PkgConfig::GRPO_UTF8PROC)

# The installed package re-creates the imported targets grpo_text_deps links (static grpo needs them to link).
string(APPEND GRPO_CONFIG_EXTRA_DEPENDENCIES
       "find_dependency(PkgConfig)\n"
       "pkg_check_modules(GRPO_PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)\n"
       "pkg_check_modules(GRPO_UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)\n")

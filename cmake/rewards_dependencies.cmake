# SPDX-License-Identifier: Apache-2.0
# Dependencies of the code_tests reward's sandbox (src/sandbox) and the judge reward's HTTP client (src/rewards), as
# the INTERFACE target grpo_rewards_deps:
#   libseccomp  builds the BPF syscall filter bubblewrap loads (--seccomp)   Debian: libseccomp-dev       (LGPL-2.1)
#   libcurl     HTTP(S) for OpenAI-compatible judge endpoints               Debian: libcurl4-openssl-dev (curl)
# At run time the sandbox needs bubblewrap (Debian: bubblewrap) and the interpreter it runs (python3). Neither
# library appears in a public header.
include_guard(GLOBAL)
find_package(PkgConfig REQUIRED)
pkg_check_modules(GRPO_SECCOMP REQUIRED IMPORTED_TARGET libseccomp)
pkg_check_modules(GRPO_CURL REQUIRED IMPORTED_TARGET libcurl)

add_library(grpo_rewards_deps INTERFACE)
target_link_libraries(grpo_rewards_deps INTERFACE PkgConfig::GRPO_SECCOMP PkgConfig::GRPO_CURL)

# The installed package re-creates the imported targets grpo_rewards_deps links (static grpo needs them to link).
string(APPEND GRPO_CONFIG_EXTRA_DEPENDENCIES
       "find_dependency(PkgConfig)\n"
       "pkg_check_modules(GRPO_SECCOMP REQUIRED IMPORTED_TARGET libseccomp)\n"
       "pkg_check_modules(GRPO_CURL REQUIRED IMPORTED_TARGET libcurl)\n")

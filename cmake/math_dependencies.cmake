# SPDX-License-Identifier: Apache-2.0
# Dependencies of the math-answer verifier (src/math), as the INTERFACE target grpo_math_deps:
#   GMP + gmpxx  exact rationals            Debian: libgmp-dev
#   MPFR         Arb's floating-point base  Debian: libmpfr-dev
#   FLINT 2.9    integers/rationals for Arb Debian: libflint-dev
#   Arb 2.23     rigorous ball arithmetic   Debian: libflint-arb-dev (library libflint-arb, headers in /usr/include)
# All LGPL (GMP/MPFR LGPL-3+, FLINT/Arb LGPL-2.1+), thread-safe when each thread owns its numbers.
include_guard(GLOBAL)
find_package(PkgConfig REQUIRED)
pkg_check_modules(GRPO_GMP REQUIRED IMPORTED_TARGET gmp gmpxx)
pkg_check_modules(GRPO_MPFR REQUIRED IMPORTED_TARGET mpfr)
find_path(GRPO_ARB_INCLUDE_DIR NAMES acb.h PATH_SUFFIXES arb flint REQUIRED)
find_path(GRPO_FLINT_INCLUDE_DIR NAMES flint/flint.h REQUIRED)
find_library(GRPO_ARB_LIBRARY NAMES flint-arb arb REQUIRED)
find_library(GRPO_FLINT_LIBRARY NAMES flint REQUIRED)

add_library(grpo_math_deps INTERFACE)
target_include_directories(grpo_math_deps INTERFACE ${GRPO_ARB_INCLUDE_DIR} ${GRPO_FLINT_INCLUDE_DIR})
target_link_libraries(grpo_math_deps INTERFACE ${GRPO_ARB_LIBRARY} ${GRPO_FLINT_LIBRARY} PkgConfig::GRPO_MPFR
                                               PkgConfig::GRPO_GMP)

# The installed package re-creates the imported targets grpo_math_deps links (static grpo needs them to link).
string(APPEND GRPO_CONFIG_EXTRA_DEPENDENCIES
       "find_dependency(PkgConfig)\n"
       "pkg_check_modules(GRPO_GMP REQUIRED IMPORTED_TARGET gmp gmpxx)\n"
       "pkg_check_modules(GRPO_MPFR REQUIRED IMPORTED_TARGET mpfr)\n")

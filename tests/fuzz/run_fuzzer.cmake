# SPDX-License-Identifier: Apache-2.0
# Builds tests/fuzz (clang++, libFuzzer + ASan + UBSan) and fuzzes the math verifier for a fixed time.
#   cmake -DGRPO_SOURCE_DIR=<repo> -DWORK_DIR=<scratch dir> [-DCONFORMANCE_DIR=<tests/data/conformance>] [-DSECONDS=60]
#         [-DJOBS=1] [-DCLANGXX=clang++-14] [-DSEED=<libFuzzer seed>] -P run_fuzzer.cmake
# Seeds: every string of tests/data/conformance/*.jsonl (gold, pred, "gold\x1Epred" pairs, extraction inputs, parser
# LaTeX; skipped when CONFORMANCE_DIR is not given) plus adversarial inputs written here. Prints "fuzz/math: skipped"
# (ctest SKIP_REGULAR_EXPRESSION) when no clang++ with the libFuzzer runtime is installed; fails with the crash
# file and the command that reproduces it when the fuzzer finds a crash, leak, UB or hang.
cmake_minimum_required(VERSION 3.25)

foreach(required GRPO_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "run_fuzzer.cmake: -D${required}=... is required")
  endif()
endforeach()
if(NOT DEFINED SECONDS)
  set(SECONDS 60)
endif()
if(NOT DEFINED JOBS)
  set(JOBS 1)
endif()

# --- compiler and libFuzzer runtime -------------------------------------------------------------------------------
find_program(CLANGXX NAMES clang++ clang++-14 clang++-15 clang++-16 clang++-17 clang++-18)
if(NOT CLANGXX)
  message("fuzz/math: skipped (no clang++; Debian: apt-get install clang libclang-rt-14-dev)")
  return()
endif()
execute_process(COMMAND ${CLANGXX} -print-resource-dir OUTPUT_VARIABLE resource_dir OUTPUT_STRIP_TRAILING_WHITESPACE)
file(GLOB_RECURSE fuzzer_runtime "${resource_dir}/lib/*libclang_rt.fuzzer*.a")
if(NOT fuzzer_runtime)
  message("fuzz/math: skipped (${CLANGXX} has no libFuzzer runtime under ${resource_dir}; Debian: libclang-rt-<N>-dev)")
  return()
endif()

# --- build --------------------------------------------------------------------------------------------------------
set(build_dir "${WORK_DIR}/build")
set(generator_args)
find_program(NINJA NAMES ninja ninja-build)
if(NINJA AND NOT EXISTS "${build_dir}/CMakeCache.txt")
  set(generator_args -G Ninja)
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S "${CMAKE_CURRENT_LIST_DIR}" -B "${build_dir}" ${generator_args}
                        -DCMAKE_CXX_COMPILER=${CLANGXX} -DCMAKE_BUILD_TYPE= -DGRPO_SOURCE_DIR=${GRPO_SOURCE_DIR}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fuzz/math: configuring ${CMAKE_CURRENT_LIST_DIR} failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build "${build_dir}" --parallel ${JOBS} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fuzz/math: building the fuzz target failed")
endif()

# --- seed corpus --------------------------------------------------------------------------------------------------
set(seed_dir "${WORK_DIR}/seeds")
set(corpus_dir "${WORK_DIR}/corpus")      # inputs the fuzzer discovers; fresh each run so a run is bounded
set(artifact_dir "${WORK_DIR}/artifacts")
file(REMOVE_RECURSE "${seed_dir}" "${corpus_dir}")
file(MAKE_DIRECTORY "${seed_dir}" "${corpus_dir}" "${artifact_dir}")

# Files are named by content hash, so duplicate strings collapse into one seed.
function(add_seed content)
  string(SHA1 name "${content}")
  file(WRITE "${seed_dir}/${name}" "${content}")
endfunction()

string(ASCII 30 separator)  # '\x1E' splits "gold<RS>pred" in math_fuzzer.cpp
if(DEFINED CONFORMANCE_DIR AND IS_DIRECTORY "${CONFORMANCE_DIR}")
  file(GLOB jsonl_files "${CONFORMANCE_DIR}/*.jsonl")
  foreach(jsonl IN LISTS jsonl_files)
    # Lines are split by hand: LaTeX holds ';' and unbalanced '[' which CMake's list handling would mangle.
    file(READ "${jsonl}" rest)
    while(NOT rest STREQUAL "")
      string(FIND "${rest}" "\n" eol)
      if(eol EQUAL -1)
        set(line "${rest}")
        set(rest "")
      else()
        string(SUBSTRING "${rest}" 0 ${eol} line)
        math(EXPR eol "${eol} + 1")
        string(SUBSTRING "${rest}" ${eol} -1 rest)
      endif()
      set(fields)
      foreach(key gold pred input latex)
        string(JSON type ERROR_VARIABLE json_error TYPE "${line}" ${key})
        if(type STREQUAL "STRING")
          string(JSON value GET "${line}" ${key})
          add_seed("${value}")
          set(${key} "${value}")
          list(APPEND fields ${key})
        endif()
      endforeach()
      if("gold" IN_LIST fields AND "pred" IN_LIST fields)
        add_seed("${gold}${separator}${pred}")
      endif()
    endwhile()
  endforeach()
else()
  message("fuzz/math: CONFORMANCE_DIR not found; fuzzing from the adversarial seeds only")
endif()

# Adversarial seeds: nesting far past the depth limit, unterminated environments, quadratic-scan bait, invalid
# UTF-8 (overlong, lone continuation, truncated sequence, 0xFF), huge exponents and factorials.
string(REPEAT "{" 5000 open_braces)
string(REPEAT "}" 5000 close_braces)
string(REPEAT "(" 3000 open_parens)
string(REPEAT "\\frac{1}{" 400 nested_fracs)
string(REPEAT "$" 4000 dollars)
string(REPEAT "\\(" 2000 open_inline)
string(REPEAT "\\boxed{" 300 open_boxes)
string(REPEAT "-" 2000 minuses)
string(ASCII 192 175 overlong_slash)
string(ASCII 128 lone_continuation)
string(ASCII 226 130 truncated_euro)
string(ASCII 255 byte_ff)
foreach(seed
    "\\boxed{${open_braces}1${close_braces}}"
    "The answer is $\\boxed{${open_braces}"
    "\\boxed{\\frac{1}{2}"
    "The final answer is \\boxed{"
    "${open_parens}x"
    "$${nested_fracs}1"
    "${dollars}"
    "${open_inline}"
    "${open_boxes}7"
    "${minuses}1"
    "\\boxed{${overlong_slash}frac{1}{2}}"
    "$1${lone_continuation}$ and $\\frac{${truncated_euro}}{2}$"
    "${byte_ff}\\boxed{${byte_ff}}${byte_ff}"
    "10^{10^{10^{10}}}${separator}10^{10^{10^{10}}}+1"
    "100000!${separator}\\Gamma(100001)"
    "\\sqrt[1000000]{2}^{1000000}${separator}2"
    "x^{x^{x^{x^{x}}}}${separator}\\exp(\\ln(x)x^{x^{x^{x}}})"
    "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}${separator}\\begin{bmatrix}1&2\\\\3"
    "<answer>\\boxed{A}${separator}<answer>B</answer><answer>"
    "#### 1,000,000${separator}1 000 000")
  add_seed("${seed}")
endforeach()
file(GLOB seeds "${seed_dir}/*")
list(LENGTH seeds seed_count)

# --- fuzz ---------------------------------------------------------------------------------------------------------
set(fuzzer "${build_dir}/math_fuzzer")
set(log "${WORK_DIR}/fuzz.log")
set(flags -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1
          -dict=${CMAKE_CURRENT_LIST_DIR}/math.dict -artifact_prefix=${artifact_dir}/)
if(DEFINED SEED)
  list(APPEND flags -seed=${SEED})
endif()
set(ENV{UBSAN_OPTIONS} "print_stacktrace=1:halt_on_error=1")
set(ENV{ASAN_OPTIONS} "detect_leaks=1")
message("fuzz/math: ${SECONDS} s on ${seed_count} seeds; log ${log}")
execute_process(COMMAND "${fuzzer}" ${flags} "${corpus_dir}" "${seed_dir}" RESULT_VARIABLE rc
                OUTPUT_FILE "${log}" ERROR_FILE "${log}")
file(READ "${log}" log_text)
string(LENGTH "${log_text}" log_length)
# The last lines: final stats on success, the sanitizer report and crash file on failure.
if(rc EQUAL 0)
  set(tail_length 2000)
else()
  set(tail_length 20000)
endif()
set(tail_start 0)
if(log_length GREATER tail_length)
  math(EXPR tail_start "${log_length} - ${tail_length}")
endif()
string(SUBSTRING "${log_text}" ${tail_start} -1 tail)
message("${tail}")
if(rc EQUAL 0)
  message("fuzz/math: passed")
else()
  message(FATAL_ERROR "fuzz/math: the fuzzer failed (exit ${rc}); crash inputs are in ${artifact_dir}. "
                      "Reproduce with: ${fuzzer} ${artifact_dir}/<crash-file>")
endif()

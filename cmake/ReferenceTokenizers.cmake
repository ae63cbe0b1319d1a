# SPDX-License-Identifier: Apache-2.0
# The reference tokenizers the parity tests and bench_tokenizer compare against travel in the repository as
# tests/data/tokenizers/<name>/{tokenizer.json.xz, tokenizer_config.json}, with the sha256 of each unpacked file in
# tests/data/tokenizers/SHA256SUMS. At configure time they are unpacked (xz) into
# ${PROJECT_BINARY_DIR}/reference-tokenizers/<name>/ and checked against those sums; a mismatch stops the configure.
# Sets GRPO_REFERENCE_TOKENIZER_DIR, the folder the test fixtures read by default ($GRPO_TOKENIZER_DIR overrides it).
set(grpo_tokenizer_source "${PROJECT_SOURCE_DIR}/tests/data/tokenizers")
set(GRPO_REFERENCE_TOKENIZER_DIR "${PROJECT_BINARY_DIR}/reference-tokenizers")
find_program(GRPO_XZ xz REQUIRED DOC "xz, to unpack tests/data/tokenizers/*/tokenizer.json.xz (Debian: xz-utils)")

file(STRINGS "${grpo_tokenizer_source}/SHA256SUMS" grpo_tokenizer_sums)
set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             "${grpo_tokenizer_source}/SHA256SUMS")
foreach(line IN LISTS grpo_tokenizer_sums)
  if(NOT line MATCHES "^([0-9a-f]+)  ([a-z0-9]+/[a-z_]+\\.json)$")
    message(FATAL_ERROR "tests/data/tokenizers/SHA256SUMS: cannot read the line '${line}' (want '<sha256>  <name>/<file>.json')")
  endif()
  set(expected "${CMAKE_MATCH_1}")
  set(file "${CMAKE_MATCH_2}")
  set(target "${GRPO_REFERENCE_TOKENIZER_DIR}/${file}")
  if(EXISTS "${target}")
    file(SHA256 "${target}" actual)
    if(actual STREQUAL expected)
      continue()  # unpacked by an earlier configure
    endif()
  endif()
  get_filename_component(target_dir "${target}" DIRECTORY)
  file(MAKE_DIRECTORY "${target_dir}")
  if(EXISTS "${grpo_tokenizer_source}/${file}.xz")
    set(packed "${grpo_tokenizer_source}/${file}.xz")
    execute_process(COMMAND "${GRPO_XZ}" --decompress --stdout "${packed}" OUTPUT_FILE "${target}"
                    RESULT_VARIABLE status ERROR_VARIABLE error)
    if(NOT status EQUAL 0)
      message(FATAL_ERROR "cannot unpack ${packed}: ${error}")
    endif()
  elseif(EXISTS "${grpo_tokenizer_source}/${file}")
    set(packed "${grpo_tokenizer_source}/${file}")
    file(COPY_FILE "${packed}" "${target}")
  else()
    message(FATAL_ERROR "tests/data/tokenizers/SHA256SUMS names ${file}, but neither ${file} nor ${file}.xz is there")
  endif()
  set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${packed}")
  file(SHA256 "${target}" actual)
  if(NOT actual STREQUAL expected)
    file(REMOVE "${target}")
    message(FATAL_ERROR "${packed} unpacks to sha256 ${actual}, but tests/data/tokenizers/SHA256SUMS says ${expected}")
  endif()
endforeach()

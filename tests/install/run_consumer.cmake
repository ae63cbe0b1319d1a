# SPDX-License-Identifier: Apache-2.0
# Configures, builds and runs a consumer project of grpo in WORK_DIR, from scratch.
# MODE=find_package: first installs the already-built grpo (GRPO_BINARY_DIR) into a fresh prefix and points the
#   consumer's find_package(grpo) at that prefix only.
# MODE=add_subdirectory: the consumer adds GRPO_SOURCE_DIR as a subdirectory (grpo is then not the top-level
#   project, so its tests, benchmarks and examples are off), with the LibTorch of the build under test (GRPO_TORCH),
#   and compiles against grpo::grpo without linking (consumer/add_subdirectory/CMakeLists.txt says why).
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(JOIN " " cmd ${ARGN})
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}")
  endif()
  message(STATUS "${out}")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
if(MODE STREQUAL "find_package")
  set(prefix ${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --install ${GRPO_BINARY_DIR} --prefix ${prefix})
  set(consumer_args -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_PACKAGE_NO_SYSTEM_PACKAGE_REGISTRY=ON)
elseif(MODE STREQUAL "add_subdirectory")
  set(consumer_args -DGRPO_SOURCE_DIR=${GRPO_SOURCE_DIR} -DGRPO_TORCH=${GRPO_TORCH})
else()
  message(FATAL_ERROR "MODE must be find_package or add_subdirectory, got '${MODE}'")
endif()
run(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR}/${MODE} -B ${WORK_DIR}/build -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release
    ${consumer_args})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build --target consumer)
if(MODE STREQUAL "find_package")
  run(${WORK_DIR}/build/consumer)
endif()

# SPDX-License-Identifier: Apache-2.0
# Which sources include LibTorch, directly or through the project's own headers: a precompiled <torch/torch.h> saves
# those most of their compile time (its headers are about 60% of a LibTorch source's: measured 30 s of critic.cpp's
# 48 s), while loading the ~700 MB header costs the others more than they take without it (math/expr_test.cpp: 16 s
# of CPU with it, 6 s without). Found from the #include lines: a file reaches LibTorch when it includes <torch/...>,
# <ATen/...> or <c10/...>, or a file that does, looked up beside it, under include/ and under tests/. A header is read
# once (the answers are kept in global properties); a cycle of headers is cut where it closes.

# Sets `out` to ON when `file` reaches LibTorch.
function(_grpo_reaches_torch file out)
  get_property(known GLOBAL PROPERTY "grpo_reaches_torch:${file}" SET)
  if(known)
    get_property(answer GLOBAL PROPERTY "grpo_reaches_torch:${file}")
    set(${out} ${answer} PARENT_SCOPE)
    return()
  endif()
  set_property(GLOBAL PROPERTY "grpo_reaches_torch:${file}" OFF)  # while it is read: the cut of a cycle
  get_filename_component(dir "${file}" DIRECTORY)
  file(STRINGS "${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
  set(answer OFF)
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"].*$" "\\1" included "${line}")
    if(included MATCHES "^(torch|ATen|c10)/")
      set(answer ON)
      break()
    endif()
    foreach(base IN ITEMS "${dir}" "${PROJECT_SOURCE_DIR}/include" "${PROJECT_SOURCE_DIR}/tests")
      if(EXISTS "${base}/${included}" AND NOT IS_DIRECTORY "${base}/${included}")
        _grpo_reaches_torch("${base}/${included}" nested)
        if(nested)
          set(answer ON)
        endif()
        break()
      endif()
    endforeach()
    if(answer)
      break()
    endif()
  endforeach()
  set_property(GLOBAL PROPERTY "grpo_reaches_torch:${file}" ${answer})
  set(${out} ${answer} PARENT_SCOPE)
endfunction()

# Gives `target` a precompiled <torch/torch.h> (or, with REUSE_FROM, another target's precompiled headers) for its
# sources that reach LibTorch; the others compile without one. GCC: -fpch-preprocess, so that ccache caches the files
# that use it (scripts/build.sh).
function(grpo_precompile_torch target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "REUSE_FROM" "")
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  foreach(source IN LISTS sources)
    if(NOT IS_ABSOLUTE "${source}")
      set(source "${source_dir}/${source}")
    endif()
    _grpo_reaches_torch("${source}" uses_torch)
    if(NOT uses_torch)
      set_source_files_properties("${source}" TARGET_DIRECTORY ${target} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endforeach()
  if(arg_REUSE_FROM)
    target_precompile_headers(${target} REUSE_FROM ${arg_REUSE_FROM})
  else()
    target_precompile_headers(${target} PRIVATE <torch/torch.h>)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${target} PRIVATE -fpch-preprocess)
    endif()
  endif()
endfunction()

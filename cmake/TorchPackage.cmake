# SPDX-License-Identifier: Apache-2.0
# Which LibTorch grpo builds against, found once for the whole tree (the imported target `torch`):
#   GRPO_TORCH=pip     the LibTorch inside a Python `torch` wheel (PyPI's is the CUDA 13 build, and loads on a machine
#                      without a GPU or driver): GRPO_PYTHON's torch.utils.cmake_prefix_path. What users install
#                      today; scripts/install-deps.sh puts the pinned wheel (scripts/requirements-torch.txt) in .venv.
#   GRPO_TORCH=system  find_package(Torch) as CMake finds it: Debian's libtorch-dev (1.13, CPU), a LibTorch zip
#                      through CMAKE_PREFIX_PATH or Torch_DIR.
# Checked here, each with a message that names the setting to change: a LibTorch older than 1.13, a wheel whose C++
# ABI (_GLIBCXX_USE_CXX11_ABI) differs from the one the other libraries (fmt, simdjson, yaml-cpp, ...) were built
# with, and GRPO_CUDA=ON with a LibTorch that has no CUDA. The differences between LibTorch 1.13 and 2.x that the
# sources see are in include/grpo/core/torch_compat.hpp, nowhere else.
include_guard(GLOBAL)

set(GRPO_TORCH "system" CACHE STRING "Which LibTorch: system (find_package: Debian's libtorch-dev, Torch_DIR) or pip (the torch wheel of GRPO_PYTHON)")
set_property(CACHE GRPO_TORCH PROPERTY STRINGS system pip)
set(GRPO_TORCH_PREFIX "")
set(GRPO_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH "The Python whose torch wheel GRPO_TORCH=pip builds against")

if(GRPO_TORCH STREQUAL "pip")
  if(NOT EXISTS "${GRPO_PYTHON}")
    message(FATAL_ERROR "GRPO_TORCH=pip: GRPO_PYTHON=${GRPO_PYTHON} does not exist; run scripts/install-deps.sh "
                        "(it installs the pinned torch wheel into .venv) or pass -DGRPO_PYTHON=/path/to/python")
  endif()
  execute_process(
    COMMAND "${GRPO_PYTHON}" -c "import torch, torch.utils; print(torch.utils.cmake_prefix_path); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
    OUTPUT_VARIABLE grpo_torch_query ERROR_VARIABLE grpo_torch_error RESULT_VARIABLE grpo_torch_status
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT grpo_torch_status EQUAL 0)
    message(FATAL_ERROR "GRPO_TORCH=pip: `${GRPO_PYTHON} -c 'import torch'` failed (install the wheel with "
                        "scripts/install-deps.sh, or pass -DGRPO_PYTHON):\n${grpo_torch_error}")
  endif()
  string(REPLACE "\n" ";" grpo_torch_query "${grpo_torch_query}")
  list(GET grpo_torch_query 0 grpo_torch_prefix)
  list(GET grpo_torch_query 1 grpo_torch_wheel_abi)
  # The compiler's own default: 1 for every GCC >= 5 unless a distribution changed it.
  include(CheckCXXSourceCompiles)
  check_cxx_source_compiles("#include <string>\n#if !_GLIBCXX_USE_CXX11_ABI\n#error old\n#endif\nint main(){}"
                            GRPO_COMPILER_CXX11_ABI)
  if(GRPO_COMPILER_CXX11_ABI)
    set(grpo_compiler_abi 1)
  else()
    set(grpo_compiler_abi 0)
  endif()
  if(NOT grpo_torch_wheel_abi STREQUAL grpo_compiler_abi)
    message(FATAL_ERROR "GRPO_TORCH=pip: the torch wheel of ${GRPO_PYTHON} was built with _GLIBCXX_USE_CXX11_ABI="
                        "${grpo_torch_wheel_abi}, the compiler and this system's libraries (fmt, simdjson, yaml-cpp) "
                        "with ${grpo_compiler_abi}: their std::string differ and nothing would link. Install a wheel "
                        "with the compiler's ABI (PyPI's torch >= 2.6 uses 1), or use -DGRPO_TORCH=system")
  endif()
  # The wheel's prefix first: its TorchConfig finds its Caffe2 package there, before any system LibTorch.
  list(PREPEND CMAKE_PREFIX_PATH "${grpo_torch_prefix}")
  set(GRPO_TORCH_PREFIX "${grpo_torch_prefix}")  # for the installed package's config (grpo-config.cmake.in)
elseif(NOT GRPO_TORCH STREQUAL "system")
  message(FATAL_ERROR "GRPO_TORCH=${GRPO_TORCH}: expected system or pip")
endif()

# A CUDA LibTorch's config looks for the toolkit; without an architecture list it compiles for the GPU it sees (none
# on a build machine) or a default. This list covers Volta to Blackwell, Hopper (sm_90) included.
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "7.0;8.0;8.6;8.9;9.0;10.0;12.0")
endif()
find_package(Torch REQUIRED)
if(Torch_VERSION VERSION_LESS 1.13)
  message(FATAL_ERROR "LibTorch ${Torch_VERSION} (${TORCH_INSTALL_PREFIX}) is older than 1.13, the oldest grpo "
                      "supports: install Debian 12's libtorch-dev, or use -DGRPO_TORCH=pip")
endif()

if(TORCH_CUDA_LIBRARIES)
  set(grpo_cuda_default ON)
else()
  set(grpo_cuda_default OFF)
endif()
option(GRPO_CUDA "Build the CUDA code paths (NCCL process groups, the cuda-labelled tests); needs a CUDA LibTorch"
       ${grpo_cuda_default})
if(GRPO_CUDA AND NOT TORCH_CUDA_LIBRARIES)
  message(FATAL_ERROR "GRPO_CUDA=ON, but LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX} is a CPU-only build "
                      "(no CUDA libraries): use -DGRPO_TORCH=pip with PyPI's torch wheel (a CUDA build), or "
                      "-DGRPO_CUDA=OFF")
endif()
if(GRPO_CUDA)
  set(grpo_cuda_summary "ON (NCCL, device paths, tests/cuda; TORCH_CUDA_ARCH_LIST $ENV{TORCH_CUDA_ARCH_LIST})")
else()
  set(grpo_cuda_summary "OFF")
endif()
message(STATUS "grpo: LibTorch ${Torch_VERSION} (GRPO_TORCH=${GRPO_TORCH}, ${TORCH_INSTALL_PREFIX}); CUDA code "
               "paths ${grpo_cuda_summary}")

# fmt. LibTorch 2.x ships fmt's headers in its own include directory, which every compile line names before
# /usr/include: those are the headers the sources see, so they are used whole, header-only (FMT_HEADER_ONLY; linking
# a system libfmt of another version would miss their symbols). Otherwise (Debian's 1.13) the system fmt.
if(EXISTS "${TORCH_INSTALL_PREFIX}/include/fmt/format.h")
  set(GRPO_FMT_TARGET "")
  set(GRPO_FMT_DEFINITIONS FMT_HEADER_ONLY)
  set(GRPO_FMT_DEPENDENCY "")
else()
  find_package(fmt REQUIRED)
  set(GRPO_FMT_TARGET fmt::fmt)
  set(GRPO_FMT_DEFINITIONS "")
  set(GRPO_FMT_DEPENDENCY "find_dependency(fmt)")
endif()

# The torch wheels' libtorch.so and libtorch_cpu.so export copies of libstdc++'s std::filesystem functions, statically
# linked from their build compiler (pytorch/pytorch#133437, still so in 2.11). A program whose list of needed
# libraries names libtorch before libstdc++ binds its own std::filesystem calls to those copies, and some crash
# (std::filesystem::remove_all jumps to address 0). Naming libstdc++ first on the link line of everything that links
# grpo puts it first in that list, so the C++ runtime's own functions are found first.
set(GRPO_TORCH_LINK_OPTIONS "")
if(GRPO_TORCH STREQUAL "pip" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  set(GRPO_TORCH_LINK_OPTIONS "LINKER:--push-state,--no-as-needed" "-lstdc++" "LINKER:--pop-state")
endif()

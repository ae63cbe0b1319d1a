# SPDX-License-Identifier: Apache-2.0
# Dependencies of data-parallel training (src/train/distributed.cpp), as the INTERFACE target grpo_distributed_deps:
#   c10d (TCPStore, ProcessGroupGloo)  compiled into libtorch_cpu; headers in libtorch-dev  (BSD-3-Clause)
#   Gloo                               the headers c10d's ProcessGroupGloo.hpp includes     Debian: libgloo-dev (BSD)
# ProcessGroupGloo.hpp declares nothing unless USE_C10D_GLOO is defined. Debian's torch_cpu target already exports
# USE_DISTRIBUTED;USE_C10D_GLOO;USE_RPC;USE_TENSORPIPE (Caffe2Targets.cmake); other LibTorch packages may not, so we
# define USE_C10D_GLOO ourselves (the same value, so no conflict). USE_DISTRIBUTED guards nothing in the c10d headers.
# Gloo is linked directly too: the inline parts of its headers (devices, contexts) reference libgloo symbols, and
# the linker does not pick up libtorch_cpu's own dependency for us. None of this appears in a public header, so
# consumers of grpo need no definitions, only the link line below (a plain library path: nothing to re-find).
include_guard(GLOBAL)
find_path(GRPO_GLOO_INCLUDE_DIR NAMES gloo/algorithm.h REQUIRED)
find_library(GRPO_GLOO_LIBRARY NAMES gloo REQUIRED)

add_library(grpo_distributed_deps INTERFACE)
target_include_directories(grpo_distributed_deps INTERFACE ${GRPO_GLOO_INCLUDE_DIR})
target_compile_definitions(grpo_distributed_deps INTERFACE USE_C10D_GLOO)
target_link_libraries(grpo_distributed_deps INTERFACE ${GRPO_GLOO_LIBRARY})

# NCCL process groups (ProcessGroupOptions.backend nccl, and automatic with CUDA tensors): c10d's ProcessGroupNCCL,
# compiled into a CUDA LibTorch 2.x (libtorch_cuda), built with the CUDA code paths (GRPO_CUDA, cmake/TorchPackage.cmake:
# ON when the LibTorch found has CUDA libraries; Debian's libtorch-dev is CPU-only, so it is OFF there). nccl.h comes
# with the LibTorch (a zip's include/) or, for a wheel, from PyPI's nvidia-nccl package beside torch.
if(GRPO_CUDA)
  if(Torch_VERSION VERSION_LESS 2.0)
    message(FATAL_ERROR "GRPO_CUDA: NCCL process groups need a CUDA build of LibTorch 2.x; found ${Torch_VERSION} "
                        "(configure with -DGRPO_CUDA=OFF)")
  endif()
  find_path(GRPO_NCCL_INCLUDE_DIR NAMES nccl.h
            HINTS "${TORCH_INSTALL_PREFIX}/include" "${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include"
                  "${CUDAToolkit_INCLUDE_DIRS}")
  if(NOT GRPO_NCCL_INCLUDE_DIR)
    message(FATAL_ERROR "GRPO_CUDA: nccl.h not found beside LibTorch (${TORCH_INSTALL_PREFIX}) or in the CUDA "
                        "toolkit: install PyPI's nvidia-nccl-cu13 (a dependency of the torch wheel) or NCCL's "
                        "development package, or pass -DGRPO_NCCL_INCLUDE_DIR=<dir with nccl.h>")
  endif()
  # ProcessGroupNCCL.hpp declares nothing unless USE_C10D_NCCL is defined (as USE_C10D_GLOO above).
  target_include_directories(grpo_distributed_deps INTERFACE $<BUILD_INTERFACE:${GRPO_NCCL_INCLUDE_DIR}>)
  target_compile_definitions(grpo_distributed_deps INTERFACE USE_C10D_NCCL GRPO_WITH_NCCL)
  target_link_libraries(grpo_distributed_deps INTERFACE ${TORCH_CUDA_LIBRARIES})
endif()

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The CUDA-enabled build runs its CPU tests on a machine with no GPU driver: no program of it names the driver
# (libcuda.so.1) among the libraries it needs (readelf -d), while each links the CUDA LibTorch (libtorch_cuda.so), so
# the CUDA code paths are really in it, and names libstdc++ before LibTorch. The tests of this build passing on such
# a machine is the other half.
# Usage: check_no_driver_link.sh PROGRAM...
set -euo pipefail
status=0
for program in "$@"; do
  needed="$(readelf -d "$program" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')"
  if grep -q '^libcuda\.so' <<<"$needed"; then
    echo "FAIL: $program needs the GPU driver: $(grep '^libcuda\.so' <<<"$needed")"
    status=1
  fi
  if ! grep -q '^libtorch_cuda\.so' <<<"$needed"; then
    echo "FAIL: $program does not link libtorch_cuda.so: not a CUDA-enabled build ($(tr '\n' ' ' <<<"$needed"))"
    status=1
  fi
  # The C++ runtime before LibTorch: the wheel's libtorch exports copies of std::filesystem that crash when bound
  # (cmake/TorchPackage.cmake, pytorch/pytorch#133437).
  first="$(grep -m1 -E '^(libstdc\+\+|libtorch)' <<<"$needed" || true)"
  if [[ "$first" != libstdc++* ]]; then
    echo "FAIL: $program names $first before libstdc++.so: its std::filesystem calls would bind to LibTorch's copies"
    status=1
  fi
  [ "$status" -ne 0 ] || echo "ok: $program: $(grep -c . <<<"$needed") libraries needed, libstdc++ before LibTorch, no libcuda"
done
exit "$status"

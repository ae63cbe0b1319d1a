// SPDX-License-Identifier: Apache-2.0
// FusedGrpoLoss's vectorised float token loop (loss_kernel.hpp): the same formulas as the scalar loop in
// fused_grpo_loss.cpp (LossKernel::rows), 16 tokens at a time. Masked lanes are replaced by 0 before any arithmetic
// (so −inf/NaN padding never reaches a sum or a gradient), which makes w = 1, the policy loss 0 (A = 0) and the
// KL 0 there; every sum and the gradient are then also multiplied by the mask. Per-row sums are kept in 16 float
// lanes and added to double at the end of the row.
#include "loss_kernel.hpp"
#include "vec_float.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace grpo::detail {
namespace {

// One copy of the kernel per instruction set, each with its helpers compiled for that set (vec_float_ops.inc says
// why target_clones alone does not do here), chosen once at run time.
#if GRPO_ROW_KERNEL_DISPATCH
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v4")
namespace x86_64_v4 {
#include "vec_float_ops.inc"
#include "loss_kernel_impl.inc"
}  // namespace x86_64_v4
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v3")
namespace x86_64_v3 {
#include "vec_float_ops.inc"
#include "loss_kernel_impl.inc"
}  // namespace x86_64_v3
#pragma GCC pop_options
#endif
namespace baseline {
#include "vec_float_ops.inc"
#include "loss_kernel_impl.inc"
}  // namespace baseline

}  // namespace

LossPartial token_loss_rows_float(const TokenLossArgs& args, int64_t begin, int64_t end) {
  static const VectorIsa isa = vector_isa();
#if GRPO_ROW_KERNEL_DISPATCH
  if (isa == VectorIsa::x86_64_v4) return x86_64_v4::rows(args, begin, end);
  if (isa == VectorIsa::x86_64_v3) return x86_64_v3::rows(args, begin, end);
#endif
  (void)isa;
  return baseline::rows(args, begin, end);
}

}  // namespace grpo::detail

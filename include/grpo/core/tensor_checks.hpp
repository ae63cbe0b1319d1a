// SPDX-License-Identifier: Apache-2.0
// Shape and dtype checks for tensor arguments, with messages that name the argument and its shape.
#pragma once

#include <grpo/core/error.hpp>

#include <torch/torch.h>

#include <string>
#include <string_view>

namespace grpo {

/// "[2, 3]" for a tensor of sizes {2, 3}; "undefined" for an undefined tensor.
inline std::string shape_str(const torch::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::string out = "[";
  for (int64_t d = 0; d < t.dim(); ++d) out += (d ? ", " : "") + std::to_string(t.size(d));
  return out + "]";
}

namespace detail {

/// Throws unless `t` is defined and has exactly `dim` dimensions.
inline void check_dim(const torch::Tensor& t, int64_t dim, std::string_view name, std::string_view what) {
  GRPO_CHECK(t.defined(), "{}: {} is undefined", what, name);
  GRPO_CHECK(t.dim() == dim, "{}: {} must have {} dimensions, got shape {}", what, name, dim, shape_str(t));
}

/// Throws unless `a` and `b` have the same shape.
inline void check_same_shape(const torch::Tensor& a, std::string_view a_name, const torch::Tensor& b,
                             std::string_view b_name, std::string_view what) {
  GRPO_CHECK(a.defined() && b.defined(), "{}: {} or {} is undefined", what, a_name, b_name);
  GRPO_CHECK(a.sizes() == b.sizes(), "{}: {} has shape {} but {} has shape {}", what, a_name, shape_str(a), b_name,
             shape_str(b));
}

/// Throws unless `t` has a floating-point dtype.
inline void check_floating(const torch::Tensor& t, std::string_view name, std::string_view what) {
  GRPO_CHECK(t.defined() && t.is_floating_point(), "{}: {} must be a floating-point tensor, got {}", what, name,
             t.defined() ? std::string(c10::toString(t.scalar_type())) : std::string("undefined"));
}

}  // namespace detail
}  // namespace grpo

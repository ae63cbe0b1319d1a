// SPDX-License-Identifier: Apache-2.0
// The verifier's exact rational arithmetic on its own: what the calculator tool of multi-turn rollouts computes with,
// so that a tool's answer and the grader's judgement of it come from one implementation.
#pragma once

#include <grpo/math/expr.hpp>

#include <optional>
#include <string>

namespace grpo::math {

/// The exact value of `e` (integers, decimals, fractions, + − × ÷, integer powers and rational powers of perfect
/// powers, abs, factorial, binom, gcd, lcm, min, max, mod, floor, ceiling), as GMP writes a canonical rational: "42",
/// "-7/3". nullopt when `e` has no exact rational value (symbols, √2, π, division by zero) or is beyond the verifier's
/// bounds (numbers over 65,536 bits, 2,000,000 evaluation steps).
std::optional<std::string> exact_value(const Expr& e);

}  // namespace grpo::math

// SPDX-License-Identifier: Apache-2.0
#pragma once
// Compatibility profiles for other published math graders, so results can be compared with papers that used them.
// Each follows the upstream code's rules (docs/math_verifier.md §profiles); the Math-Verify pipeline in verify.hpp
// is the default and the most accurate.

#include <string>
#include <string_view>

#include "grpo/math/verify.hpp"

namespace grpo::math {

// hendrycks/math `strip_string` (also verl math_reward, prm800k math_normalize): \left/\right, tfrac/dfrac, \$,
// a trailing "\text{ unit}", \%, leading "0.", a short "x =" prefix, \sqrtX → \sqrt{X}, spaces, \fracab →
// \frac{a}{b}, 0.5 → \frac{1}{2}, int/int → \frac{int}{int}.
std::string hendrycks_strip_string(std::string_view s);

// hendrycks/math `is_equiv`: equal after hendrycks_strip_string (exact string equality; symmetric).
Verdict hendrycks_is_equiv(std::string_view gold, std::string_view pred);

// NVIDIA NeMo-Skills `math_equal` (a Math-Verify wrapper): strips a trailing %, \%, "." or "\"; compares plain
// words/numbers literally after normalize_latex; otherwise wraps each side in $…$ (when it has no math
// delimiters) and runs verify() with LaTeX extraction on both sides.
Verdict nemo_skills_math_equal(std::string_view gold, std::string_view pred, const VerifyOptions& options = {});

}  // namespace grpo::math

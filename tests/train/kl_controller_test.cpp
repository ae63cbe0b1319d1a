// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/kl_controller.hpp>

#include <catch2/catch.hpp>

#include <cmath>

using grpo::train::KlControl;
using grpo::train::KlController;

TEST_CASE("adaptive KL controller follows the published update rule", "[train][kl_controller]") {
  // β ← β·(1 + clip(KL/target − 1, −0.2, 0.2)·n/horizon), by hand for β0 = 0.1, target 0.1, horizon 10000, n = 256:
  //   KL 0.15: error +0.5 → clipped +0.2, β = 0.1·1.00512                    = 0.100512
  //   KL 0.11: error +0.1,                β = 0.100512·1.00256              = 0.10076931072
  //   KL 0:    error −1 → clipped −0.2,   β = 0.10076931072·0.99488         = 0.1002533718491136
  //   KL 0.1:  error 0,                   β unchanged
  KlController controller(0.1, {.type = KlControl::adaptive, .target = 0.1, .horizon = 10000});
  CHECK(controller.update(0.15, 256) == Approx(0.100512).epsilon(1e-14));
  CHECK(controller.update(0.11, 256) == Approx(0.10076931072).epsilon(1e-14));
  CHECK(controller.update(0.0, 256) == Approx(0.1002533718491136).epsilon(1e-14));
  CHECK(controller.update(0.1, 256) == Approx(0.1002533718491136).epsilon(1e-14));
  // No measurement (no reference this step): unchanged.
  CHECK(controller.update(std::nan(""), 256) == Approx(0.1002533718491136).epsilon(1e-14));
  // The clip bounds one step's move: a huge KL over horizon sequences multiplies β by exactly 1.2.
  KlController fast(1.0, {.type = KlControl::adaptive, .target = 0.01, .horizon = 100});
  CHECK(fast.update(1e6, 100) == Approx(1.2));
  CHECK(fast.update(0.0, 100) == Approx(1.2 * 0.8));
  // Restore (checkpoint) sets β; the rule continues from it.
  fast.restore(0.5);
  CHECK(fast.update(0.02, 50) == Approx(0.5 * (1 + 0.2 * 0.5)));
}

TEST_CASE("fixed KL controller never moves, options are validated", "[train][kl_controller]") {
  KlController fixed(0.04);
  CHECK(fixed.update(5.0, 1000) == 0.04);
  CHECK(grpo::train::parse_kl_control("adaptive") == KlControl::adaptive);
  CHECK_THROWS_WITH(grpo::train::parse_kl_control("pid"), Catch::Contains("unknown KL controller 'pid'"));
  CHECK_THROWS_AS(KlController(0.0, {.type = KlControl::adaptive}), grpo::ConfigError);
  CHECK_THROWS_WITH(KlController(0.1, {.type = KlControl::adaptive, .target = 0.0}),
                    Catch::Contains("target must be > 0"));
  CHECK_THROWS_WITH(KlController(0.1, {.type = KlControl::adaptive, .horizon = -1}),
                    Catch::Contains("horizon must be > 0"));
  CHECK_THROWS_AS(KlController(-0.1), grpo::ConfigError);
  CHECK_THROWS_AS(fixed.update(0.1, -1), grpo::ConfigError);
  CHECK_THROWS_AS(fixed.restore(std::nan("")), grpo::ConfigError);
}

// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/entropy_controller.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using grpo::train::AdaptiveEntropyOptions;
using grpo::train::EntropyController;

TEST_CASE("adaptive entropy controller follows TRL's rule step by step", "[train][entropy_controller]") {
  // TRL grpo_trainer.py (f2cd577): apply entropy_coef only while the last window entropy ≤ entropy_target; after each
  // optimizer step, coef += delta (capped at max) when the window entropy ≤ target, else coef −= delta (floored at
  // min). Worked by hand with target 0.5, delta 0.1, [0.05, 0.3], starting at 0.2.
  EntropyController c(0.2, AdaptiveEntropyOptions{.target = 0.5, .delta = 0.1, .min = 0.05, .max = 0.3});
  CHECK(c.applied() == 0.0);  // nothing measured: +inf > target
  CHECK(c.last_entropy() == std::numeric_limits<double>::infinity());
  c.update(4.0, 10.0);        // H = 0.4 ≤ 0.5: 0.2 + 0.1 = 0.3
  CHECK(c.coef() == Approx(0.3));
  CHECK(c.applied() == Approx(0.3));
  c.update(3.0, 10.0);        // H = 0.3: capped at 0.3
  CHECK(c.coef() == Approx(0.3));
  c.update(9.0, 10.0);        // H = 0.9 > 0.5: 0.3 − 0.1 = 0.2, and the bonus stops applying
  CHECK(c.coef() == Approx(0.2));
  CHECK(c.applied() == 0.0);
  c.update(60.0, 10.0);       // H = 6: 0.1
  c.update(60.0, 10.0);       // floored at 0.05
  CHECK(c.coef() == Approx(0.05));
  c.update(5.0, 10.0);        // H = 0.5 = target counts as "at or below": up again, applied
  CHECK(c.coef() == Approx(0.15));
  CHECK(c.applied() == Approx(0.15));
  c.update(1.0, 0.0);  // no token measured: no change
  CHECK(c.coef() == Approx(0.15));
  CHECK(c.last_entropy() == Approx(0.5));
  c.restore(0.25, std::numeric_limits<double>::infinity());
  CHECK(c.coef() == 0.25);
  CHECK(c.applied() == 0.0);
}

TEST_CASE("fixed entropy coefficient always applies and never moves", "[train][entropy_controller]") {
  EntropyController c(0.01);
  CHECK(!c.adaptive());
  CHECK(c.applied() == 0.01);
  c.update(100.0, 10.0);
  CHECK(c.coef() == 0.01);
  CHECK(c.applied() == 0.01);
}

TEST_CASE("adaptive entropy options are validated by their config keys", "[train][entropy_controller]") {
  CHECK_THROWS_WITH(EntropyController(std::nan("")), Catch::Contains("entropy_coef must be finite"));
  CHECK_THROWS_WITH(EntropyController(0.0, AdaptiveEntropyOptions{.delta = -0.1}),
                    Catch::Contains("entropy_coef_delta must be finite and >= 0"));
  CHECK_THROWS_WITH(EntropyController(0.0, AdaptiveEntropyOptions{.min = 0.5, .max = 0.1}),
                    Catch::Contains("entropy_coef_min (0.5) and entropy_coef_max (0.1)"));
  CHECK_THROWS_WITH(EntropyController(2.0, AdaptiveEntropyOptions{}),
                    Catch::Contains("entropy_coef (2) must lie in [entropy_coef_min, entropy_coef_max] = [0, 1]"));
  CHECK_THROWS_WITH(EntropyController(0.0, AdaptiveEntropyOptions{.target = std::nan("")}),
                    Catch::Contains("entropy_target must be finite"));
}

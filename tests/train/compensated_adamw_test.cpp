// SPDX-License-Identifier: Apache-2.0
// CompensatedAdamW against fp64 AdamW: stochastic rounding is unbiased and lands on a neighbour; fp32 parameters step
// as torch's AdamW; bf16 parameters with compensation follow the fp64 trajectory where plain bf16 AdamW stalls;
// save/load continues bit-exactly; gradient norms of bf16 gradients are computed in fp32; bad input is refused.
#include <grpo/core/error.hpp>
#include <grpo/core/seeded_generator.hpp>
#include <grpo/train/compensated_adamw.hpp>
#include <grpo/train/master_weights.hpp>
#include <grpo/train/optimizer_step.hpp>
#include <support/model_testing.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace grpo;
using train::CompensatedAdamW;

namespace {

/// The bf16 values just below and just above each element of x (fp32) by magnitude: the truncation of its bits, and
/// the next bf16 value away from zero (equal when x is a bf16 value).
std::pair<torch::Tensor, torch::Tensor> bf16_neighbours(const torch::Tensor& x) {
  const auto bits = x.view(torch::kInt32);
  const auto lower_bits = torch::bitwise_and(bits, std::int64_t{-65536});
  const auto exact = lower_bits.eq(bits);
  const auto upper_bits = torch::where(exact, lower_bits, lower_bits + 65536);
  return {lower_bits.view(torch::kFloat32), upper_bits.view(torch::kFloat32)};
}

/// Fixed gradients g_t = 0.05 + 0.1·N(0, 1), rounded to bf16 (so every optimizer sees the same values).
std::vector<torch::Tensor> gradient_sequence(std::int64_t steps, std::int64_t n) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> out;
  for (std::int64_t t = 0; t < steps; ++t) {
    out.push_back((0.05 + 0.1 * torch::randn({n}, torch::kDouble)).to(torch::kBFloat16).to(torch::kDouble));
  }
  return out;
}

/// Runs `optimizer` over `parameter` with the gradients (converted to the parameter's dtype).
void run(torch::optim::Optimizer& optimizer, torch::Tensor& parameter, const std::vector<torch::Tensor>& grads) {
  for (const auto& g : grads) {
    parameter.mutable_grad() = g.to(parameter.scalar_type());
    optimizer.step();
  }
}

}  // namespace

TEST_CASE("stochastic_round_to_bfloat16 lands on a neighbour, is unbiased and keeps exact values, inf and NaN",
          "[train][precision]") {
  auto generator = seeded_generator(torch::kCPU, 5);
  const auto x = torch::tensor({1.0 + 0.3 / 128, -(1.0 + 0.3 / 128), 3.0e-20 * (1.0 + 0.77 / 128), 1.5, -0.0},
                               torch::kFloat32);
  const std::int64_t draws = 20000;
  const auto repeated = x.unsqueeze(0).expand({draws, x.size(0)}).contiguous();
  const auto rounded = train::stochastic_round_to_bfloat16(repeated, generator).to(torch::kFloat32);
  REQUIRE(rounded.scalar_type() == torch::kFloat32);
  const auto [lower, upper] = bf16_neighbours(repeated);
  CHECK(rounded.eq(lower).logical_or(rounded.eq(upper)).all().item<bool>());
  // Mean of the draws against x (fp64): within 4 standard errors of a two-point draw.
  const auto x64 = x.to(torch::kDouble);
  const auto spacing = (upper[0] - lower[0]).abs().to(torch::kDouble);
  const auto p = ((x64 - lower[0].to(torch::kDouble)).abs() / spacing.clamp_min(1e-300));
  const auto standard_error = spacing * (p * (1 - p)).sqrt() / std::sqrt(static_cast<double>(draws));
  const auto mean = rounded.to(torch::kDouble).mean(0);
  for (std::int64_t i = 0; i < x.size(0); ++i) {
    INFO("element " << i);
    CHECK(std::abs(mean[i].item<double>() - x64[i].item<double>()) <= 4 * standard_error[i].item<double>() + 1e-300);
  }
  CHECK(rounded.select(1, 3).eq(1.5).all().item<bool>());  // exact bf16 values stay
  const auto special = torch::tensor({INFINITY, -INFINITY, NAN}, torch::kFloat32);
  const auto kept = train::stochastic_round_to_bfloat16(special, generator).to(torch::kFloat32);
  CHECK(std::isinf(kept[0].item<float>()));
  CHECK(kept[0].item<float>() > 0);
  CHECK(kept[1].item<float>() < 0);
  CHECK(std::isnan(kept[2].item<float>()));
  // The same seed draws the same rounding.
  auto again = seeded_generator(torch::kCPU, 5);
  CHECK(torch::equal(train::stochastic_round_to_bfloat16(repeated, again).to(torch::kFloat32), rounded));
}

TEST_CASE("CompensatedAdamW steps fp32 and fp64 parameters as torch's AdamW", "[train][precision]") {
  for (const auto dtype : {torch::kFloat32, torch::kDouble}) {
    INFO(c10::toString(dtype));
    torch::manual_seed(1);
    const auto start = torch::randn({3, 7}, dtype);
    auto ours = start.clone().set_requires_grad(true);
    auto theirs = start.clone().set_requires_grad(true);
    const auto options = torch::optim::AdamWOptions(0.01).weight_decay(0.1).betas({0.8, 0.99}).eps(1e-6);
    CompensatedAdamW compensated({ours}, options);
    torch::optim::AdamW reference(std::vector<torch::Tensor>{theirs}, options);
    const auto grads = gradient_sequence(25, 21);
    for (const auto& g : grads) {
      ours.mutable_grad() = g.view({3, 7}).to(dtype);
      theirs.mutable_grad() = g.view({3, 7}).to(dtype);
      compensated.step();
      reference.step();
    }
    const double tolerance = dtype == torch::kDouble ? 1e-13 : 1e-6;
    CHECK(torch::allclose(ours, theirs, tolerance, tolerance));
    CHECK((ours - start).abs().max().item<double>() > 0.05);  // it moved
    CHECK(compensated.parameter_states()[0].step == 25);
    CHECK_FALSE(compensated.parameter_states()[0].compensation.defined());
  }
}

TEST_CASE("CompensatedAdamW: bf16 weights follow fp64 AdamW where plain bf16 AdamW rounds the updates away",
          "[train][precision]") {
  // Weights around ±1 (bf16 spacing 2⁻⁸ … 2⁻⁷) and steps of about lr·0.45 = 4.5e-5: every single update is far below
  // half a spacing.
  const std::int64_t n = 4096, steps = 300;
  torch::manual_seed(2);
  const auto start = (torch::rand({n}, torch::kDouble) + 0.5).to(torch::kBFloat16).to(torch::kDouble);
  const auto grads = gradient_sequence(steps, n);
  const auto options = torch::optim::AdamWOptions(1e-4).weight_decay(0.01);

  auto exact = start.clone().set_requires_grad(true);
  torch::optim::AdamW fp64(std::vector<torch::Tensor>{exact}, options);
  run(fp64, exact, grads);
  auto plain = start.to(torch::kBFloat16).set_requires_grad(true);
  torch::optim::AdamW bf16(std::vector<torch::Tensor>{plain}, options);
  run(bf16, plain, grads);
  auto ours = start.to(torch::kBFloat16).set_requires_grad(true);
  CompensatedAdamW compensated({ours}, options, 9);
  run(compensated, ours, grads);

  const auto& state = compensated.parameter_states()[0];
  REQUIRE(state.exp_avg.scalar_type() == torch::kBFloat16);  // 2 bytes each: the memory the scheme saves
  REQUIRE(state.exp_avg_sq.scalar_type() == torch::kBFloat16);
  REQUIRE(state.compensation.scalar_type() == torch::kBFloat16);
  const auto movement = (exact.detach() - start).abs().mean().item<double>();
  REQUIRE(movement > 0.01);
  // Weight + compensation is what the optimizer holds: it follows fp64 to a small fraction of the movement.
  const auto held = ours.detach().to(torch::kDouble) + state.compensation.to(torch::kDouble);
  const double held_error = (held - exact.detach()).abs().mean().item<double>();
  CHECK(held_error < 0.02 * movement);
  // The bf16 weight is that value rounded: within one spacing (2⁻⁷ for |w| < 2) of fp64.
  CHECK((ours.detach().to(torch::kDouble) - exact.detach()).abs().max().item<double>() <= 1.0 / 128);
  // Plain bf16 AdamW lost most of the movement.
  const double plain_error = (plain.detach().to(torch::kDouble) - exact.detach()).abs().mean().item<double>();
  CHECK(plain_error > 0.5 * movement);
  // The second moment follows fp64's, unbiased: stochastic rounding keeps its decay (a relative change of 1e-3 per
  // step, below half a bf16 spacing: rounding to nearest would let it only grow).
  const auto& fp64_state = static_cast<torch::optim::AdamWParamState&>(*fp64.state().begin()->second);
  const auto v64 = fp64_state.exp_avg_sq();
  const auto v = state.exp_avg_sq.to(torch::kDouble);
  INFO("v: mean relative error " << ((v - v64).abs() / v64).mean().item<double>() << ", mean ratio "
       << (v.mean() / v64.mean()).item<double>() << "; held error / movement " << held_error / movement
       << ", plain error / movement " << plain_error / movement);
  CHECK(std::abs((v.mean() / v64.mean()).item<double>() - 1.0) < 0.005);
  CHECK(((v - v64).abs() / v64).mean().item<double>() < 0.05);
}

TEST_CASE("CompensatedAdamW: save and load continue bit-exactly, and a mismatched state is refused",
          "[train][precision]") {
  torch::manual_seed(4);
  const auto start = torch::randn({5, 9}).to(torch::kBFloat16);
  const auto grads = gradient_sequence(6, 45);
  const auto options = torch::optim::AdamWOptions(1e-3).weight_decay(0.05);
  auto straight = start.clone().set_requires_grad(true);
  CompensatedAdamW straight_optimizer({straight}, options, 21);
  auto resumed = start.clone().set_requires_grad(true);
  const auto path = testing::fresh_temp_dir("compensated_adamw") / "optimizer.pt";
  {
    CompensatedAdamW first({resumed}, options, 21);
    for (int t = 0; t < 3; ++t) {
      resumed.mutable_grad() = grads[t].view({5, 9}).to(torch::kBFloat16);
      first.step();
    }
    torch::serialize::OutputArchive archive;
    first.save(archive);
    archive.save_to(path.string());
  }
  for (int t = 0; t < 6; ++t) {
    straight.mutable_grad() = grads[t].view({5, 9}).to(torch::kBFloat16);
    straight_optimizer.step();
  }
  CompensatedAdamW second({resumed}, torch::optim::AdamWOptions(0.5), 0);  // options and seed come from the file
  torch::serialize::InputArchive archive;
  archive.load_from(path.string());
  second.load(archive);
  CHECK(second.param_groups()[0].options().get_lr() == 1e-3);
  for (int t = 3; t < 6; ++t) {
    resumed.mutable_grad() = grads[t].view({5, 9}).to(torch::kBFloat16);
    second.step();
  }
  CHECK(torch::equal(resumed, straight));
  const auto& a = second.parameter_states()[0];
  const auto& b = straight_optimizer.parameter_states()[0];
  CHECK(a.step == b.step);
  CHECK(torch::equal(a.exp_avg, b.exp_avg));
  CHECK(torch::equal(a.exp_avg_sq, b.exp_avg_sq));
  CHECK(torch::equal(a.compensation, b.compensation));

  auto other_shape = torch::zeros({9, 5}, torch::kBFloat16).set_requires_grad(true);
  CompensatedAdamW mismatched({other_shape}, options);
  torch::serialize::InputArchive again;
  again.load_from(path.string());
  REQUIRE_THROWS_AS(mismatched.load(again), Error);
  torch::serialize::InputArchive third;
  third.load_from(path.string());
  REQUIRE_THROWS_WITH(mismatched.load(third), Catch::Contains("[5, 9]") && Catch::Contains("[9, 5]"));
}

TEST_CASE("clip_and_step computes bf16 gradients' norm in fp32 and clips fp32 gradients as torch's clip_grad_norm_",
          "[train][precision]") {
  torch::manual_seed(6);
  const auto a = torch::randn({300, 7}), b = torch::randn({11});
  // fp32: the norm and the clipped gradients equal torch's.
  auto pa = torch::zeros_like(a).set_requires_grad(true), pb = torch::zeros_like(b).set_requires_grad(true);
  auto qa = torch::zeros_like(a).set_requires_grad(true), qb = torch::zeros_like(b).set_requires_grad(true);
  pa.mutable_grad() = a.clone(), pb.mutable_grad() = b.clone(), qa.mutable_grad() = a.clone(), qb.mutable_grad() = b.clone();
  torch::optim::SGD sgd({pa, pb}, torch::optim::SGDOptions(0.0));
  const double ours = train::clip_and_step(sgd, {pa, pb}, 2.0);
  const double theirs = torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{qa, qb}, 2.0);
  CHECK(ours == theirs);
  CHECK(torch::equal(pa.grad(), qa.grad()));
  CHECK(torch::equal(pb.grad(), qb.grad()));
  // bf16: the fp64 norm of the same values to fp32 precision (a bf16 result would be off by up to 2⁻⁹).
  auto ha = torch::zeros({300, 7}, torch::kBFloat16).set_requires_grad(true);
  ha.mutable_grad() = a.to(torch::kBFloat16);
  const double exact = ha.grad().to(torch::kDouble).norm().item<double>();
  torch::optim::SGD half({ha}, torch::optim::SGDOptions(0.0));
  CHECK(train::clip_and_step(half, {ha}, 0.0) == Approx(exact).epsilon(1e-6));
  CHECK(torch::equal(ha.grad(), a.to(torch::kBFloat16)));  // max_grad_norm 0: measured, not clipped
}

TEST_CASE("CompensatedAdamW and optimizer_precision compensated refuse what they cannot train", "[train][precision]") {
  auto half = torch::zeros({2}, torch::kHalf).set_requires_grad(true);
  REQUIRE_THROWS_AS(CompensatedAdamW({half}, torch::optim::AdamWOptions()), ConfigError);
  auto bf16 = torch::zeros({2}, torch::kBFloat16).set_requires_grad(true);
  REQUIRE_THROWS_WITH(CompensatedAdamW({bf16}, torch::optim::AdamWOptions().amsgrad(true)),
                      Catch::Contains("amsgrad"));
  auto fp32 = torch::zeros({2}).set_requires_grad(true);
  REQUIRE_THROWS_AS(train::MasterWeights({{"w", fp32}}, train::OptimizerPrecision::compensated), ConfigError);
  REQUIRE_THROWS_WITH(train::MasterWeights({{"w", fp32}}, train::OptimizerPrecision::compensated),
                      Catch::Contains("optimizer_precision") && Catch::Contains("no trainable parameter is bf16"));
  REQUIRE_THROWS_WITH(train::MasterWeights({{"w", half}}, train::OptimizerPrecision::compensated),
                      Catch::Contains("optimizer_precision") && Catch::Contains("fp16"));
  REQUIRE_THROWS_WITH(train::parse_optimizer_precision("bf16"), Catch::Contains("fp32_master") &&
                                                                    Catch::Contains("compensated"));
  // A compensated MasterWeights has no masters: the optimizer steps the parameters themselves.
  train::MasterWeights in_place({{"w", bf16}}, train::OptimizerPrecision::compensated);
  CHECK_FALSE(in_place.mixed());
  CHECK(in_place.masters()[0].is_same(bf16));
  CHECK(dynamic_cast<CompensatedAdamW*>(train::make_adamw(in_place, {}, 0).get()) != nullptr);
}

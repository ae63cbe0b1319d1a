// SPDX-License-Identifier: Apache-2.0
// The fairness check of benchmarks/vs_trl: this library's loss and gradient on a batch TRL trained on
// (trl_side.py --dump-batch), with the same weights. It reads the batch (prompt and completion ids and masks, the
// advantages TRL computed), computes the per-token log-probs with grpo::Policy and the DAPO loss with grpo::GrpoLoss
// (ε 0.2 both sides, β 0, μ 1: the ratio is 1, so the loss's value is −Σ A·|o| / N and its gradient the policy
// gradient), backpropagates, and compares with TRL's numbers: the loss, the per-token log-probs over valid tokens,
// the gradients' global norm and two whole gradient tensors (relative L2 error).
//   fp32: the two sides differ by summation order only, so every figure must agree closely.
//   bf16: each side rounds activations and logits to bf16 (3 significant digits) at its own places, so the two
//   differ by more than rounding of a sum. This library's fp32 result on the same batch is the yardstick: its bf16
//   log-probs and gradients must be no further from it than twice TRL's bf16 ones are.
// Prints one JSON line; exits 1 when a figure is beyond tolerance.
//   loss_on_batch MODEL_DIR BATCH.safetensors fp32|bf16
#include <grpo/grpo.hpp>

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <vector>

namespace {

/// What one side computed on the batch: log-probs of the valid tokens (fp64), the loss, the gradients' global norm
/// and the compared gradient tensors (fp64) by parameter name.
struct Result {
  torch::Tensor log_probs;
  double loss = 0.0;
  double grad_norm = 0.0;
  std::map<std::string, torch::Tensor> grads;
};

double relative_l2(const torch::Tensor& value, const torch::Tensor& reference) {
  return (value - reference).norm().item<double>() / std::max(reference.norm().item<double>(), 1e-30);
}

double mean_abs(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().mean().item<double>(); }

std::vector<std::string> compared_gradients(const grpo::io::SafetensorsFile& batch) {
  std::vector<std::string> names;
  for (const auto& entry : batch.entries()) {
    if (entry.name.starts_with("grad.")) names.push_back(entry.name.substr(5));
  }
  return names;
}

Result trl_result(const grpo::io::SafetensorsFile& batch, const torch::Tensor& valid) {
  Result r;
  r.log_probs = batch.tensor("per_token_logps").to(torch::kFloat64).masked_select(valid);
  r.loss = batch.tensor("loss").item<double>();
  r.grad_norm = batch.tensor("grad_norm").item<double>();
  for (const auto& name : compared_gradients(batch)) r.grads[name] = batch.tensor("grad." + name).to(torch::kFloat64);
  return r;
}

Result our_result(const std::string& model_dir, torch::ScalarType dtype, const grpo::io::SafetensorsFile& batch) {
  auto model = grpo::models::from_pretrained(model_dir, dtype);
  model->train();  // TRL computes the loss in train mode; the model has no dropout, so the mode changes nothing
  grpo::Rollout rollout;
  rollout.prompt_ids = batch.tensor("prompt_ids").to(torch::kInt64);
  rollout.prompt_mask = batch.tensor("prompt_mask").to(torch::kInt64);
  rollout.completion_ids = batch.tensor("completion_ids").to(torch::kInt64);
  rollout.completion_mask = batch.tensor("completion_mask").to(torch::kInt64);
  rollout.truncated = torch::zeros({rollout.batch_size()}, torch::kBool);
  rollout.sampler_log_probs = torch::zeros(rollout.completion_ids.sizes(), torch::kFloat32);
  grpo::Policy policy(model, {.temperature = 1.0});
  const auto log_probs = policy.token_log_probs(rollout).log_probs;
  grpo::GrpoLossOptions options = grpo::recipes::dapo();
  options.policy.epsilon_high = 0.2;
  const grpo::GrpoLoss loss_fn(options);
  const auto out = loss_fn({.log_probs = log_probs, .advantages = batch.tensor("advantages").to(log_probs.dtype()),
                            .mask = rollout.completion_mask},
                           grpo::Normaliser::tokens(batch.tensor("num_items_in_batch").item<double>()));
  out.loss.backward();
  Result r;
  r.log_probs = log_probs.detach().to(torch::kFloat64).masked_select(rollout.completion_mask.to(torch::kBool));
  r.loss = out.loss.item<double>();
  double squares = 0.0;
  for (const auto& p : model->parameters()) {
    if (p.grad().defined()) squares += p.grad().to(torch::kFloat64).square().sum().item<double>();
  }
  r.grad_norm = std::sqrt(squares);
  const auto named = model->named_parameters();
  for (const auto& name : compared_gradients(batch)) {
    const auto* parameter = named.find(name);
    GRPO_CHECK(parameter != nullptr, "loss_on_batch: the model has no parameter {} (named in {})", name,
               batch.path().string());
    r.grads[name] = parameter->grad().to(torch::kFloat64);
  }
  return r;
}

int run(int argc, char** argv) {
  if (argc != 4 || (std::string(argv[3]) != "fp32" && std::string(argv[3]) != "bf16")) {
    std::fprintf(stderr, "usage: loss_on_batch MODEL_DIR BATCH.safetensors fp32|bf16\n");
    return 2;
  }
  const bool bf16 = std::string(argv[3]) == "bf16";
  const grpo::io::SafetensorsFile batch(argv[2]);
  const auto valid = batch.tensor("completion_mask").to(torch::kBool);
  const Result theirs = trl_result(batch, valid);
  const Result ours = our_result(argv[1], bf16 ? torch::kBFloat16 : torch::kFloat32, batch);

  const double loss_error = std::abs(ours.loss - theirs.loss) / std::max(std::abs(theirs.loss), 1e-12);
  const double norm_error = std::abs(ours.grad_norm - theirs.grad_norm) / theirs.grad_norm;
  std::string figures = fmt::format(
      "\"loss\": {:.9g}, \"trl_loss\": {:.9g}, \"logp_max_abs_diff\": {:.3g}, \"logp_mean_abs_diff\": {:.3g}, "
      "\"grad_norm\": {:.6g}, \"trl_grad_norm\": {:.6g}",
      ours.loss, theirs.loss, (ours.log_probs - theirs.log_probs).abs().max().item<double>(),
      mean_abs(ours.log_probs, theirs.log_probs), ours.grad_norm, theirs.grad_norm);
  double worst_grad = 0.0;
  for (const auto& [name, grad] : theirs.grads) {
    const double error = relative_l2(ours.grads.at(name), grad);
    worst_grad = std::max(worst_grad, error);
    figures += fmt::format(", \"grad_rel_l2/{}\": {:.3g}", name, error);
  }
  bool ok = loss_error < 1e-5;
  if (!bf16) {
    ok = ok && (ours.log_probs - theirs.log_probs).abs().max().item<double>() < 2e-4 && norm_error < 1e-4 &&
         worst_grad < 1e-4;
  } else {
    // Distances of each side's bf16 numbers from this library's fp32 ones on the same batch and weights.
    const Result exact = our_result(argv[1], torch::kFloat32, batch);
    const double ours_lp = mean_abs(ours.log_probs, exact.log_probs), trl_lp = mean_abs(theirs.log_probs, exact.log_probs);
    figures += fmt::format(", \"fp32_grad_norm\": {:.6g}, \"ours_vs_fp32_logp_mean_abs\": {:.3g}, "
                           "\"trl_vs_fp32_logp_mean_abs\": {:.3g}",
                           exact.grad_norm, ours_lp, trl_lp);
    ok = ok && ours_lp <= 2 * trl_lp;
    for (const auto& [name, grad] : exact.grads) {
      const double mine = relative_l2(ours.grads.at(name), grad), trl = relative_l2(theirs.grads.at(name), grad);
      figures += fmt::format(", \"ours_vs_fp32_grad_rel_l2/{0}\": {1:.3g}, \"trl_vs_fp32_grad_rel_l2/{0}\": {2:.3g}",
                             name, mine, trl);
      ok = ok && mine <= 2 * trl;
    }
  }
  fmt::print("{{\"dtype\": \"{}\", \"rows\": {}, \"tokens\": {}, {}, \"within_tolerance\": {}}}\n", argv[3],
             valid.size(0), valid.sum().item<int64_t>(), figures, ok);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loss_on_batch: %s\n", e.what());
    return 1;
  }
}

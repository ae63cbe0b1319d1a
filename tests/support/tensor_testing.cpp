// SPDX-License-Identifier: Apache-2.0
#include <support/tensor_testing.hpp>

#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

namespace grpo::testing {

std::string tensor_mismatch(const torch::Tensor& actual, const torch::Tensor& expected, double rtol,
                                   double atol) {
  if (actual.sizes() != expected.sizes()) {
    return "shape " + shape_str(actual) + " != expected " + shape_str(expected);
  }
  auto a = actual.detach().to(torch::kFloat64).contiguous().reshape({-1});
  auto e = expected.detach().to(torch::kFloat64).contiguous().reshape({-1});
  auto a_acc = a.accessor<double, 1>();
  auto e_acc = e.accessor<double, 1>();
  int64_t worst = -1, bad = 0;
  double worst_excess = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a_acc[i], y = e_acc[i];
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) && std::isnan(y)) continue;
      ++bad;
      if (worst < 0 || worst_excess < std::numeric_limits<double>::infinity()) {
        worst = i;
        worst_excess = std::numeric_limits<double>::infinity();
      }
      continue;
    }
    if (std::isinf(x) || std::isinf(y)) {
      if (x == y) continue;
    }
    double excess = std::abs(x - y) - (atol + rtol * std::abs(y));
    if (!(excess <= 0.0)) {
      ++bad;
      if (worst < 0 || excess > worst_excess) {
        worst = i;
        worst_excess = excess;
      }
    }
  }
  if (bad == 0) return "";
  // Unravel the flat index into a multi-index for the report.
  std::ostringstream where;
  int64_t rest = worst;
  std::vector<int64_t> index(actual.dim());
  for (int64_t d = actual.dim() - 1; d >= 0; --d) {
    index[d] = rest % actual.size(d);
    rest /= actual.size(d);
  }
  where << "[";
  for (size_t d = 0; d < index.size(); ++d) where << (d ? ", " : "") << index[d];
  where << "]";
  std::ostringstream out;
  out.precision(12);
  out << bad << " of " << a.numel() << " elements differ (rtol " << rtol << ", atol " << atol << "); worst at "
      << where.str() << ": actual " << a_acc[worst] << ", expected " << e_acc[worst];
  return out.str();
}

torch::Tensor finite_difference_grad(const std::function<torch::Tensor(const torch::Tensor&)>& f,
                                            const torch::Tensor& x, double h) {
  torch::NoGradGuard no_grad;
  auto base = x.detach().clone().contiguous();
  auto grad = torch::zeros_like(base);
  auto flat = base.view({-1});
  auto grad_flat = grad.view({-1});
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const double orig = flat[i].item<double>();
    flat[i] = orig + h;
    const double plus = f(base).item<double>();
    flat[i] = orig - h;
    const double minus = f(base).item<double>();
    flat[i] = orig;
    grad_flat[i] = (plus - minus) / (2 * h);
  }
  return grad;
}

torch::Tensor autograd_grad(const std::function<torch::Tensor(const torch::Tensor&)>& f,
                                   const torch::Tensor& x) {
  auto leaf = x.detach().clone().requires_grad_(true);
  auto y = f(leaf);
  auto grads = torch::autograd::grad({y}, {leaf}, /*grad_outputs=*/{}, /*retain_graph=*/false,
                                     /*create_graph=*/false, /*allow_unused=*/true);
  return grads[0].defined() ? grads[0] : torch::zeros_like(x);
}

}  // namespace grpo::testing

// SPDX-License-Identifier: Apache-2.0
// Causal grouped-query attention at Qwen2.5-0.5B's head shape (14 query heads, 2 key/value heads, head dim 64),
// blocked_attention beside eager_attention (the plain composition: full [B, Hq, T, S] scores, softmax, product,
// autograd's backward), in one run:
//   prefill     no-grad forward (the sampler's prompt pass, the old/reference log-prob passes)
//   train       forward + backward
// Columns: seconds (best of 3), GFLOP/s of the work each one does against torch::mm's fp32 rate measured in this
// run (scores are fp32 in both; eager computes every [T, S] score, blocked only the causal half plus the diagonal
// blocks; backward is 2 products for eager and 2.5 for blocked, which recomputes the scores), the memory held for backward after the forward (RSS with the graph alive minus before), and the peak
// memory added during forward + backward.
//
//   bench_attention [--batch 4] [--tokens 640,1152,2048]
#include <grpo/models/attention.hpp>

#include <support/bench_support.hpp>

#include <fmt/format.h>

#include <malloc.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr int64_t kHeads = 14, kKvHeads = 2, kDim = 64;

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

double fp32_matmul_rate() {
  auto a = torch::randn({2048, 64}), b = torch::randn({64, 2048});
  const double seconds =
      grpo::bench::best_seconds([&] { benchmark::DoNotOptimize(torch::matmul(a, b).data_ptr()); }, 3);
  return 2.0 * 2048 * 64 * 2048 / seconds;
}

struct Result {
  double prefill_s = 0, train_s = 0, kept_gib = 0, peak_gib = 0;
};

/// Times (measure_memory false) or memory (true) of one implementation.
Result measure(bool blocked, int64_t batch, int64_t tokens, torch::ScalarType dtype, bool measure_memory) {
  torch::manual_seed(0);
  auto q = torch::randn({batch, kHeads, tokens, kDim}).to(dtype).requires_grad_(true);
  auto k = torch::randn({batch, kKvHeads, tokens, kDim}).to(dtype).requires_grad_(true);
  auto v = torch::randn({batch, kKvHeads, tokens, kDim}).to(dtype).requires_grad_(true);
  const auto segments = torch::ones({batch, tokens}, torch::kInt64);
  auto run = [&] {
    return blocked ? grpo::models::blocked_attention(q, k, v, segments)
                   : grpo::models::eager_attention(q, k, v, segments);
  };
  Result r;
  const auto weights = torch::randn({batch, kHeads, tokens, kDim}).to(dtype);
  if (!measure_memory) {
    r.prefill_s = grpo::bench::best_seconds(
        [&] {
          torch::NoGradGuard no_grad;
          benchmark::DoNotOptimize(run().data_ptr());
        },
        3);
    r.train_s = grpo::bench::best_seconds(
        [&] {
          (run() * weights).sum().backward();
          q.mutable_grad() = k.mutable_grad() = v.mutable_grad() = torch::Tensor();
        },
        3);
    return r;
  }
  malloc_trim(0);  // return the free memory of earlier runs, so that new tensors show in the resident size
  grpo::bench::PeakMemory peak;
  {
    const int64_t before = grpo::bench::proc_status_bytes("VmRSS");
    auto out = run();
    r.kept_gib = gib(grpo::bench::proc_status_bytes("VmRSS") - before);
    (out * weights).sum().backward();
  }
  r.peak_gib = gib(peak.extra_bytes());
  return r;
}

}  // namespace

/// Memory of one configuration measured by this program run again in a fresh process (--memory-of), where every
/// allocation of 256 KiB or more is its own mapping, returned when freed, so that resident memory follows the live
/// tensors (glibc otherwise raises that threshold after the first large free and keeps later blocks resident, and a
/// process that ran other configurations carries their heap). Timing stays in this process, with the allocator a
/// training run has.
Result memory_in_fresh_process(bool blocked, int64_t batch, int64_t tokens, torch::ScalarType dtype) {
  const std::string command = fmt::format("/proc/{}/exe --memory-of {},{},{},{}", ::getpid(), blocked ? 1 : 0, batch,
                                          tokens, dtype == torch::kFloat32 ? "fp32" : "bf16");
  FILE* pipe = ::popen(command.c_str(), "r");
  Result r;
  if (pipe == nullptr || std::fscanf(pipe, "%lf %lf", &r.kept_gib, &r.peak_gib) != 2) r.kept_gib = r.peak_gib = NAN;
  if (pipe != nullptr) ::pclose(pipe);
  return r;
}

/// The --memory-of child: prints "kept peak" (GiB) of one configuration.
int print_memory_of(const std::string& spec) {
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  mallopt(M_TRIM_THRESHOLD, 256 * 1024);
  int blocked = 0;
  long long batch = 0, tokens = 0;
  char dtype[8] = {};
  if (std::sscanf(spec.c_str(), "%d,%lld,%lld,%4s", &blocked, &batch, &tokens, dtype) != 4) return 2;
  const auto r = measure(blocked != 0, batch, tokens, std::string(dtype) == "fp32" ? torch::kFloat32 : torch::kBFloat16,
                         true);
  fmt::print("{} {}\n", r.kept_gib, r.peak_gib);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--memory-of") return print_memory_of(argv[2]);
  int64_t batch = 4;
  std::vector<int64_t> token_counts = {640, 1152, 2048};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--batch") {
      batch = std::stoll(value);
    } else if (flag == "--tokens") {
      token_counts.clear();
      for (const std::string& entry : grpo::bench::split_commas(value)) token_counts.push_back(std::stoll(entry));
    } else {
      fmt::print(stderr, "bench_attention: unknown flag {} (--batch, --tokens)\n", flag);
      return 2;
    }
  }
  grpo::bench::use_all_hardware_threads();
  const double peak_rate = fp32_matmul_rate();
  fmt::print("causal GQA attention, {} query / {} key-value heads, head dim {}, batch {}; {} threads; fp32 matmul "
             "{:.0f} GFLOP/s at [2048, 64] x [64, 2048]\n",
             kHeads, kKvHeads, kDim, batch, at::get_num_threads(), peak_rate / 1e9);
  fmt::print("{:<6} {:>5} {:<8} {:>10} {:>8} {:>10} {:>8} {:>9} {:>9}\n", "dtype", "T", "impl", "prefill_s", "of_peak",
             "train_s", "of_peak", "kept_GB", "peak_GB");
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (int64_t tokens : token_counts) {
      Result eager, blocked;
      for (bool is_blocked : {false, true}) {
        auto r = measure(is_blocked, batch, tokens, dtype, false);
        const auto memory = memory_in_fresh_process(is_blocked, batch, tokens, dtype);
        r.kept_gib = memory.kept_gib;
        r.peak_gib = memory.peak_gib;
        // Score and output products: 2 · (2·B·Hq·T·S·D); blocked reads only keys up to each block's last query.
        const double pairs = is_blocked ? 0.5 * tokens * (tokens + 1.0) : 1.0 * tokens * tokens;
        const double forward_flops = 4.0 * batch * kHeads * pairs * kDim;
        fmt::print("{:<6} {:>5} {:<8} {:>10.3f} {:>7.1f}% {:>10.3f} {:>7.1f}% {:>9.3f} {:>9.3f}\n",
                   dtype == torch::kFloat32 ? "fp32" : "bf16", tokens, is_blocked ? "blocked" : "eager", r.prefill_s,
                   100.0 * forward_flops / r.prefill_s / peak_rate, r.train_s,
                   100.0 * (is_blocked ? 3.5 : 3.0) * forward_flops / r.train_s / peak_rate, r.kept_gib, r.peak_gib);
        (is_blocked ? blocked : eager) = r;
      }
      fmt::print("{:<6} {:>5} blocked/eager: prefill time {:.2f}, train time {:.2f}, kept memory {:.3f}, peak memory "
                 "{:.3f}\n",
                 "", tokens, blocked.prefill_s / eager.prefill_s, blocked.train_s / eager.train_s,
                 blocked.kept_gib / eager.kept_gib, blocked.peak_gib / eager.peak_gib);
    }
  }
  return 0;
}

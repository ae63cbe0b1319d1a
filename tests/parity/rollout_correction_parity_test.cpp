// SPDX-License-Identifier: Apache-2.0
// verl's rollout correction (volcengine/verl @ b178a3cd56f58b2d502255daba591e92833930a7,
// verl/trainer/ppo/rollout_corr_helper.py, transcribed in references.hpp): parse_rollout_rejection against
// _parse_rollout_rs_thresholds, rollout_rejection_mask against compute_rollout_rejection_mask (exact masks),
// sampler_correction_weights (token/sequence_truncate, log_ratio_bound 20, batch_normalize) against
// compute_rollout_correction_weights (1e-12 relative), and GrpoLoss with rollout_rejection against verl's vanilla
// policy loss aggregated on the modified response mask (dp_actor.py), with and without rollout IS weights.
#include <grpo/core/error.hpp>
#include <grpo/loss/grpo_loss.hpp>
#include <grpo/loss/importance_correction.hpp>
#include <grpo/loss/rollout_correction.hpp>

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "parity/parity_support.hpp"
#include "parity/references.hpp"

namespace {

using grpo::GrpoLossOptions;
using grpo::LossImplementation;
using grpo::LossType;
using grpo::PolicyLossType;
using grpo::RolloutRejectionCriterion;
using grpo::RolloutStatistic;
using grpo::SamplerCorrectionMode;
using parity::Batch;
namespace ref = parity::ref;

/// verl's option names, written here (not taken from the library's name table).
const std::map<std::string, RolloutStatistic>& statistic_by_name() {
  static const std::map<std::string, RolloutStatistic> m{
      {"token_k1", RolloutStatistic::token_k1},       {"token_k2", RolloutStatistic::token_k2},
      {"token_k3", RolloutStatistic::token_k3},       {"seq_sum_k1", RolloutStatistic::seq_sum_k1},
      {"seq_sum_k2", RolloutStatistic::seq_sum_k2},   {"seq_sum_k3", RolloutStatistic::seq_sum_k3},
      {"seq_mean_k1", RolloutStatistic::seq_mean_k1}, {"seq_mean_k2", RolloutStatistic::seq_mean_k2},
      {"seq_mean_k3", RolloutStatistic::seq_mean_k3}, {"seq_max_k2", RolloutStatistic::seq_max_k2},
      {"seq_max_k3", RolloutStatistic::seq_max_k3}};
  return m;
}

std::string describe(const std::vector<RolloutRejectionCriterion>& criteria) {
  std::string s;
  for (const auto& c : criteria) {
    for (const auto& [name, stat] : statistic_by_name())
      if (stat == c.statistic) s += name;
    s += '(';
    s += std::to_string(c.lower);
    s += ", ";
    s += std::to_string(c.upper);
    s += ") ";
  }
  return s;
}

/// The reference's outcome for a spec: the thresholds, or the parameter its ValueError is about.
struct RefParse {
  std::optional<std::vector<ref::VerlRsThreshold>> thresholds;
  std::string error_parameter;  // "rollout_rs" or "rollout_rs_threshold"
  std::string error;
};

RefParse ref_parse(const std::string& rs, const std::string& thr) {
  RefParse r;
  std::vector<std::string> options;
  try {
    options = ref::verl_rollout_rs_options(rs);
  } catch (const std::invalid_argument& e) {
    r.error_parameter = "rollout_rs";
    r.error = e.what();
    return r;
  }
  try {
    r.thresholds = ref::verl_parse_rollout_rs_thresholds(options, thr);
  } catch (const std::invalid_argument& e) {
    r.error_parameter = "rollout_rs_threshold";
    r.error = e.what();
  }
  return r;
}

/// Library parse vs reference parse: same criteria in order (k1: lower and upper; k2/k3: upper), or ConfigError
/// naming the parameter at fault.
void check_parse(const std::string& rs, const std::string& thr) {
  INFO("rollout_rs '" << rs << "', rollout_rs_threshold '" << thr << "'");
  const RefParse expected = ref_parse(rs, thr);
  if (!expected.thresholds) {
    INFO("verl raises: " << expected.error);
    try {
      const auto got = grpo::parse_rollout_rejection(rs, thr);
      FAIL_CHECK("library accepted it: " << describe(got));
    } catch (const grpo::ConfigError& e) {
      INFO("library ConfigError: " << e.what());
      CHECK(std::string(e.what()).find(expected.error_parameter) != std::string::npos);
    } catch (const std::exception& e) {
      FAIL_CHECK("library threw something other than ConfigError: " << e.what());
    }
    return;
  }
  std::vector<RolloutRejectionCriterion> got;
  try {
    got = grpo::parse_rollout_rejection(rs, thr);
  } catch (const std::exception& e) {
    FAIL_CHECK("library threw: " << e.what());
    return;
  }
  INFO("library: " << describe(got));
  REQUIRE(got.size() == expected.thresholds->size());
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& e = (*expected.thresholds)[i];
    INFO("criterion " << i << ": verl " << e.option << " lower "
                      << (e.lower ? std::to_string(*e.lower) : std::string("None")) << " upper " << e.upper);
    CHECK(got[i].statistic == statistic_by_name().at(e.option));
    CHECK(got[i].upper == e.upper);
    if (e.lower) CHECK(got[i].lower == *e.lower);
  }
}

/// Rejection edge batch [7, 5] with log ratios old − sampler: row 0 small; row 1 empty; row 2 a single token (0.3);
/// row 3 +30, −30, 0.1, 0 (beyond the safety bound both ways); row 4 −30 then small; row 5 25, 22, 21 (sum and
/// mean beyond 20); row 6 moderate (±0.7).
Batch rollout_edge_batch() {
  const int64_t B = 7, T = 5;
  torch::manual_seed(9090);
  Batch b;
  b.name = "rollout-edge";
  const std::vector<int64_t> lengths{5, 0, 1, 4, 5, 3, 5};
  b.mask = torch::zeros({B, T}, torch::kBool);
  for (int64_t i = 0; i < B; ++i) b.mask[i].slice(0, 0, lengths[i]).fill_(true);
  b.lp = -torch::rand({B, T}, parity::kF64) * 2.0 - 0.1;
  b.old = b.lp - 0.2 * torch::randn({B, T}, parity::kF64);
  auto lr = 0.05 * torch::randn({B, T}, parity::kF64);
  const std::vector<std::vector<double>> rows{
      {}, {}, {0.3}, {30.0, -30.0, 0.1, 0.0}, {-30.0, 0.02, -0.05, 0.01, 0.03}, {25.0, 22.0, 21.0},
      {-0.7, 0.69, 0.2, -0.1, 0.4}};
  for (int64_t i = 0; i < B; ++i)
    for (size_t t = 0; t < rows[i].size(); ++t) lr[i][static_cast<int64_t>(t)] = rows[i][t];
  b.sampler = b.old - lr;
  b.ref = b.lp + 0.3 * torch::randn({B, T}, parity::kF64);
  b.adv = torch::tensor({0.7, 1.1, -0.4, 1.3, -0.9, -1.3, 0.8}, parity::kF64);
  b.adv_tok = (b.adv.unsqueeze(1) + 0.3 * torch::randn({B, T}, parity::kF64)) * b.mask.to(torch::kFloat64);
  b.entropy = (torch::rand({B, T}, parity::kF64) * 2.0).to(torch::kFloat32).to(torch::kFloat64);
  b.truncated = torch::zeros({B}, torch::kBool);
  b.truncated[0] = true;
  b.old = parity::clean(b.old, b.mask, b.lp);
  b.ref = parity::clean(b.ref, b.mask, b.lp);
  b.sampler = parity::clean(b.sampler, b.mask, b.old);
  parity::add_garbage(b);
  return b;
}

/// Boundary batch [3, 4] whose log ratios are exact: row 0 four tokens of +0.5 (token k2 = 0.125 exactly, sum 0.5,
/// verl's mean 0.5 / (4 + 1e-8)); row 1 two tokens −log 2, +log 2 (k1 = ±log 2, sum 0); row 2 four tokens of −0.5
/// (k1 = 0.5, sum 2, verl's mean 2 / (4 + 1e-8)).
Batch boundary_batch() {
  const int64_t B = 3, T = 4;
  const double l2 = std::log(2.0);
  Batch b;
  b.name = "boundary";
  b.mask = torch::ones({B, T}, torch::kBool);
  b.mask[1].slice(0, 2, 4).fill_(false);
  b.old = torch::full({B, T}, -1.0, parity::kF64);
  b.sampler = torch::full({B, T}, -1.5, parity::kF64);  // row 0: −1 − (−1.5) = 0.5
  b.old[1][0] = -l2, b.sampler[1][0] = 0.0;             // −log 2
  b.old[1][1] = 0.0, b.sampler[1][1] = -l2;             // +log 2
  b.sampler[2].fill_(-0.5);                             // −1 − (−0.5) = −0.5
  b.lp = b.old.clone();
  b.ref = b.lp.clone();
  b.adv = torch::tensor({0.5, -0.5, 1.0}, parity::kF64);
  b.adv_tok = b.adv.unsqueeze(1) * b.mask.to(torch::kFloat64);
  b.entropy = torch::ones({B, T}, parity::kF64);
  b.truncated = torch::zeros({B}, torch::kBool);
  b.old = parity::clean(b.old, b.mask, b.lp);
  b.sampler = parity::clean(b.sampler, b.mask, b.old);
  parity::add_garbage(b);
  return b;
}

std::vector<Batch> mask_batches() {
  auto batches = parity::standard_batches();
  batches.push_back(rollout_edge_batch());
  batches.push_back(parity::random_batch(16, 33, 8));
  batches.push_back(parity::all_masked_batch());
  return batches;
}

torch::Tensor ref_mask(const Batch& b, const std::string& rs, const std::string& thr) {
  return ref::verl_compute_rollout_rejection_mask(b.old - b.sampler, b.maskf(), rs, thr);
}

/// Library mask (garbage-padded log-probs) vs verl's modified_response_mask, exact. Returns whether verl's mask
/// rejected some but not all valid tokens (the case is informative).
bool check_mask(const Batch& b, const std::string& rs, const std::string& thr) {
  INFO("rollout_rs '" << rs << "', rollout_rs_threshold '" << thr << "', batch " << b.name);
  auto expected = ref_mask(b, rs, thr);
  torch::Tensor got;
  try {
    const auto criteria = grpo::parse_rollout_rejection(rs, thr);
    got = grpo::rollout_rejection_mask(b.old_lib, b.sampler_lib, b.mask, criteria);
  } catch (const std::exception& e) {
    FAIL_CHECK("library threw: " << e.what());
    return false;
  }
  CHECK(got.scalar_type() == torch::kBool);  // mask's dtype (documented: bool stays bool)
  auto gotf = got.to(torch::kFloat64);
  INFO("verl mask\n" << expected << "\nlibrary mask\n" << gotf);
  CHECK(torch::equal(gotf, expected));
  const double kept = expected.sum().item<double>(), valid = b.maskf().sum().item<double>();
  return kept > 0 && kept < valid;
}

const std::vector<std::string>& k1_specs() {
  static const std::vector<std::string> s{"0.8_1.25", "0.9_1.1", "1.15", "0.95_1.3", "0.5_2.0",
                                          "0.6_1.8",  "0.3_3.0", "1e-10_1e10", "1.5", "0.9", "2.0_0.5"};
  return s;
}
const std::vector<std::string>& k23_specs() {
  static const std::vector<std::string> s{"0.001", "0.005", "0.02", "0.05", "0.2", "2", "25", "300", "1e9"};
  return s;
}

/// verl's dp_actor vanilla loss with dual clip (c = 3), clip 0.2 / 0.28.
const ref::VerlActorConfig kVanilla{.clip_ratio_low = 0.2, .clip_ratio_high = 0.28, .clip_ratio_c = 3.0};

GrpoLossOptions vanilla_options(LossType type) {
  GrpoLossOptions o;
  o.loss_type = type;
  o.policy.type = PolicyLossType::ppo_clip;
  o.policy.epsilon_low = 0.2;
  o.policy.epsilon_high = 0.28;
  o.policy.dual_clip_c = 3.0;
  return o;
}

/// verl rollout_is (None = ""), threshold, batch normalise.
struct RolloutIs {
  std::string level;
  double threshold = 2.0;
  bool batch_normalize = false;
};

void apply_is(GrpoLossOptions& o, const RolloutIs& is) {
  if (is.level.empty()) return;
  o.sampler_correction.mode =
      is.level == "token" ? SamplerCorrectionMode::token_truncate : SamplerCorrectionMode::sequence_truncate;
  o.sampler_correction.clip_min = std::nullopt;
  o.sampler_correction.clip_max = is.threshold;
  o.sampler_correction.log_ratio_bound = ref::kVerlSafetyBound;
  o.sampler_correction.batch_normalize = is.batch_normalize;
}

struct AggMode {
  std::string verl;
  LossType type;
};

/// compute_rollout_correction_and_rejection_mask (lines 716-831) then dp_actor's vanilla loss + agg_loss on the
/// modified response_mask (compute_rollout_correction_and_add_to_batch line 991 replaces response_mask). IS weights
/// are computed on the response_mask before rejection (line 785-790). `base_mask` is verl's response_mask.
torch::Tensor verl_reference_loss(const Batch& b, const torch::Tensor& old, const torch::Tensor& lp,
                                  const torch::Tensor& base_mask, bool per_token, const std::string& rs,
                                  const std::string& thr, const RolloutIs& is, const std::string& agg) {
  auto log_ratio = old - b.sampler;
  auto modified = ref::verl_compute_rollout_rejection_mask(log_ratio, base_mask, rs, thr);
  torch::Tensor w;
  if (!is.level.empty())
    w = ref::verl_compute_rollout_correction_weights(log_ratio, base_mask, is.level, is.threshold, is.batch_normalize);
  auto adv = per_token ? b.adv_tok : b.adv.unsqueeze(1) * base_mask;
  auto mat = ref::verl_vanilla_pg_losses(old, lp, adv, kVanilla, w);
  return ref::verl_agg_loss(mat, modified, agg);
}

/// GrpoLoss(options) with the given old log-probs (undefined = none) and truncation flags.
torch::Tensor library_loss(const GrpoLossOptions& o, const Batch& b, const torch::Tensor& old_lib,
                           const torch::Tensor& lp, const torch::Tensor& entropy, bool per_token) {
  grpo::GrpoLoss loss(o);
  grpo::LossInputs inputs{.log_probs = lp,
                          .old_log_probs = old_lib,
                          .ref_log_probs = b.ref_lib,
                          .advantages = per_token ? b.adv_tok : b.adv,
                          .mask = b.mask,
                          .entropy = entropy,
                          .sampler_log_probs = b.sampler_lib,
                          .truncated = b.truncated};
  return loss(inputs, loss.local_normaliser(inputs)).loss;
}

/// verl divides by zero when rejection removed every token; the library documents loss 0 and zero gradients.
void check_zero(const parity::LossFn& library, const Batch& b) {
  INFO("verl's modified mask is empty: the library must give 0 and zero gradients");
  try {
    auto e = parity::evaluate(library, b.lp, b.entropy);
    CHECK(e.value.item<double>() == 0.0);
    CHECK(e.grad_lp.abs().max().item<double>() == 0.0);
  } catch (const std::exception& e) {
    FAIL_CHECK("library threw: " << e.what());
  }
}

struct LossCase {
  std::string rs, thr;
};

const std::vector<LossCase>& loss_cases() {
  static const std::vector<LossCase> c{{"token_k1", "0.8_1.25"},
                                       {"seq_mean_k3", "0.01"},
                                       {"seq_sum_k1", "0.6_1.8"},
                                       {"token_k2,seq_max_k3", "0.02,0.05"},
                                       {"token_k1,seq_mean_k3,seq_sum_k2", "0.95_1.3,0.01,0.1"},
                                       {"seq_max_k2", "300"}};
  return c;
}

void run_loss(const std::vector<RolloutIs>& is_list, bool old_defined, bool mask_truncated) {
  const std::vector<AggMode> modes{{"token-mean", LossType::token_mean},
                                   {"seq-mean-token-mean", LossType::seq_mean_token_mean}};
  std::vector<Batch> batches = parity::standard_batches();
  batches.push_back(rollout_edge_batch());
  for (const auto& mode : modes) {
    for (const auto& lc : loss_cases()) {
      for (const auto& is : is_list) {
        GrpoLossOptions o = vanilla_options(mode.type);
        o.rollout_rejection = grpo::parse_rollout_rejection(lc.rs, lc.thr);
        o.mask_truncated_completions = mask_truncated;
        apply_is(o, is);
        for (const bool per_token : {false, true}) {
          for (const auto& b : batches) {
            for (const auto implementation : {LossImplementation::automatic, LossImplementation::generic}) {
              o.implementation = implementation;
              INFO("loss_agg_mode " << mode.verl << ", rollout_rs '" << lc.rs << "' threshold '" << lc.thr
                                    << "', rollout_is "
                                    << (is.level.empty() ? std::string("None")
                                                         : is.level + " " + std::to_string(is.threshold) +
                                                               (is.batch_normalize ? " batch-normalised" : ""))
                                    << ", advantages " << (per_token ? "[B, T]" : "[B]") << ", batch " << b.name
                                    << (old_defined ? "" : ", no old log-probs (log_probs.detach())")
                                    << (mask_truncated ? ", mask_truncated_completions" : "") << ", implementation "
                                    << grpo::to_string(implementation));
              auto base_mask = b.maskf();
              if (mask_truncated) base_mask = base_mask * (~b.truncated).to(torch::kFloat64).unsqueeze(1);
              auto library = [&](const torch::Tensor& lp, const torch::Tensor& entropy) {
                return library_loss(o, b, old_defined ? b.old_lib : torch::Tensor(), lp, entropy, per_token);
              };
              const torch::Tensor old_for_ref = old_defined ? b.old : b.lp;  // lp.detach() at the evaluation point
              const auto kept =
                  ref::verl_compute_rollout_rejection_mask(old_for_ref - b.sampler, base_mask, lc.rs, lc.thr);
              if (kept.sum().item<double>() == 0) {
                check_zero(library, b);
                continue;
              }
              parity::check_parity(library,
                                   [&](const torch::Tensor& lp, const torch::Tensor&) {
                                     return verl_reference_loss(b, old_for_ref, lp, base_mask, per_token, lc.rs,
                                                                lc.thr, is, mode.verl);
                                   },
                                   b);
            }
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("parse_rollout_rejection matches verl _parse_rollout_rs_thresholds", "[parity][rollout]") {
  const std::vector<std::pair<std::string, std::string>> cases{
      // one option
      {"token_k1", "0.5_2.0"},
      {"token_k1", "2.0"},
      {"token_k1", "1.2"},
      {"token_k2", "0.01"},
      {"token_k3", "0.5"},
      {"seq_sum_k1", "0.1_10"},
      {"seq_sum_k2", "3"},
      {"seq_sum_k3", "1e-3"},
      {"seq_mean_k1", "0.999_1.001"},
      {"seq_mean_k1", "1.001"},
      {"seq_mean_k2", "0.05"},
      {"seq_mean_k3", "0.01"},
      {"seq_max_k2", "2.5"},
      {"seq_max_k3", "7"},
      // several options, one threshold each
      {"token_k1,seq_mean_k3", "0.5_2.0,0.01"},
      {"token_k1,seq_mean_k3", "1.5,0.01"},
      {"seq_max_k2,token_k1,seq_sum_k1", "0.3,0.9_1.1,4"},
      {"token_k2,token_k3,seq_sum_k2,seq_sum_k3,seq_mean_k2,seq_mean_k3,seq_max_k2,seq_max_k3",
       "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8"},
      // one threshold shared by several options (k1 then takes lower = 1/upper)
      {"token_k1,token_k2,seq_max_k3", "1.5"},
      {"seq_sum_k1,seq_mean_k1", "3"},
      {"token_k2,seq_mean_k3,seq_max_k2", "0.02"},
      {"token_k1,seq_sum_k1", "0.5_2"},  // shared "lower_upper" for k1-only options
      // whitespace and empty parts (Python strips and drops them); duplicates dropped before counting
      {" token_k1 , seq_mean_k3 ", " 0.5_2.0 , 0.01 "},
      {"token_k1,,seq_mean_k3,", "0.5_2.0,,0.01"},
      {"token_k1,token_k1", "0.5_2.0"},
      {"token_k1,seq_mean_k3,token_k1", "0.5_2.0,0.01"},
      // errors: options
      {"", "1.0"},
      {" , ", "1.0"},
      {"token_k4", "1.0"},
      {"seq_max_k1", "1.0"},
      {"TOKEN_K1", "1.0"},
      {"token_k1;seq_mean_k3", "1.0"},
      {"geometric", "1.0"},
      // errors: thresholds
      {"token_k1", ""},
      {"token_k1", " , "},
      {"token_k1,seq_mean_k3", "0.5_2.0,0.01,0.3"},
      {"token_k1,seq_mean_k3,seq_max_k2", "0.5_2.0,0.01"},
      {"token_k1,token_k1", "0.5_2.0,0.8_1.2"},  // one option after deduplication, two thresholds
      {"token_k2", "0.1_0.2"},
      {"seq_mean_k3", "_0.2"},
      {"token_k1,seq_max_k2", "0.5_2"},  // the shared "0.5_2" reaches seq_max_k2
      {"token_k2", "0"},
      {"token_k2", "-0.1"},
      {"seq_max_k3", "abc"},
      {"token_k1", "0"},
      {"token_k1", "-2"},
      {"token_k1", "0_2"},
      {"token_k1", "0.5_0"},
      {"token_k1", "-0.5_2"},
      {"token_k1", "0.5_"},
      {"token_k1", "_2"},
      {"token_k1", "x_2"},
      {"seq_sum_k1", "two"},
  };
  for (const auto& [rs, thr] : cases) check_parse(rs, thr);
}

TEST_CASE("parse_rollout_rejection accepts Python float spellings and unordered k1 bounds", "[parity][rollout]") {
  // Accepted by Python's float() and by _parse_rollout_rs_thresholds (which checks positivity only, not lower <=
  // upper and not finiteness): verl parses them, so should the library.
  const std::vector<std::pair<std::string, std::string>> cases{
      {"token_k2", "+0.5"},       {"token_k2", ".5"},        {"token_k2", "5."},     {"token_k2", "1E-2"},
      {"token_k2", "1e+1"},       {"token_k1", "0.5 _ 2"},   {"token_k1", "2.0_0.5"},  // lower > upper
      {"token_k1", "0.9"},  // single upper < 1: lower = 1/0.9 > upper (verl then rejects every token)
      {"token_k2", "inf"},        {"token_k1", "0.5_inf"},   {"seq_max_k3", "Infinity"},
  };
  for (const auto& [rs, thr] : cases) check_parse(rs, thr);
}

TEST_CASE("rollout_rejection_mask matches verl compute_rollout_rejection_mask for each option", "[parity][rollout]") {
  const auto batches = mask_batches();
  for (const auto& [name, stat] : statistic_by_name()) {
    const bool k1 = name.size() >= 2 && name.substr(name.size() - 2) == "k1";
    int informative = 0;
    for (const auto& thr : k1 ? k1_specs() : k23_specs())
      for (const auto& b : batches) informative += check_mask(b, name, thr) ? 1 : 0;
    INFO("option " << name << ": cases where verl rejects some but not all valid tokens");
    CHECK(informative >= 3);  // the thresholds exercise the option
  }
}

TEST_CASE("rollout_rejection_mask matches verl for chained options", "[parity][rollout]") {
  const auto batches = mask_batches();
  const std::vector<std::pair<std::string, std::string>> cases{
      {"token_k1,seq_mean_k3", "0.8_1.25,0.01"},
      {"token_k1,seq_mean_k3", "0.5_2.0,0.005"},
      {"seq_sum_k1,seq_max_k2", "0.6_1.8,0.05"},
      {"token_k2,token_k3", "0.02,0.02"},
      {"seq_mean_k1,seq_sum_k3,seq_max_k3", "0.9_1.1,0.1,0.05"},
      {"token_k1,token_k2,seq_max_k3", "1.3"},
      {"seq_max_k3,token_k1", "0.05,1e-10_1e10"},
      {"token_k1,seq_sum_k2", "1e-10_1e10,300"},
      {"seq_sum_k3,seq_mean_k2", "1e9,25"},
      {"token_k1,token_k2,token_k3,seq_sum_k1,seq_sum_k2,seq_sum_k3,seq_mean_k1,seq_mean_k2,seq_mean_k3,seq_max_k2,"
       "seq_max_k3",
       "0.5_2.0,0.2,0.2,0.3_3.0,0.5,0.5,0.8_1.25,0.05,0.05,0.2,0.2"},
      {"token_k1,token_k2,token_k3,seq_sum_k1,seq_sum_k2,seq_sum_k3,seq_mean_k1,seq_mean_k2,seq_mean_k3,seq_max_k2,"
       "seq_max_k3",
       "2.5"},
      {"seq_mean_k3,token_k1,seq_mean_k3", "0.02,0.8_1.25"},
  };
  int informative = 0;
  for (const auto& [rs, thr] : cases)
    for (const auto& b : batches) informative += check_mask(b, rs, thr) ? 1 : 0;
  CHECK(informative >= 10);
}

TEST_CASE("rollout_rejection_mask matches verl at exact thresholds", "[parity][rollout]") {
  // Inclusive comparisons in log space (rollout_corr_helper.py 275, 289, 308: stat >= log(lower), stat <=
  // log(upper); k2/k3 stat <= upper) and verl's seq_mean = masked_mean = Σ / (n + 1e-8) (torch_functional.py 301).
  const auto b = boundary_batch();
  const std::vector<std::pair<std::string, std::string>> cases{
      {"token_k2", "0.125"},          // row 0: k2 = 0.125 exactly, kept
      {"seq_max_k2", "0.125"},        // row 0 kept
      {"seq_sum_k2", "0.5"},          // row 0 kept
      {"seq_mean_k2", "0.125"},       // row 0 kept
      {"seq_mean_k2", "0.12499999985"},  // verl's mean 0.125·4/(4 + 1e-8) ≈ 0.1249999996875 is below: row 0 kept
      {"token_k1", "0.5_2"},          // row 1: k1 = ±log 2 on the bounds, kept
      {"token_k1", "2"},              // same bounds from one value
      {"seq_sum_k1", "1_1"},          // row 1: Σ k1 = 0 = log 1, kept
      {"seq_mean_k1", "0.1_1.6487212697"},  // row 2: verl's mean 2/(4 + 1e-8) < log(1.6487212697) < 0.5: kept
  };
  for (const auto& [rs, thr] : cases) check_mask(b, rs, thr);
}

TEST_CASE("rollout_rejection_mask keeps the mask dtype and handles an empty batch", "[parity][rollout]") {
  auto b = parity::random_batch(6, 7, 1);
  const auto criteria = grpo::parse_rollout_rejection("token_k1,seq_mean_k3", "0.8_1.25,0.01");
  auto expected = ref_mask(b, "token_k1,seq_mean_k3", "0.8_1.25,0.01");
  auto as_float = grpo::rollout_rejection_mask(b.old_lib, b.sampler_lib, b.maskf(), criteria);
  CHECK(as_float.scalar_type() == torch::kFloat64);
  CHECK(torch::equal(as_float, expected));
  // verl returns response_mask unchanged for a batch of 0 rows (line 200).
  auto empty = torch::zeros({0, 7}, parity::kF64);
  auto got = grpo::rollout_rejection_mask(empty, empty, empty.to(torch::kBool), criteria);
  CHECK(got.sizes() == torch::IntArrayRef({0, 7}));
}

TEST_CASE("sampler_correction_weights match verl compute_rollout_correction_weights", "[parity][rollout]") {
  const auto batches = mask_batches();
  for (const std::string level : {"token", "sequence"}) {
    for (const double threshold : {2.0, 1.05, 5.0, 1e10}) {
      for (const bool normalize : {false, true}) {
        for (const auto& b : batches) {
          INFO("rollout_is " << level << ", rollout_is_threshold " << threshold << ", batch_normalize " << normalize
                             << ", batch " << b.name);
          grpo::SamplerCorrectionOptions options;
          options.mode =
              level == "token" ? SamplerCorrectionMode::token_truncate : SamplerCorrectionMode::sequence_truncate;
          options.clip_max = threshold;
          options.log_ratio_bound = ref::kVerlSafetyBound;
          options.batch_normalize = normalize;
          torch::Tensor lib;
          try {
            lib = grpo::sampler_correction_weights(b.old_lib, b.sampler_lib, b.mask, options);
          } catch (const std::exception& e) {
            FAIL_CHECK("library threw: " << e.what());
            continue;
          }
          auto expected = ref::verl_compute_rollout_correction_weights(b.old - b.sampler, b.maskf(), level,
                                                                       threshold, normalize);
          // Compared where the loss uses them (valid tokens); verl's are 0 at padding.
          const std::string mismatch = grpo::testing::tensor_mismatch(lib * b.maskf(), expected, 1e-12, 0.0);
          INFO("verl\n" << expected << "\nlibrary\n" << lib * b.maskf() << "\n" << mismatch);
          CHECK(mismatch.empty());
        }
      }
    }
  }
}

TEST_CASE("sampler_correction_weights need log_ratio_bound 20 for verl beyond the safety bound", "[parity][rollout]") {
  // Without log_ratio_bound the library is TRL's exp(log ρ) truncated above only: equal to verl while |log ρ| (the
  // row sum at sequence level) stays within SAFETY_BOUND = 20, different below −20 (verl's exp(−20) floor, lines
  // 533 and 543).
  for (const std::string level : {"token", "sequence"}) {
    grpo::SamplerCorrectionOptions options;
    options.mode = level == "token" ? SamplerCorrectionMode::token_truncate : SamplerCorrectionMode::sequence_truncate;
    options.clip_max = 2.0;
    for (const auto& b : parity::standard_batches()) {
      INFO("rollout_is " << level << " threshold 2 without log_ratio_bound, batch " << b.name);
      auto lib = grpo::sampler_correction_weights(b.old_lib, b.sampler_lib, b.mask, options);
      auto expected = ref::verl_compute_rollout_correction_weights(b.old - b.sampler, b.maskf(), level, 2.0, false);
      CHECK(grpo::testing::tensor_mismatch(lib * b.maskf(), expected, 1e-12, 0.0).empty());
    }
    const auto b = rollout_edge_batch();  // row 3 (token −30) and row 4 (token −30, sum ≈ −30)
    auto lib = grpo::sampler_correction_weights(b.old_lib, b.sampler_lib, b.mask, options);
    auto expected = ref::verl_compute_rollout_correction_weights(b.old - b.sampler, b.maskf(), level, 2.0, false);
    INFO("rollout_is " << level << ", rollout-edge batch: verl\n" << expected << "\nlibrary\n" << lib * b.maskf());
    CHECK_FALSE(grpo::testing::tensor_mismatch(lib * b.maskf(), expected, 1e-12, 0.0).empty());
    options.log_ratio_bound = 20.0;
    lib = grpo::sampler_correction_weights(b.old_lib, b.sampler_lib, b.mask, options);
    CHECK(grpo::testing::tensor_mismatch(lib * b.maskf(), expected, 1e-12, 0.0).empty());
  }
}

TEST_CASE("GrpoLoss with rollout_rejection matches verl vanilla on the modified mask", "[parity][rollout]") {
  run_loss({RolloutIs{}}, /*old_defined=*/true, /*mask_truncated=*/false);
}

TEST_CASE("GrpoLoss with rollout_rejection and rollout IS weights matches verl", "[parity][rollout]") {
  run_loss({RolloutIs{"token", 2.0, false}, RolloutIs{"sequence", 5.0, false}, RolloutIs{"token", 1.5, true},
            RolloutIs{"sequence", 2.0, true}},
           /*old_defined=*/true, /*mask_truncated=*/false);
}

TEST_CASE("GrpoLoss rollout_rejection without old log-probs uses log_probs detach", "[parity][rollout]") {
  run_loss({RolloutIs{}, RolloutIs{"token", 2.0, true}}, /*old_defined=*/false, /*mask_truncated=*/false);
}

TEST_CASE("GrpoLoss rollout_rejection after mask_truncated_completions matches verl on the truncated mask",
          "[parity][rollout]") {
  run_loss({RolloutIs{}, RolloutIs{"sequence", 2.0, true}}, /*old_defined=*/true, /*mask_truncated=*/true);
}

TEST_CASE("GrpoLoss rollout_rejection needs sampler_log_probs", "[parity][rollout]") {
  auto b = parity::random_batch(6, 7, 1);
  GrpoLossOptions o = vanilla_options(LossType::token_mean);
  o.rollout_rejection = grpo::parse_rollout_rejection("token_k1", "0.8_1.25");
  CHECK_THROWS(parity::library_loss(o, b, b.lp, b.entropy, false, /*with_sampler=*/false));
}


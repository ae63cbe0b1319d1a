// SPDX-License-Identifier: Apache-2.0
// R1-Zero with GRPO: sample G completions per prompt, score them with rule-based rewards, turn the rewards into
// group-relative advantages and take clipped policy-gradient steps. Everything below is library parts put together
// in a plain loop; copy it and change what you need.
//
//   r1_zero                                  the built-in tiny task (learns in minutes on 2 CPU cores)
//   r1_zero --model DIR --data FILE.jsonl    any Qwen2/Qwen3/Llama Hugging Face checkpoint on a real data set
//   r1_zero --config run.json --steps 50     flags in a JSON file; the command line wins
//
// The tiny task asks "max d1 d2 d3 d4 d5 =" and wants "<think> </think> <answer> d </answer>" with d the largest
// digit. Its starting policy is a Qwen2-shaped model built in code and warmed up to speak the format with a digit
// copied from the prompt that is never the largest: it attends to its input but starts near 5% accuracy, and never
// sees a correct answer before GRPO. Two choices keep GRPO from collapsing onto a constant answer (DESIGN.md §7):
// the warm-up answers depend on the prompt, and the largest digit is uniform over 1–9, so no constant is right more
// than 1 time in 9 (with uniform digits "9" is the maximum 41% of the time and the policy settles there).
#include <grpo/grpo.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <thread>

namespace {

namespace fs = std::filesystem;
using grpo::rewards::Completion;
using grpo::rewards::Row;

// ---------------------------------------------------------------------------------------------------------------
// Settings: every flag, with its default. A JSON config file sets the same names (with '_' or '-').

struct Settings {
  // What to train.
  std::string task = "tiny";
  fs::path model_dir, data_path;
  std::string data_format = "detect", prompt_field, answer_field, on_bad_row = "stop";
  std::int64_t held_out = 256;  // problems kept out of training for evaluation
  // Rollouts.
  std::int64_t steps = 200, prompts_per_step = 32, group_size = 8, max_new_tokens = 0;
  double temperature = 1.0, top_p = 1.0, min_p = 0.0;
  std::int64_t top_k = 0;
  // Objective.
  std::string loss = "dapo", advantage = "grpo", kl_estimator = "k3";
  double beta = 0.0, epsilon = 0.2, epsilon_high = 0.28, entropy_coef = 0.0;
  std::int64_t mu = 1;              // optimisation passes over each batch (μ); > 1 uses old log-probs
  std::int64_t micro_batches = 1;   // gradient accumulation: the batch is split, one optimizer step per pass
  std::int64_t ref_sync_every = 0;  // TR-DPO: move the reference towards the policy every N steps (0 = never)
  double ref_sync_alpha = 1.0;
  // DAPO dynamic sampling: rounds of prompts until P groups have reward spread (0 rounds = off).
  std::int64_t dynamic_sampling_max_rounds = 0, dynamic_sampling_prompts = 0;
  std::string dynamic_sampling_at_cap = "train";
  // Generation in chunks of prompts; with overlap_scoring, rewards score a chunk while the next one is sampled.
  std::int64_t generation_chunks = 1;
  bool overlap_scoring = false;
  std::string kl_control = "fixed";  // fixed β, or adaptive towards kl_target (train/kl_controller.hpp)
  double kl_target = 0.1, kl_horizon = 10000;
  // Curriculum (data sets): the difficulty range sampled over the steps, and the pass-rate filter.
  std::string curriculum_schedule = "none";
  std::vector<double> curriculum_start, curriculum_end;  // [min, max] at start_step and end_step (linear)
  std::int64_t curriculum_start_step = 1, curriculum_end_step = 1;
  std::vector<std::string> curriculum_stages;  // "STEP:MIN:MAX" (staged)
  std::int64_t curriculum_filter_window = 0;  // 0 = no filter
  std::string curriculum_filter_retire = "both";
  std::int64_t curriculum_filter_retire_steps = 0;
  std::vector<std::string> rewards = {"accuracy", "format"};
  std::vector<double> reward_weights = {1.0, 0.2};
  fs::path reward_config;  // a JSON reward list (overrides --rewards)
  // Optimiser.
  double lr = 1e-3, weight_decay = 0.0, max_grad_norm = 1.0;
  std::int64_t warmup_steps = 0;
  std::string lr_decay = "constant";
  // Output.
  fs::path output_dir = "runs/r1_zero";
  std::int64_t log_every = 10, log_completions = 4, save_every = 50, keep_last = 2;
  std::int64_t eval_every = 25, eval_samples = 4, eval_problems = 0;
  bool resume = false, tensorboard = true;
  std::uint64_t seed = 1;
  int threads = 0;
};

void add_flags(CLI::App& app, Settings& s) {
  app.add_option("--task", s.task, "tiny (built-in) or data (--model + --data; implied by --model)")
      ->check(CLI::IsMember({"tiny", "data"}));
  app.add_option("--model", s.model_dir, "Hugging Face model directory (config.json, safetensors, tokenizer.json)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--data", s.data_path, "JSON/JSONL data set (ROLL, TRL/NuminaMath, GSM8K or --data-format fields)")
      ->check(CLI::ExistingFile);
  app.add_option("--data-format", s.data_format, "detect, roll, trl, gsm8k or fields");
  app.add_option("--prompt-field", s.prompt_field, "with --data-format fields: the prompt's field");
  app.add_option("--answer-field", s.answer_field, "with --data-format fields: the gold answer's field");
  app.add_option("--on-bad-row", s.on_bad_row, "stop or skip a malformed data row")->check(CLI::IsMember({"stop", "skip"}));
  app.add_option("--held-out", s.held_out, "problems kept out of training for evaluation")->check(CLI::NonNegativeNumber);
  app.add_option("--steps", s.steps, "optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--prompts", s.prompts_per_step, "prompts per step (P)")->check(CLI::PositiveNumber);
  app.add_option("--group-size", s.group_size, "completions per prompt (G)")->check(CLI::Range(2, 1024));
  app.add_option("--max-new-tokens", s.max_new_tokens, "completion length limit (0: 8 tiny, 512 data)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", s.temperature, "sampling temperature (also divides the trainer's logits)")
      ->check(CLI::Range(1e-3, 10.0));
  app.add_option("--top-p", s.top_p, "nucleus sampling")->check(CLI::Range(1e-6, 1.0));
  app.add_option("--top-k", s.top_k, "top-k sampling (0 = off)")->check(CLI::NonNegativeNumber);
  app.add_option("--min-p", s.min_p, "min-p sampling (0 = off)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--loss", s.loss, "loss recipe: grpo, dr_grpo, dapo, gspo or cispo");
  app.add_option("--advantage", s.advantage, "advantage estimator (grpo, dr_grpo, rloo, reinforce_pp_baseline, gpg, pass_at_k, opo, ...)");
  app.add_option("--beta", s.beta, "KL coefficient to the reference policy (0 = no reference)")->check(CLI::NonNegativeNumber);
  app.add_option("--kl-estimator", s.kl_estimator, "k1, k2, k3, low_var_kl, ...");
  app.add_option("--epsilon", s.epsilon, "clip range below (and above, without --epsilon-high)")->check(CLI::NonNegativeNumber);
  app.add_option("--epsilon-high", s.epsilon_high, "clip range above (DAPO clip-higher)")->check(CLI::NonNegativeNumber);
  app.add_option("--entropy-coef", s.entropy_coef, "entropy bonus coefficient");
  app.add_option("--mu", s.mu, "optimisation passes per batch (μ)")->check(CLI::PositiveNumber);
  app.add_option("--micro-batches", s.micro_batches, "gradient accumulation: micro-batches per step")
      ->check(CLI::PositiveNumber);
  app.add_option("--ref-sync-every", s.ref_sync_every, "reference update period in steps (0 = frozen)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ref-sync-alpha", s.ref_sync_alpha, "reference update mix α (1 = copy)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--dynamic-sampling-max-rounds", s.dynamic_sampling_max_rounds,
                 "DAPO dynamic sampling: drop groups without reward spread and sample up to this many rounds of "
                 "prompts until P groups have spread (0 = off)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dynamic-sampling-prompts", s.dynamic_sampling_prompts, "prompts per round (0 = --prompts)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dynamic-sampling-at-cap", s.dynamic_sampling_at_cap,
                 "when the rounds run out: train on the groups found (none: skip), or skip the step")
      ->check(CLI::IsMember({"train", "skip"}));
  app.add_option("--generation-chunks", s.generation_chunks,
                 "sample each round's prompts in this many chunks (each with its own seed)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--overlap-scoring,!--no-overlap-scoring", s.overlap_scoring,
               "score each chunk's completions (completion-scoped rewards) while the next chunk is sampled; the "
               "numbers equal --no-overlap-scoring with the same chunks")
      ->default_str("false");
  app.add_option("--kl-control", s.kl_control, "KL coefficient control: fixed or adaptive (β from --beta, moved towards --kl-target)")
      ->check(CLI::IsMember({"fixed", "adaptive"}));
  app.add_option("--kl-target", s.kl_target, "adaptive KL: target KL per token")->check(CLI::PositiveNumber);
  app.add_option("--kl-horizon", s.kl_horizon, "adaptive KL: horizon in sequences")->check(CLI::PositiveNumber);
  app.add_option("--curriculum-schedule", s.curriculum_schedule, "difficulty curriculum: none, linear or staged")
      ->check(CLI::IsMember({"none", "linear", "staged"}));
  app.add_option("--curriculum-start", s.curriculum_start, "linear: difficulty MIN,MAX at --curriculum-start-step")
      ->delimiter(',')->expected(2);
  app.add_option("--curriculum-end", s.curriculum_end, "linear: difficulty MIN,MAX at --curriculum-end-step")
      ->delimiter(',')->expected(2);
  app.add_option("--curriculum-start-step", s.curriculum_start_step, "linear: step where the range starts widening");
  app.add_option("--curriculum-end-step", s.curriculum_end_step, "linear: step where it reaches --curriculum-end");
  app.add_option("--curriculum-stages", s.curriculum_stages, "staged: STEP:MIN:MAX,... (from STEP on, difficulties MIN..MAX)")
      ->delimiter(',');
  app.add_option("--curriculum-filter-window", s.curriculum_filter_window,
                 "retire a prompt after this many consecutive all-wrong or all-right groups (0 = off)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--curriculum-filter-retire", s.curriculum_filter_retire, "which prompts the filter retires: both, unsolved or solved")
      ->check(CLI::IsMember({"both", "unsolved", "solved"}));
  app.add_option("--curriculum-filter-retire-steps", s.curriculum_filter_retire_steps,
                 "steps a retired prompt stays out (0 = for the rest of the run)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--rewards", s.rewards, "registry reward names")->delimiter(',');
  app.add_option("--reward-weights", s.reward_weights, "one weight per reward")->delimiter(',');
  app.add_option("--reward-config", s.reward_config, "JSON reward list (overrides --rewards)")->check(CLI::ExistingFile);
  app.add_option("--lr", s.lr, "AdamW learning rate")->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", s.weight_decay, "AdamW weight decay")->check(CLI::NonNegativeNumber);
  app.add_option("--max-grad-norm", s.max_grad_norm, "gradient clipping (0 = off)")->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-steps", s.warmup_steps, "linear learning-rate warm-up")->check(CLI::NonNegativeNumber);
  app.add_option("--lr-decay", s.lr_decay, "constant, linear or cosine")->check(CLI::IsMember({"constant", "linear", "cosine"}));
  app.add_option("--output-dir", s.output_dir, "metrics, TensorBoard events, samples and checkpoints");
  app.add_option("--log-every", s.log_every, "console line period in steps")->check(CLI::PositiveNumber);
  app.add_option("--log-completions", s.log_completions, "completions per step written to completions.jsonl")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--save-every", s.save_every, "checkpoint period in steps (0 = only at the end)")->check(CLI::NonNegativeNumber);
  app.add_option("--keep-last", s.keep_last, "checkpoints kept")->check(CLI::NonNegativeNumber);
  app.add_option("--eval-every", s.eval_every, "evaluation period in steps (0 = start and end only)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--eval-samples", s.eval_samples, "samples per held-out problem (k of pass@k and maj@k)")
      ->check(CLI::PositiveNumber);
  app.add_option("--eval-problems", s.eval_problems, "held-out problems evaluated (0 = all)")->check(CLI::NonNegativeNumber);
  app.add_flag("--resume,!--no-resume", s.resume, "continue from the newest checkpoint in --output-dir");
  app.add_flag("--tensorboard,!--no-tensorboard", s.tensorboard, "write TensorBoard event files");
  app.add_option("--seed", s.seed, "seed of everything random");
  app.add_option("--threads", s.threads, "intra-op threads (0 = 1 for the tiny task, else cores / processes)")->check(CLI::NonNegativeNumber);
}

// One domain of a multi-domain run (the config's `domains` section; ROLL's per-domain reward workers and
// domain_interleave_probs). Rows reach a domain by their `tag`.
struct DomainConfig {
  std::string name;
  grpo::io::DomainKind kind = grpo::io::DomainKind::math;
  std::vector<std::string> tags;  // row tags routed here (default: the name)
  std::vector<fs::path> data;     // files of this domain's rows (relative to the working directory, like --data)
  double probability = 1.0;       // sampling weight (normalised over the domains)
  std::string rewards_json;       // the domain's reward list as JSON (RewardSet::from_config); empty: --rewards
  std::string rewards_source;     // "file:line" of that list, for errors
  std::optional<std::pair<double, double>> clip;
  grpo::rewards::DomainNormalisation normalisation = grpo::rewards::DomainNormalisation::none;
  bool clip_after_normalisation = false;  // ROLL's order: normalise, then clip
  std::string accuracy_reward;
  std::optional<double> accuracy_threshold;  // unset: correct_threshold() of the accuracy reward
  std::string source;                         // "file:line" of the domain's section, for errors
};

/// parse(node) with the node's file:line and key path in front of its ConfigError.
template <typename Parse>
auto located(const grpo::io::ConfigNode& node, Parse&& parse) {
  try {
    return parse(node);
  } catch (const grpo::ConfigError& e) {
    throw grpo::ConfigError(fmt::format("{}: '{}': {}", node.source(), node.path(), e.what()));
  }
}

std::vector<DomainConfig> read_domains(const grpo::io::ConfigNode& section) {
  GRPO_CHECK_CONFIG(section.is_map() && !section.entries().empty(), "{}: '{}' should be a map of domain names to settings",
                    section.source(), section.path());
  std::vector<DomainConfig> out;
  for (const auto& [name, node] : section.entries()) {
    DomainConfig d;
    d.name = name;
    (void)section.find(name);  // marks the entry as read
    GRPO_CHECK_CONFIG(node.is_map(), "{}: '{}' should be a map", node.source(), node.path());
    const std::string default_kind = name == "code" || name == "general" ? name : "math";
    const auto* kind_node = node.find("kind");
    d.kind = kind_node ? located(*kind_node, [](const auto& n) { return grpo::io::parse_domain_kind(n.text()); })
                       : grpo::io::parse_domain_kind(default_kind);
    if (const auto* tags = node.find("tags")) d.tags = tags->texts();
    if (d.tags.empty()) d.tags = {name};
    if (const auto* data = node.find("data")) {
      for (const std::string& file : data->texts()) d.data.emplace_back(file);
    }
    if (const auto* p = node.find("probability")) {
      d.probability = p->number();
      GRPO_CHECK_CONFIG(std::isfinite(d.probability) && d.probability >= 0.0, "{}: '{}' must be a number >= 0, got {}",
                        p->source(), p->path(), p->text());
    }
    if (const auto* rewards = node.find("rewards")) {
      rewards->mark_read();
      d.rewards_json = grpo::io::to_json(*rewards);
      d.rewards_source = rewards->source();
    } else {
      GRPO_CHECK_CONFIG(d.kind != grpo::io::DomainKind::general,
                        "{}: domain '{}' (general) needs 'rewards' (e.g. [{{name: judge, base_url: ...}}])", node.source(), name);
      if (d.kind == grpo::io::DomainKind::code) d.rewards_json = R"([{"name": "code_tests"}])";
      d.rewards_source = node.source();
    }
    if (const auto* clip = node.find("reward_clip")) {
      if (clip->is_list()) {
        GRPO_CHECK_CONFIG(clip->items().size() == 2, "{}: '{}' should be a number c or a pair [lo, hi]", clip->source(),
                          clip->path());
        d.clip = std::pair{clip->items()[0].number(), clip->items()[1].number()};
      } else {
        d.clip = std::pair{-clip->number(), clip->number()};
      }
      GRPO_CHECK_CONFIG(d.clip->first <= d.clip->second, "{}: '{}' should be c >= 0 or [lo, hi] with lo <= hi, got [{}, {}]",
                        clip->source(), clip->path(), d.clip->first, d.clip->second);
    }
    if (const auto* norm = node.find("reward_normalisation")) {
      d.normalisation = located(*norm, [](const auto& n) { return grpo::rewards::parse_domain_normalisation(n.text()); });
    }
    if (const auto* order = node.find("clip_after_normalisation")) d.clip_after_normalisation = order->boolean();
    if (const auto* acc = node.find("accuracy_reward")) d.accuracy_reward = acc->text();
    if (const auto* threshold = node.find("accuracy_threshold")) d.accuracy_threshold = threshold->number();
    d.source = node.source();
    out.push_back(std::move(d));
  }
  return out;
}

// Applies a config tree to the flags the command line left unset: nested maps name flags by their joined keys
// (kl: {target: 0.1} → --kl-target), `domains` and `stages` are read by read_domains and read_stages. Errors name the file, line and key.
void apply_config_tree(CLI::App& app, const grpo::io::ConfigNode& map, const std::string& prefix) {
  for (const auto& [key, node] : map.entries()) {
    if (prefix.empty() && (key == "domains" || key == "stages")) continue;
    std::string flag_name = prefix + key;
    std::replace(flag_name.begin(), flag_name.end(), '_', '-');
    node.mark_read();
    if (node.is_map()) {
      apply_config_tree(app, node, flag_name + "-");
      continue;
    }
    const std::string flag = "--" + flag_name;
    CLI::Option* option = app.get_option_no_throw(flag);
    if (option == nullptr || flag == "--config" || flag == "--set") {
      throw grpo::ConfigError(
          fmt::format("{}: unknown field '{}' (run with --help for the flags)", node.source(), node.path()));
    }
    GRPO_CHECK_CONFIG(!node.is_null(), "{}: field '{}' is null", node.source(), node.path());
    if (option->count() > 0) continue;  // given on the command line
    try {
      option->add_result(node.texts());
      option->run_callback();
    } catch (const CLI::Error& e) {
      throw grpo::ConfigError(fmt::format("{}: field '{}': {}", node.source(), node.path(), e.what()));
    }
  }
}

/// The config's `stages` list: DeepScaleR-style context lengthening (train/context_schedule.hpp).
std::vector<grpo::train::ContextStage> read_stages(const grpo::io::ConfigNode& section) {
  GRPO_CHECK_CONFIG(section.is_list() && !section.items().empty(), "{}: '{}' should be a list of stages",
                    section.source(), section.path());
  std::vector<grpo::train::ContextStage> out;
  for (const grpo::io::ConfigNode& node : section.items()) {
    GRPO_CHECK_CONFIG(node.is_map(), "{}: '{}' should be a map", node.source(), node.path());
    grpo::train::ContextStage stage;
    stage.max_new_tokens = node.at("max_new_tokens").integer();
    if (const auto* g = node.find("group_size")) stage.group_size = g->integer();
    if (const auto* lr = node.find("lr")) stage.learning_rate = lr->number();
    if (const auto* mask = node.find("mask_truncated")) stage.mask_truncated = mask->boolean();
    if (const auto* buffer = node.find("overlong_buffer")) stage.overlong_buffer = buffer->integer();
    if (const auto* factor = node.find("overlong_factor")) stage.overlong_factor = factor->number();
    if (const auto* at = node.find("at_step")) stage.at_step = at->integer();
    if (const auto* patience = node.find("patience")) stage.patience = patience->integer();
    if (const auto* when = node.find("when")) {  // "METRIC OP THRESHOLD", e.g. "completions/clipped_ratio >= 0.1"
      char metric[256] = {}, op[3] = {};
      char tail = 0;
      double threshold = 0.0;
      GRPO_CHECK_CONFIG(std::sscanf(when->text().c_str(), "%255s %2s %lf %c", metric, op, &threshold, &tail) == 3,
                        "{}: '{}' should read METRIC OP THRESHOLD (e.g. completions/clipped_ratio >= 0.1), got '{}'",
                        when->source(), when->path(), when->text());
      stage.metric = metric;
      stage.op = op;
      stage.threshold = threshold;
    }
    out.push_back(std::move(stage));
  }
  return out;
}

/// What a config file adds to the flags: multi-domain settings and context stages.
struct ConfigSections {
  std::vector<DomainConfig> domains;
  std::vector<grpo::train::ContextStage> stages;
};

/// Reads --config (YAML or JSON, with `extends`/`defaults` bases) and the --set overrides into the flags; returns the
/// sections that are not flags.
ConfigSections apply_config(CLI::App& app, Settings& s, const fs::path& config_path,
                            const std::vector<std::string>& overrides) {
  if (config_path.empty() && overrides.empty()) return {};
  grpo::io::ConfigNode root =
      config_path.empty() ? grpo::io::parse_config("{}", "--set") : grpo::io::load_layered_config(config_path);
  for (const std::string& assignment : overrides) grpo::io::apply_config_override(root, assignment);
  apply_config_tree(app, root, "");
  ConfigSections sections;
  if (const auto* domains = root.find("domains")) sections.domains = read_domains(*domains);
  if (const auto* stages = root.find("stages")) sections.stages = read_stages(*stages);
  grpo::io::reject_unread_keys(root);
  return sections;
}

// ---------------------------------------------------------------------------------------------------------------
// Tasks: prompts as token ids, the dataset row the rewards judge against, and the text of completions.

struct Problem {
  std::vector<std::int64_t> prompt_ids;
  std::string prompt_text;
  std::shared_ptr<const Row> row;
  std::size_t domain = 0;  // index into Task::domain_names()
  std::string id;          // unique over the run's prompts (the pass-rate filter's key)
};

class Task {
 public:
  virtual ~Task() = default;
  /// The next `count` training problems of `step`: called in step order, once per generation round (dynamic sampling
  /// asks again within a step and gets new prompts); a task with sampling state (streams, filters) saves it with
  /// save_state, so a resumed run sees the same data.
  virtual std::vector<Problem> train_batch(std::int64_t step, std::int64_t count) = 0;
  virtual const std::vector<Problem>& held_out() const = 0;
  virtual std::string decode(std::span<const std::int64_t> ids) const = 0;
  virtual std::vector<std::int64_t> eos_token_ids() const = 0;
  virtual std::int64_t pad_token_id() const = 0;
  /// Domain names (one for a single data set or the tiny task).
  virtual std::vector<std::string> domain_names() const { return {"tiny"}; }
  /// The pass rate of each problem of train_batch(step) (the whole batch, every rank), for curricula.
  virtual void observe(const std::vector<Problem>& /*problems*/, std::span<const double> /*pass_rates*/,
                       std::int64_t /*step*/) {}
  /// Sampling metrics of the step ("curriculum/...").
  virtual std::vector<std::pair<std::string, double>> metrics(std::int64_t /*step*/) const { return {}; }
  virtual void save_state(grpo::train::TrainerState& /*state*/) const {}
  virtual void load_state(const grpo::train::TrainerState& /*state*/) {}
};

std::shared_ptr<const Row> gold_row(std::string answer) {
  return std::make_shared<const Row>(Row{{"ground_truth", std::move(answer)}});
}

/// "max d1 d2 d3 d4 d5 =" → "<think> </think> <answer> d </answer> <eos>". One problem in eight (by a hash of its
/// digits) is held out and never trained on.
class TinyTask final : public Task {
 public:
  static constexpr std::int64_t kMax = 10, kEquals = 11, kThinkOpen = 12, kThinkClose = 13, kAnswerOpen = 14,
                                kAnswerClose = 15, kEos = 16, kPad = 17, kBos = 18, kVocab = 19, kDigits = 5;

  TinyTask(std::uint64_t seed, std::int64_t held_out) : seed_(seed) {
    std::mt19937_64 rng(seed ^ 0x5eedULL);
    std::set<std::array<std::int64_t, kDigits>> seen;  // distinct problems
    while (static_cast<std::int64_t>(held_out_.size()) < held_out) {
      const auto digits = random_digits(rng);
      if (is_held_out(digits) && seen.insert(digits).second) held_out_.push_back(problem(digits));
    }
  }

  /// Stateless across steps (a function of the seed, the step and the round within it), so a resumed run needs no
  /// saved state: rounds restart at 0 with each step.
  std::vector<Problem> train_batch(std::int64_t step, std::int64_t count) override {
    round_ = step == last_step_ ? round_ + 1 : 0;
    last_step_ = step;
    std::mt19937_64 rng(seed_ * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(step) +
                        round_ * 0xbf58476d1ce4e5b9ULL);
    std::vector<Problem> out;
    while (static_cast<std::int64_t>(out.size()) < count) {
      const auto digits = random_digits(rng);
      if (!is_held_out(digits)) out.push_back(problem(digits));
    }
    return out;
  }
  const std::vector<Problem>& held_out() const override { return held_out_; }

  std::string decode(std::span<const std::int64_t> ids) const override {
    static constexpr const char* kWords[] = {"0",       "1",        "2",        "3",         "4",     "5",     "6",
                                             "7",       "8",        "9",        "max",       "=",     "<think>",
                                             "</think>", "<answer>", "</answer>", "<eos>",   "<pad>", "<bos>"};
    std::string text;
    for (const std::int64_t id : ids) {
      if (id == kEos || id == kPad || id == kBos) continue;
      GRPO_CHECK(id >= 0 && id < kVocab, "TinyTask::decode: token id {} is outside the vocabulary", id);
      text += (text.empty() ? "" : " ") + std::string(kWords[id]);
    }
    return text;
  }
  std::vector<std::int64_t> eos_token_ids() const override { return {kEos}; }
  std::int64_t pad_token_id() const override { return kPad; }

  /// The format warm-up's target: the completion with a digit of the prompt that is not the largest.
  static std::vector<std::int64_t> wrong_completion(const Problem& p, std::mt19937_64& rng) {
    const auto digits = std::span(p.prompt_ids).subspan(2, kDigits);
    const std::int64_t largest = *std::max_element(digits.begin(), digits.end());
    std::vector<std::int64_t> wrong;
    for (const std::int64_t d : digits) {
      if (d != largest) wrong.push_back(d);
    }
    const std::int64_t pick = wrong[std::uniform_int_distribution<std::size_t>(0, wrong.size() - 1)(rng)];
    return std::vector<std::int64_t>{kThinkOpen, kThinkClose, kAnswerOpen, pick, kAnswerClose, kEos};
  }

 private:
  // The largest digit m is uniform over 1–9 (so no constant answer is right more than 1/9 of the time), at a
  // uniform position; the other four are uniform over 0..m, not all equal to m (there would be no wrong digit).
  static std::array<std::int64_t, kDigits> random_digits(std::mt19937_64& rng) {
    const std::int64_t largest = std::uniform_int_distribution<std::int64_t>(1, 9)(rng);
    const std::size_t at = std::uniform_int_distribution<std::size_t>(0, kDigits - 1)(rng);
    std::array<std::int64_t, kDigits> digits{};
    do {
      for (std::size_t i = 0; i < digits.size(); ++i)
        digits[i] = i == at ? largest : std::uniform_int_distribution<std::int64_t>(0, largest)(rng);
    } while (std::count(digits.begin(), digits.end(), largest) == kDigits);
    return digits;
  }
  // One problem in eight, by a hash of its digits (splitmix64's finaliser), so the split does not follow the digits.
  static bool is_held_out(const std::array<std::int64_t, kDigits>& digits) {
    std::uint64_t x = 0;
    for (const std::int64_t d : digits) x = 10 * x + static_cast<std::uint64_t>(d);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return ((x ^ (x >> 31)) & 7) == 0;
  }
  Problem problem(const std::array<std::int64_t, kDigits>& digits) const {
    Problem p;
    p.prompt_ids = {kBos, kMax};
    p.prompt_ids.insert(p.prompt_ids.end(), digits.begin(), digits.end());
    p.prompt_ids.push_back(kEquals);
    p.prompt_text = decode(p.prompt_ids);
    p.row = gold_row(std::to_string(*std::max_element(digits.begin(), digits.end())));
    return p;
  }

  std::uint64_t seed_;
  std::vector<Problem> held_out_;
  std::int64_t last_step_ = std::numeric_limits<std::int64_t>::min();
  std::uint64_t round_ = 0;  // generation round within last_step_
};

/// The R1-Zero prompt (DeepSeek-R1, Table 1) as a system message, for data sets without their own.
constexpr const char* kR1ZeroSystemPrompt =
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The "
    "assistant first thinks about the reasoning process in the mind and then provides the user with the answer. "
    "The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.";

/// JSON/JSONL data rendered through the model's chat template and tokenizer: one data set, or several domains
/// (rows routed by their tag) mixed by DomainMixer. Each domain is an endless reshuffled PromptStream; the difficulty
/// curriculum and the pass-rate filter decide which rows a stream may hand out at a step.
class DataTask final : public Task {
 public:
  DataTask(const Settings& s, const std::vector<DomainConfig>& domains, grpo::text::Tokenizer tokenizer,
           std::vector<std::int64_t> eos_ids)
      : tokenizer_(std::move(tokenizer)), eos_ids_(std::move(eos_ids)),
        schedule_(difficulty_schedule(s)), mixer_(mixer_options(s, domains)) {
    if (eos_ids_.empty() && tokenizer_.special_token_ids().eos) eos_ids_.push_back(*tokenizer_.special_token_ids().eos);
    GRPO_CHECK_CONFIG(!eos_ids_.empty(), "{}: neither config.json (eos_token_id) nor the tokenizer names an EOS token",
                      s.model_dir.string());
    pad_ = tokenizer_.special_token_ids().pad.value_or(static_cast<std::int32_t>(eos_ids_.front()));
    if (s.curriculum_filter_window > 0) {
      filter_.emplace(grpo::train::PassRateFilterOptions{.window = s.curriculum_filter_window,
                                                         .retire_unsolved = s.curriculum_filter_retire != "solved",
                                                         .retire_solved = s.curriculum_filter_retire != "unsolved",
                                                         .retire_steps = s.curriculum_filter_retire_steps});
    }
    grpo::io::DatasetOptions options;
    options.format = grpo::io::parse_dataset_format(s.data_format);
    options.on_bad_row = s.on_bad_row == "skip" ? grpo::io::BadRowPolicy::skip : grpo::io::BadRowPolicy::stop;
    options.prompt_field = s.prompt_field;
    options.answer_field = s.answer_field;
    options.system_prompt = kR1ZeroSystemPrompt;
    std::vector<std::vector<grpo::io::Example>> rows(std::max<std::size_t>(1, domains.size()));
    auto load = [&](const fs::path& path) {
      auto data = grpo::io::Dataset::load(path, options);
      if (data.skipped_rows() > 0) fmt::print("{}: skipped {} malformed rows\n", path.string(), data.skipped_rows());
      return data;
    };
    if (domains.empty()) {
      names_ = {"data"};
      rows[0] = load(s.data_path).examples();
    } else {
      std::map<std::string, std::size_t, std::less<>> domain_of_tag;
      for (std::size_t d = 0; d < domains.size(); ++d) {
        names_.push_back(domains[d].name);
        for (const std::string& tag : domains[d].tags) {
          GRPO_CHECK_CONFIG(domain_of_tag.emplace(tag, d).second, "{}: domains.{}: tag '{}' is claimed by domain '{}' too",
                            domains[d].source, domains[d].name, tag, domains[domain_of_tag.at(tag)].name);
          options.domains.emplace(tag, domains[d].kind);
        }
      }
      std::vector<fs::path> files;
      if (!s.data_path.empty()) files.push_back(s.data_path);
      for (const auto& d : domains) files.insert(files.end(), d.data.begin(), d.data.end());
      GRPO_CHECK_CONFIG(!files.empty(), "a multi-domain run needs --data or a 'data' file in some domain");
      for (const fs::path& file : files) {
        const auto data = load(file);
        for (const auto& example : data.examples()) rows[domain_of_tag.at(example.tag)].push_back(example);
      }
    }
    for (std::size_t d = 0; d < rows.size(); ++d) {
      GRPO_CHECK_CONFIG(rows[d].size() > static_cast<std::size_t>(s.held_out),
                        "domain '{}': {} rows leave none for training after --held-out {}", names_[d], rows[d].size(),
                        s.held_out);
      const auto split = grpo::io::Dataset(std::move(rows[d])).split(static_cast<std::size_t>(s.held_out), s.seed);
      Domain domain{split.train.examples(), grpo::train::PromptStream(split.train.size(), s.seed)};
      for (const auto& example : split.held_out.examples()) held_out_.push_back(problem(example, d));
      // Every step's curriculum range must hold rows of every domain, or sampling would fall back to rows outside it
      // mid-run. A row without a difficulty is always admitted.
      std::vector<double> difficulties;
      for (const grpo::io::Example& e : domain.train) difficulties.push_back(e.difficulty.value_or(NAN));
      if (std::none_of(difficulties.begin(), difficulties.end(), [](double x) { return std::isnan(x); })) {
        std::sort(difficulties.begin(), difficulties.end());
        for (std::int64_t step = 1; step <= s.steps; ++step) {
          const auto range = schedule_.range_at(step);
          const auto first = std::lower_bound(difficulties.begin(), difficulties.end(), range.min);
          GRPO_CHECK_CONFIG(first != difficulties.end() && range.contains(*first),
                            "domain '{}' has no training row with a difficulty in [{}, {}], the curriculum's range at "
                            "step {}", names_[d], range.min, range.max, step);
        }
      }
      domains_.push_back(std::move(domain));
    }
  }

  std::vector<Problem> train_batch(std::int64_t step, std::int64_t count) override {
    std::vector<Problem> out;
    // The mix of the n-th batch drawn (one per step, more with dynamic sampling's rounds).
    for (const std::size_t d : mixer_.assignment(++draws_, count)) {
      Domain& domain = domains_[d];
      auto admitted = [&](std::size_t i) { return schedule_.admits(domain.train[i].difficulty, step); };
      auto available = [&](std::size_t i) {
        return admitted(i) && !(filter_ && filter_->is_retired(filter_key(d, domain.train[i]), step));
      };
      std::optional<std::size_t> item = domain.stream.next_accepted(available);
      if (!item) {  // every admitted row is retired: recycle them rather than stall
        item = domain.stream.next_accepted(admitted);
        ++fallbacks_;
      }
      if (!item) {
        item = domain.stream.next();
        ++fallbacks_;
      }
      out.push_back(problem(domain.train[*item], d));
    }
    return out;
  }
  const std::vector<Problem>& held_out() const override { return held_out_; }
  std::string decode(std::span<const std::int64_t> ids) const override {
    const std::vector<std::int32_t> narrow(ids.begin(), ids.end());
    return tokenizer_.decode(narrow, {.skip_special_tokens = true, .skip_unknown_ids = true});
  }
  std::vector<std::int64_t> eos_token_ids() const override { return eos_ids_; }
  std::int64_t pad_token_id() const override { return pad_; }
  std::vector<std::string> domain_names() const override { return names_; }

  void observe(const std::vector<Problem>& problems, std::span<const double> pass_rates, std::int64_t step) override {
    if (!filter_) return;
    for (std::size_t i = 0; i < problems.size(); ++i) filter_->observe(problems[i].id, pass_rates[i], step);
  }
  std::vector<std::pair<std::string, double>> metrics(std::int64_t step) const override {
    std::vector<std::pair<std::string, double>> out;
    if (schedule_.options().kind != grpo::train::DifficultyScheduleKind::none) {
      const auto range = schedule_.range_at(step);
      out.insert(out.end(), {{"curriculum/difficulty_min", range.min}, {"curriculum/difficulty_max", range.max}});
    }
    if (filter_) out.emplace_back("curriculum/retired_prompts", static_cast<double>(filter_->retired_count(step)));
    if (filter_ || schedule_.options().kind != grpo::train::DifficultyScheduleKind::none) {
      out.emplace_back("curriculum/fallbacks", static_cast<double>(fallbacks_));
    }
    for (std::size_t d = 0; d < domains_.size(); ++d) {
      out.emplace_back(fmt::format("data/{}/epoch", names_[d]), static_cast<double>(domains_[d].stream.epoch()));
    }
    return out;
  }
  void save_state(grpo::train::TrainerState& state) const override {
    for (std::size_t d = 0; d < domains_.size(); ++d) {
      state.values[fmt::format("data/{}/position", names_[d])] = static_cast<double>(domains_[d].stream.position());
    }
    state.values["curriculum/fallbacks"] = static_cast<double>(fallbacks_);
    state.values["data/draws"] = static_cast<double>(draws_);
    if (filter_) state.texts["curriculum/filter"] = filter_->save();
  }
  void load_state(const grpo::train::TrainerState& state) override {
    for (std::size_t d = 0; d < domains_.size(); ++d) {
      const auto it = state.values.find(fmt::format("data/{}/position", names_[d]));
      GRPO_CHECK(it != state.values.end(), "the checkpoint of step {} has no position for domain '{}'", state.step,
                 names_[d]);
      domains_[d].stream.set_position(static_cast<std::uint64_t>(it->second));
    }
    const auto draws = state.values.find("data/draws");
    draws_ = draws != state.values.end() ? static_cast<std::int64_t>(draws->second) : state.step;
    if (const auto it = state.values.find("curriculum/fallbacks"); it != state.values.end()) {
      fallbacks_ = static_cast<std::int64_t>(it->second);
    }
    if (filter_) {
      const auto it = state.texts.find("curriculum/filter");
      GRPO_CHECK(it != state.texts.end(), "the checkpoint of step {} has no pass-rate filter state", state.step);
      filter_->load(it->second, "trainer_state.json texts.curriculum/filter");
    }
  }

 private:
  struct Domain {
    std::vector<grpo::io::Example> train;
    grpo::train::PromptStream stream;
  };

  static grpo::train::DifficultySchedule difficulty_schedule(const Settings& s) {
    grpo::train::DifficultyScheduleOptions o;
    o.kind = grpo::train::parse_difficulty_schedule(s.curriculum_schedule);
    auto range = [](const std::vector<double>& v, const char* flag) {
      GRPO_CHECK_CONFIG(v.size() == 2, "{} needs MIN,MAX", flag);
      return grpo::train::DifficultyRange{v[0], v[1]};
    };
    if (o.kind == grpo::train::DifficultyScheduleKind::linear) {
      o.start = range(s.curriculum_start, "--curriculum-start");
      o.end = range(s.curriculum_end, "--curriculum-end");
      o.start_step = s.curriculum_start_step;
      o.end_step = s.curriculum_end_step;
    }
    for (const std::string& stage : s.curriculum_stages) {
      double step = 0, min = 0, max = 0;
      char tail = 0;
      GRPO_CHECK_CONFIG(std::sscanf(stage.c_str(), "%lf:%lf:%lf%c", &step, &min, &max, &tail) == 3,
                        "--curriculum-stages: '{}' should be STEP:MIN:MAX", stage);
      o.stages.push_back({static_cast<std::int64_t>(step), {min, max}});
    }
    return grpo::train::DifficultySchedule(std::move(o));
  }
  static grpo::train::DomainMixerOptions mixer_options(const Settings& s, const std::vector<DomainConfig>& domains) {
    grpo::train::DomainMixerOptions o{.probabilities = {1.0}, .seed = s.seed};
    if (!domains.empty()) {
      o.probabilities.clear();
      for (const auto& d : domains) o.probabilities.push_back(d.probability);
    }
    return o;
  }
  std::string filter_key(std::size_t domain, const grpo::io::Example& example) const {
    return names_[domain] + "/" + example.id;
  }
  Problem problem(const grpo::io::Example& example, std::size_t domain) const {
    Problem p;
    p.prompt_text = tokenizer_.chat_template().render(example.prompt, {.add_generation_prompt = true});
    const auto ids = tokenizer_.encode(p.prompt_text, {.add_special_tokens = false});
    p.prompt_ids.assign(ids.begin(), ids.end());
    p.row = example.row;
    p.domain = domain;
    p.id = filter_key(domain, example);
    return p;
  }

  grpo::text::Tokenizer tokenizer_;
  std::vector<std::int64_t> eos_ids_;
  std::int64_t pad_ = 0;
  std::vector<std::string> names_;
  std::vector<Domain> domains_;
  std::vector<Problem> held_out_;
  grpo::train::DifficultySchedule schedule_;
  grpo::train::DomainMixer mixer_;
  std::optional<grpo::train::PassRateFilter> filter_;
  std::int64_t fallbacks_ = 0;
  std::int64_t draws_ = 0;  // batches drawn so far
};

// ---------------------------------------------------------------------------------------------------------------
// The tiny task's starting policy.

grpo::models::CausalLM tiny_model(std::uint64_t seed) {
  torch::manual_seed(seed);
  grpo::models::ModelConfig c;
  c.architecture = grpo::models::Architecture::qwen2;
  c.vocab_size = TinyTask::kVocab;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = true;
  c.eos_token_ids = {TinyTask::kEos};
  return grpo::models::CausalLM(c);
}

/// Supervised warm-up on wrong answers copied from the prompt: the model learns the format and to read its input.
/// The library's SFT stage (train/sft.hpp): loss on the completion tokens only, token mean, the fused log-prob path.
void warm_up(grpo::models::CausalLM& model, TinyTask& task, std::uint64_t seed, std::int64_t steps) {
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(3e-3));
  grpo::train::SftTrainer trainer(model, optimizer, {.max_grad_norm = 0.0});
  std::mt19937_64 rng(seed ^ 0xa11ceULL);
  for (std::int64_t step = 1; step <= steps; ++step) {
    std::vector<grpo::train::SftExample> examples;
    for (const Problem& p : task.train_batch(-step, 64)) {  // negative steps: problems GRPO never samples
      const auto completion = TinyTask::wrong_completion(p, rng);
      grpo::train::SftExample example{p.prompt_ids, std::vector<std::uint8_t>(p.prompt_ids.size(), 0)};
      example.ids.insert(example.ids.end(), completion.begin(), completion.end());
      example.loss_mask.resize(example.ids.size(), 1);
      examples.push_back(std::move(example));
    }
    trainer.step(grpo::train::make_sft_batches(examples, {.batch_size = 64, .pad_token_id = TinyTask::kPad}));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Rollouts, rewards and evaluation.

std::vector<std::vector<std::int64_t>> prompt_ids(const std::vector<Problem>& problems) {
  std::vector<std::vector<std::int64_t>> out;
  for (const Problem& p : problems) out.push_back(p.prompt_ids);
  return out;
}

/// The completions of a rollout as the rewards see them: text, ids, truncation, row, group.
std::vector<Completion> completions_of(const grpo::Rollout& rollout, const std::vector<Problem>& problems,
                                       std::int64_t group_size, const Task& task) {
  const auto ids = grpo::completion_token_ids(rollout);
  const auto truncated_flags = rollout.truncated.to(torch::kCPU).contiguous();
  const auto truncated = truncated_flags.accessor<bool, 1>();
  std::vector<Completion> out(ids.size());
  for (std::size_t b = 0; b < ids.size(); ++b) {
    const auto& problem = problems[b / static_cast<std::size_t>(group_size)];
    out[b].token_ids.assign(ids[b].begin(), ids[b].end());
    out[b].text = task.decode(out[b].token_ids);
    out[b].prompt = problem.prompt_text;
    out[b].truncated = truncated[static_cast<int64_t>(b)];
    out[b].group = b / static_cast<std::size_t>(group_size);
    out[b].row = problem.row;
  }
  return out;
}

/// The text inside the last <answer>…</answer>, normalised, for majority voting.
std::optional<std::string> answer_of(const std::string& text) {
  const auto close = text.rfind("</answer>");
  if (close == std::string::npos) return std::nullopt;
  const auto open = text.rfind("<answer>", close);
  if (open == std::string::npos) return std::nullopt;
  return grpo::math::normalize_latex(text.substr(open + 8, close - open - 8));
}

grpo::rewards::RewardSet make_rewards(const Settings& s) {
  if (!s.reward_config.empty()) return grpo::rewards::RewardSet::from_config(grpo::io::read_file(s.reward_config));
  GRPO_CHECK_CONFIG(s.reward_weights.empty() || s.reward_weights.size() == s.rewards.size(),
                    "--reward-weights: {} weights for {} rewards", s.reward_weights.size(), s.rewards.size());
  const auto registry = grpo::rewards::RewardRegistry::with_builtins();
  std::vector<grpo::rewards::RewardSetEntry> entries;
  for (std::size_t i = 0; i < s.rewards.size(); ++i) {
    entries.push_back({registry.create(fmt::format(R"({{"name": "{}"}})", s.rewards[i])),
                       s.reward_weights.empty() ? 1.0 : s.reward_weights[i]});
  }
  return grpo::rewards::RewardSet(std::move(entries));
}


/// The entry of `set` that decides correctness: the one labelled `label` (RewardSet labels every entry, by default
/// with its reward's name), or the first when `label` is empty: DomainSpec::accuracy_reward's rule. ConfigError for a
/// label that names no entry.
const grpo::rewards::RewardSetEntry& judge_entry(const grpo::rewards::RewardSet& set, const std::string& label) {
  const auto& entries = set.entries();
  if (label.empty()) return entries.front();
  const auto it = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.label == label; });
  GRPO_CHECK_CONFIG(it != entries.end(), "accuracy_reward '{}' is not a reward of the domain", label);
  return *it;
}

/// The value from which `reward` calls a completion correct when the config names no accuracy_threshold: 1 (every
/// test passes, the verifier says equal), except for the verifier's accuracy with step credit w: a right final answer
/// scores at least 1 − w and a wrong one at most w, so 1 − w (less float rounding) separates them when w < 0.5.
/// Called on the rewards as built, before any prefetch wrapping.
double correct_threshold(const grpo::rewards::RewardFunction& reward) {
  const auto* accuracy = dynamic_cast<const grpo::rewards::AccuracyReward*>(&reward);
  const float w = accuracy ? accuracy->options().step_weight : 0.0f;
  if (w == 0.0f) return 1.0;
  GRPO_CHECK_CONFIG(w < 0.5, "accuracy with step_weight {} cannot tell a right final answer from a wrong one by its "
                    "value alone: give the domain an accuracy_threshold, or keep step_weight below 0.5", w);
  return 1.0 - static_cast<double>(w) - 1e-4;
}

/// The reward that decides whether a completion is correct (evaluation, pass rates), and from which value on.
struct Judge {
  grpo::rewards::RewardPtr reward;
  double threshold = 1.0;
};

/// What one step's scoring gives the loop, from one RewardSet or from per-domain sets (rewards::DomainRewards).
struct StepScores {
  std::vector<std::optional<float>> total;  // [B]
  std::vector<std::uint8_t> correct;        // [B] by the completion's Judge
  std::vector<std::uint8_t> judged;         // [B] 1 when the Judge gave a value (a failed judge call gives none)
  std::vector<std::vector<std::pair<std::string, std::optional<double>>>> rewards;  // [B] each reward's value
  std::vector<grpo::train::MetricValue> metrics;  // with their reductions over ranks
};

/// Each reward's value per completion, for the completion table.
std::vector<std::vector<std::pair<std::string, std::optional<double>>>> reward_values(
    const grpo::rewards::RewardSetScores& scores, std::size_t count) {
  std::vector<std::vector<std::pair<std::string, std::optional<double>>>> out(count);
  for (std::size_t k = 0; k < count; ++k) {
    for (std::size_t r = 0; r < scores.names.size(); ++r) {
      const auto& v = scores.values[r][k];
      out[k].emplace_back(scores.names[r], v ? std::optional<double>(*v) : std::nullopt);
    }
  }
  return out;
}

/// Scores a step's completions: with the --rewards set, or with each domain's own set when the config has domains.
class Scorer {
 public:
  Scorer(const Settings& s, const std::vector<DomainConfig>& domains) : overlap_(s.overlap_scoring) {
    if (domains.empty()) {
      auto rewards = make_rewards(s);
      const auto& entries = rewards.entries();
      const auto accuracy = std::find_if(entries.begin(), entries.end(),
                                         [](const auto& e) { return e.reward->name() == "accuracy"; });
      primary_ = accuracy == entries.end() ? 0 : static_cast<std::size_t>(accuracy - entries.begin());
      primary_threshold_ = static_cast<float>(correct_threshold(*entries[primary_].reward));
      single_.emplace(prepared(std::move(rewards), nullptr));  // wrapping keeps the entries' order
    } else {
      const auto registry = grpo::rewards::RewardRegistry::with_builtins();
      std::vector<grpo::rewards::DomainSpec> specs;
      for (const DomainConfig& d : domains) {
        try {
          auto rewards = d.rewards_json.empty() ? make_rewards(s)
                                                : grpo::rewards::RewardSet::from_config(d.rewards_json, registry);
          const auto& judge = judge_entry(rewards, d.accuracy_reward);
          const double threshold = d.accuracy_threshold ? *d.accuracy_threshold : correct_threshold(*judge.reward);
          // Only this domain's completions are scored ahead (the judge and the sandbox see no other domain's).
          const auto mine = [tags = d.tags](const grpo::rewards::Completion& c) {
            const auto tag = c.row ? c.row->text("tag") : std::nullopt;
            return tag && std::find(tags.begin(), tags.end(), *tag) != tags.end();
          };
          specs.push_back(grpo::rewards::DomainSpec{.name = d.name,
                                                    .tags = d.tags,
                                                    .rewards = prepared(std::move(rewards), mine),
                                                    .clip = d.clip,
                                                    .normalisation = d.normalisation,
                                                    .clip_after_normalisation = d.clip_after_normalisation,
                                                    .accuracy_reward = d.accuracy_reward,
                                                    .accuracy_threshold = threshold});
        } catch (const grpo::ConfigError& e) {
          throw grpo::ConfigError(fmt::format("{}: domains.{}.rewards: {}", d.rewards_source, d.name, e.what()));
        }
      }
      domains_.emplace(std::move(specs));
    }
    if (!prefetched_.empty()) prefetcher_ = std::make_unique<grpo::rewards::RewardPrefetcher>(prefetched_, prefetcher_options_);
  }

  StepScores score(std::span<const Completion> batch) const {
    using grpo::train::MetricReduction;
    StepScores out;
    const double completions = static_cast<double>(batch.size());
    if (single_) {
      const auto scores = single_->score(batch);
      out.total = scores.total;
      for (const auto& value : scores.values[primary_]) {
        out.correct.push_back(value && *value >= primary_threshold_);
        out.judged.push_back(value.has_value());
      }
      out.rewards = reward_values(scores, batch.size());
      for (const auto& [name, value] : scores.metrics()) {
        out.metrics.push_back({name, value, MetricReduction::weighted_mean, completions});
      }
      return out;
    }
    const auto scores = domains_->score(batch);
    out.total = scores.total;
    out.correct = scores.correct;
    out.judged = scores.judged;
    out.rewards.resize(batch.size());
    for (std::size_t d = 0; d < scores.per_domain.size(); ++d) {
      const auto& members = scores.members[d];
      auto values = reward_values(scores.per_domain[d], members.size());
      for (std::size_t k = 0; k < members.size(); ++k) out.rewards[members[k]] = std::move(values[k]);
    }
    // Per-domain means weigh by the domain's completions (groups for the zero-std fraction); counts add up.
    for (const auto& [name, value] : scores.metrics()) {
      MetricReduction reduction = MetricReduction::weighted_mean;
      double weight = completions;
      for (const auto& summary : scores.summaries) {
        const std::string prefix = "domains/" + summary.name + "/";
        if (!name.starts_with(prefix)) continue;
        const bool count = name == prefix + "completions" || name == prefix + "groups";
        reduction = count ? MetricReduction::sum : MetricReduction::weighted_mean;
        weight = count ? 1.0
                 : name == prefix + "frac_reward_zero_std" ? static_cast<double>(summary.groups)
                                                           : static_cast<double>(summary.completions);
      }
      out.metrics.push_back({name, value, reduction, weight});
    }
    return out;
  }

  /// Domain d's judge for evaluation: its accuracy reward and threshold; for one data set (or the tiny task) the
  /// math verifier's accuracy, right when it gives more than 0.5.
  Judge judge(std::size_t domain) const {
    if (!domains_) return {grpo::rewards::RewardRegistry::with_builtins().create(R"({"name": "accuracy"})"), 0.5};
    const auto& spec = domains_->domains()[domain];
    return {judge_entry(spec.rewards, spec.accuracy_reward).reward, spec.accuracy_threshold};
  }

  /// With --overlap-scoring: starts scoring completions in the background (their values are then found in the
  /// caches by score()); wait() blocks until all are done, clear() starts a new step.
  void prefetch(std::vector<Completion> chunk) {
    if (prefetcher_) prefetcher_->submit(std::move(chunk));
  }
  void wait() {
    if (prefetcher_) prefetcher_->wait();
  }
  void clear() {
    if (prefetcher_) prefetcher_->clear();
  }

  /// The first reward's label (of the first domain), for the console line.
  std::string headline_reward() const {
    const auto& entries = single_ ? single_->entries() : domains_->domains().front().rewards.entries();
    return entries.front().label;  // RewardSet labels every entry (by default with its reward's name)
  }

 private:
  /// With --overlap-scoring, the set with its completion-scoped entries wrapped for prefetching (the wrappers are
  /// collected for the one prefetcher); otherwise the set as it is.
  /// `only`: the completions this set scores (null = all), so that the prefetcher scores no others with it.
  grpo::rewards::RewardSet prepared(grpo::rewards::RewardSet set, std::function<bool(const Completion&)> only) {
    if (!overlap_) return set;
    std::vector<std::string> labels;
    for (const auto& entry : set.entries()) {
      if (entry.reward->scope() == grpo::rewards::RewardScope::completion) labels.push_back(entry.label);
    }
    auto wrapped = grpo::rewards::wrap_for_prefetch(set, labels, {.prefetch_if = std::move(only)});
    if (prefetched_.empty()) prefetcher_options_ = wrapped.prefetcher_options;  // the first set's executor settings
    prefetched_.insert(prefetched_.end(), wrapped.prefetched.begin(), wrapped.prefetched.end());
    return std::move(wrapped.rewards);
  }

  bool overlap_ = false;
  std::optional<grpo::rewards::RewardSet> single_;
  std::size_t primary_ = 0;
  float primary_threshold_ = 1.0f;
  std::optional<grpo::rewards::DomainRewards> domains_;
  std::vector<std::shared_ptr<grpo::rewards::PrefetchedReward>> prefetched_;
  grpo::rewards::RewardPrefetcherOptions prefetcher_options_;
  std::unique_ptr<grpo::rewards::RewardPrefetcher> prefetcher_;
};

/// Held-out results: over all problems and per domain.
struct Evaluation {
  grpo::train::EvalSummary all;
  std::vector<grpo::train::EvalSummary> per_domain;
};

struct Evaluator {
  const Task& task;
  const Settings& settings;
  std::vector<Judge> judges;  // per domain
  grpo::rewards::RewardExecutor executor{grpo::rewards::RewardExecutorOptions{}};

  /// k samples per held-out problem at the training temperature: mean accuracy, pass@k, maj@k.
  Evaluation operator()(grpo::models::CausalLM& model, std::int64_t step, std::int64_t max_new_tokens) const {
    torch::NoGradGuard no_grad;
    std::vector<Problem> problems = task.held_out();
    if (settings.eval_problems > 0 && static_cast<std::int64_t>(problems.size()) > settings.eval_problems)
      problems.resize(static_cast<std::size_t>(settings.eval_problems));
    grpo::Sampler sampler({.temperature = settings.temperature,
                           .max_new_tokens = max_new_tokens,
                           .eos_token_ids = task.eos_token_ids(),
                           .pad_token_id = task.pad_token_id(),
                           .seed = settings.seed + 7919 * static_cast<std::uint64_t>(step)});
    std::vector<grpo::train::EvalSample> samples;
    std::vector<std::vector<grpo::train::EvalSample>> by_domain(judges.size());
    const std::int64_t chunk = std::max<std::int64_t>(1, 256 / settings.eval_samples);
    for (std::size_t start = 0; start < problems.size(); start += static_cast<std::size_t>(chunk)) {
      const std::vector<Problem> part(problems.begin() + static_cast<std::ptrdiff_t>(start),
                                      problems.begin() + static_cast<std::ptrdiff_t>(
                                                             std::min(problems.size(), start + chunk)));
      const auto rollout = sampler.generate(model, prompt_ids(part), settings.eval_samples);
      const auto batch = completions_of(rollout, part, settings.eval_samples, task);
      // Each domain's completions by its own judge, one call per domain.
      std::vector<std::optional<float>> values(batch.size());
      for (std::size_t d = 0; d < judges.size(); ++d) {
        std::vector<Completion> mine;
        std::vector<std::size_t> where;
        for (std::size_t b = 0; b < batch.size(); ++b) {
          if (part[batch[b].group].domain != d) continue;
          mine.push_back(batch[b]);
          where.push_back(b);
        }
        if (mine.empty()) continue;
        const auto scores = executor.score(judges[d].reward, mine);
        for (std::size_t k = 0; k < where.size(); ++k) values[where[k]] = scores.values[k];
      }
      for (std::size_t b = 0; b < batch.size(); ++b) {
        const std::size_t d = part[batch[b].group].domain;
        const bool correct = values[b].has_value() && *values[b] >= judges[d].threshold;
        const grpo::train::EvalSample sample{answer_of(batch[b].text), correct};
        samples.push_back(sample);
        by_domain[d].push_back(sample);
      }
    }
    Evaluation out{grpo::train::summarize_evaluation(samples, settings.eval_samples, settings.eval_samples), {}};
    for (const auto& domain_samples : by_domain) {
      out.per_domain.push_back(
          grpo::train::summarize_evaluation(domain_samples, settings.eval_samples, settings.eval_samples));
    }
    return out;
  }
};

/// DAPO's soft overlong punishment of the stage (its limit, the last overlong_buffer tokens), weighted by
/// overlong_factor and added to each completion's total (a total no reward could judge stays missing).
void add_overlong_penalty(StepScores& scores, std::span<const Completion> batch, const grpo::train::ContextStage& stage) {
  const grpo::rewards::SoftOverlongReward penalty(
      {.max_completion_len = static_cast<std::size_t>(stage.max_new_tokens),
       .soft_punish_cache = static_cast<std::size_t>(stage.overlong_buffer)});
  const auto values = penalty.score(batch, {});
  double sum = 0.0;
  for (std::size_t b = 0; b < batch.size(); ++b) {
    const double v = values[b].value_or(0.0f);
    sum += v;
    if (scores.total[b]) scores.total[b] = static_cast<float>(*scores.total[b] + stage.overlong_factor * v);
    scores.rewards[b].emplace_back("soft_overlong", v);
  }
  scores.metrics.push_back({"rewards/soft_overlong/mean", batch.empty() ? 0.0 : sum / static_cast<double>(batch.size()),
                            grpo::train::MetricReduction::weighted_mean, static_cast<double>(batch.size())});
}

/// Prints a context stage switch and the new stage's settings.
void report_stage(const grpo::train::StageSwitch& change, const grpo::train::ContextSchedule& context) {
  const auto& stage = context.stages()[change.to];
  fmt::print("context stage {} -> {} from step {} ({}): max_new_tokens {}{}{}{}\n", change.from, change.to, change.step,
             change.reason, stage.max_new_tokens,
             stage.group_size ? fmt::format(", group size {}", *stage.group_size) : "",
             stage.learning_rate ? fmt::format(", lr {}", *stage.learning_rate) : "",
             stage.mask_truncated ? ", truncated completions masked" : "");
  std::fflush(stdout);
}

/// The loss of the recipe --loss with the flags' overrides, the KL coefficient and completion limit of this step.
grpo::GrpoLoss make_loss(const Settings& s, double beta, std::int64_t max_new_tokens) {
  auto options = grpo::recipes::by_name(s.loss, max_new_tokens);
  options.beta = beta;
  options.kl = grpo::parse_kl_estimator(s.kl_estimator);
  options.policy.epsilon_low = s.epsilon;
  options.policy.epsilon_high = s.loss == "cispo" ? options.policy.epsilon_high : s.epsilon_high;
  options.entropy_coef = s.entropy_coef;
  return grpo::GrpoLoss(options);
}

}  // namespace

int main(int argc, char** argv) try {
  Settings s;
  CLI::App app{"GRPO R1-Zero training: the built-in tiny task, or a Hugging Face checkpoint on one or several data sets"};
  add_flags(app, s);
  fs::path config_path;
  std::vector<std::string> overrides;
  app.add_option("--config", config_path,
                 "YAML or JSON run config: flags by name (nested sections join: kl: {target: 0.1} is --kl-target), "
                 "'extends: base.yaml' to inherit, 'domains:' for a multi-domain run")
      ->check(CLI::ExistingFile);
  app.add_option("--set", overrides, "override one config key, e.g. --set kl.target=0.05 (repeatable)");
  CLI11_PARSE(app, argc, argv);
  const ConfigSections sections = apply_config(app, s, config_path, overrides);
  const std::vector<DomainConfig>& domains = sections.domains;
  if (!s.model_dir.empty()) s.task = "data";
  const bool tiny = s.task == "tiny";
  GRPO_CHECK_CONFIG(tiny || (!s.model_dir.empty() && (!s.data_path.empty() || !domains.empty())),
                    "--task data needs --model DIR and --data FILE (or a config with domains)");
  GRPO_CHECK_CONFIG(!tiny || domains.empty(), "a config with domains needs --model DIR");
  if (s.max_new_tokens == 0) s.max_new_tokens = tiny ? 8 : 512;
  // Context stages (DeepScaleR); without a `stages` section, one stage of the flags' limit and group size.
  grpo::train::ContextSchedule context(sections.stages.empty()
                                           ? std::vector<grpo::train::ContextStage>{{.max_new_tokens = s.max_new_tokens}}
                                           : sections.stages);
  const bool dynamic_sampling = s.dynamic_sampling_max_rounds > 0;
  if (tiny && s.held_out == 0) s.held_out = 256;
  // One process, or one rank of scripts/launch.sh -n N (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): each rank
  // samples its share of the P prompts; gradients and metrics are combined so a step equals one process's.
  auto group = grpo::train::ProcessGroup::from_env();
  // Threads: the tiny task's tensors are too small for intra-op threads to pay (measured: 2 threads take 2.5× as
  // long as 1 on 2 cores; use launch.sh -n 2 for both cores); a real model's matrix products want the cores.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(s.threads > 0 ? s.threads : tiny ? 1 : std::max(1, cores / group.world_size()));
  const bool main_rank = group.is_main();

  // The policy and the task.
  std::unique_ptr<Task> task;
  grpo::models::CausalLM model{nullptr};
  if (tiny) {
    auto tiny_task = std::make_unique<TinyTask>(s.seed, s.held_out);
    model = tiny_model(s.seed);
    warm_up(model, *tiny_task, s.seed, 150);
    task = std::move(tiny_task);
  } else {
    model = grpo::models::from_pretrained(s.model_dir, torch::kFloat32);
    auto tokenizer = grpo::text::Tokenizer::from_pretrained(s.model_dir);
    task = std::make_unique<DataTask>(s, domains, std::move(tokenizer), model->config().eos_token_ids);
  }
  const std::vector<std::string> domain_names = task->domain_names();
  const bool multi_domain = !domains.empty();
  grpo::train::broadcast_parameters(group, *model);  // every rank starts from rank 0's weights
  grpo::Policy policy(model, {.temperature = s.temperature});
  grpo::train::KlController kl_control({.type = grpo::train::parse_kl_control(s.kl_control),
                                        .beta = s.beta,
                                        .target = s.kl_target,
                                        .horizon = s.kl_horizon});
  std::optional<grpo::Policy<grpo::models::CausalLM>> reference;
  if (s.beta > 0.0) reference = policy.frozen_copy();
  // A reference synced during the run is part of the state a checkpoint saves; a frozen one is rebuilt at start.
  const bool synced_reference = reference && s.ref_sync_every > 0;

  Scorer scorer(s, domains);
  grpo::GroupAdvantage advantage({.estimator = grpo::parse_advantage_estimator(s.advantage)});
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(s.lr).weight_decay(s.weight_decay));
  grpo::train::LrScheduleOptions schedule{.base_lr = s.lr, .warmup_steps = s.warmup_steps,
                                                .total_steps = s.steps, .decay = grpo::train::parse_lr_decay(s.lr_decay)};
  std::vector<Judge> judges;
  for (std::size_t d = 0; d < domain_names.size(); ++d) judges.push_back(scorer.judge(d));
  const Evaluator evaluate{*task, s, std::move(judges)};

  // Resume, then the sinks (appending, so a resumed run continues its files).
  grpo::train::CheckpointManager checkpoints({.directory = s.output_dir / "checkpoints",
                                              .keep_last = static_cast<std::size_t>(s.keep_last)});
  std::int64_t first_step = 1;
  if (s.resume) {
    if (const auto latest = checkpoints.latest()) {
      const auto state = grpo::train::load_checkpoint(group, latest->path, model, optimizer,
                                                      synced_reference ? &reference->model() : nullptr);
      first_step = state.step + 1;
      task->load_state(state);
      // An adaptive β continues where it was; a fixed one is --beta (which the resumed run may change).
      if (const auto beta = state.values.find("kl_coef");
          beta != state.values.end() && kl_control.options().type == grpo::train::KlControl::adaptive) {
        kl_control.restore(beta->second);
      }
      if (state.values.count("context/stage")) context.restore(state.values);
      if (main_rank) fmt::print("resumed from {} (step {})\n", latest->path.string(), state.step);
    }
  }
  // Rank 0 logs, evaluates and writes; the other ranks only train.
  std::optional<grpo::train::MetricsWriter> metrics_file;
  std::optional<grpo::train::CompletionTableWriter> completion_table;
  std::optional<grpo::train::TensorBoardWriter> tensorboard;
  if (main_rank) {
    if (tiny && first_step == 1) fmt::print("tiny task: starting policy warmed up on wrong answers\n");
    const auto mode = s.resume ? grpo::train::OpenMode::append : grpo::train::OpenMode::truncate;
    metrics_file.emplace(s.output_dir / "metrics.jsonl", mode);
    completion_table.emplace(s.output_dir / "completions.jsonl", mode);
    if (s.tensorboard) tensorboard.emplace(s.output_dir / "tensorboard");
  }
  auto log_scalars = [&](std::int64_t step, const grpo::train::Scalars& scalars) {
    metrics_file->write(step, scalars);
    if (tensorboard) tensorboard->write(step, scalars);
  };
  auto run_eval = [&](std::int64_t step, std::int64_t max_new_tokens) {
    const auto e = evaluate(model, step, max_new_tokens);
    grpo::train::Scalars scalars{{"eval/mean_accuracy", e.all.mean_accuracy},
                                 {fmt::format("eval/pass@{}", e.all.k), e.all.pass_at_k},
                                 {fmt::format("eval/maj@{}", e.all.samples_per_problem), e.all.maj_at_n}};
    fmt::print("eval step {:4d}: held-out accuracy {:.3f}  pass@{} {:.3f}  maj@{} {:.3f}  ({} problems)\n", step,
               e.all.mean_accuracy, e.all.k, e.all.pass_at_k, e.all.samples_per_problem, e.all.maj_at_n, e.all.problems);
    if (multi_domain) {
      for (std::size_t d = 0; d < domain_names.size(); ++d) {
        const auto& de = e.per_domain[d];
        scalars.emplace_back(fmt::format("eval/{}/mean_accuracy", domain_names[d]), de.mean_accuracy);
        scalars.emplace_back(fmt::format("eval/{}/pass@{}", domain_names[d], de.k), de.pass_at_k);
        fmt::print("  {:>12}: held-out accuracy {:.3f}  pass@{} {:.3f}  ({} problems)\n", domain_names[d],
                   de.mean_accuracy, de.k, de.pass_at_k, de.problems);
      }
    }
    log_scalars(step, scalars);
    std::fflush(stdout);
    return e.all.mean_accuracy;
  };
  std::vector<std::pair<std::int64_t, double>> curve;
  if (first_step == 1 && main_rank) curve.emplace_back(0, run_eval(0, context.current().max_new_tokens));

  const auto start = std::chrono::steady_clock::now();
  bool stage_metrics_checked = false;
  for (std::int64_t step = first_step; step <= s.steps; ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    // The context stage of this step: its completion limit, group size, learning rate and overlong handling.
    if (const auto change = context.begin_step(step); change && main_rank) report_stage(*change, context);
    const grpo::train::ContextStage& stage = context.current();
    const std::int64_t max_new_tokens = stage.max_new_tokens;
    const std::int64_t group_size = stage.group_size.value_or(s.group_size);
    schedule.base_lr = stage.learning_rate.value_or(s.lr);
    const double lr = grpo::train::learning_rate_at(step, schedule);
    grpo::train::set_learning_rate(optimizer, lr);

    // 1. Rounds of sampling and scoring: G completions per prompt of this rank's share of the round's prompts, each
    //    scored by its domain's rewards. One round; with dynamic sampling, rounds until P groups have reward spread.
    grpo::train::GroupCollector collector({.target_groups = s.prompts_per_step,
                                           .max_rounds = dynamic_sampling ? s.dynamic_sampling_max_rounds : 1,
                                           .at_cap = grpo::train::parse_dynamic_sampling_cap(s.dynamic_sampling_at_cap)});
    const std::int64_t round_prompts =
        dynamic_sampling && s.dynamic_sampling_prompts > 0 ? s.dynamic_sampling_prompts : s.prompts_per_step;
    std::vector<grpo::Rollout> kept_rollouts;
    std::vector<Problem> kept_problems;                      // this rank's kept prompts
    std::vector<Completion> batch;                           // their completions (group = index in kept_problems)
    std::vector<std::optional<float>> kept_total;
    std::vector<std::vector<std::pair<std::string, std::optional<double>>>> kept_rewards;
    std::vector<std::vector<grpo::train::MetricValue>> score_parts;  // one list per round
    std::vector<torch::Tensor> sampled_lengths, sampled_truncated;    // every completion sampled this step
    do {
      const auto round = static_cast<std::uint64_t>(collector.rounds());
      const auto all_problems = task->train_batch(step, round_prompts);
      const auto shard = grpo::train::shard_range(round_prompts, group.rank(), group.world_size());
      const std::vector<Problem> problems(all_problems.begin() + shard.begin, all_problems.begin() + shard.end);
      const std::uint64_t sample_seed =
          ((s.seed * 1000003 + static_cast<std::uint64_t>(step)) * 131 + group.rank()) ^ (round * 0x9E3779B97F4A7C15ULL);
      // Chunks of the shard's prompts, each sampled with its own seed (chunk 0's is the unchunked run's); with
      // --overlap-scoring the rewards score chunk k while chunk k + 1 is sampled.
      scorer.clear();
      std::vector<grpo::Rollout> chunks;
      std::vector<Completion> round_batch;
      const auto chunk_count = std::min<std::int64_t>(s.generation_chunks, std::max<std::int64_t>(1, shard.size()));
      for (std::int64_t c = 0; c < chunk_count; ++c) {
        const auto begin = static_cast<std::size_t>(shard.size() * c / chunk_count);
        const auto end = static_cast<std::size_t>(shard.size() * (c + 1) / chunk_count);
        const std::vector<Problem> part(problems.begin() + static_cast<std::ptrdiff_t>(begin),
                                        problems.begin() + static_cast<std::ptrdiff_t>(end));
        grpo::Sampler sampler({.temperature = s.temperature, .max_new_tokens = max_new_tokens, .top_k = s.top_k,
                               .top_p = s.top_p, .min_p = s.min_p, .eos_token_ids = task->eos_token_ids(),
                               .pad_token_id = task->pad_token_id(),
                               .seed = sample_seed ^ (static_cast<std::uint64_t>(c) * 0xD1B54A32D192ED03ULL)});
        {
          torch::NoGradGuard no_grad;
          chunks.push_back(sampler.generate(model, prompt_ids(part), group_size));
        }
        auto chunk_batch = completions_of(chunks.back(), part, group_size, *task);
        for (Completion& completion : chunk_batch) completion.group += begin;  // index into this round's problems
        if (s.overlap_scoring) scorer.prefetch(chunk_batch);
        round_batch.insert(round_batch.end(), std::make_move_iterator(chunk_batch.begin()),
                           std::make_move_iterator(chunk_batch.end()));
      }
      const grpo::Rollout rollout = chunks.size() == 1 ? chunks.front() : grpo::concat_rollouts(chunks, task->pad_token_id());
      scorer.wait();
      StepScores scores = scorer.score(round_batch);
      if (stage.overlong_buffer > 0) add_overlong_penalty(scores, round_batch, stage);
      sampled_lengths.push_back(rollout.completion_lengths().to(torch::kFloat64));
      sampled_truncated.push_back(rollout.truncated.to(torch::kFloat64));
      score_parts.push_back(scores.metrics);

      // Pass rates (for the curriculum) and reward spread (for dynamic sampling) of every prompt of the round,
      // summed over the ranks so that every rank sees the whole round.
      torch::Tensor flags = torch::zeros({2, round_prompts}, torch::kFloat64);
      auto flag = flags.accessor<double, 2>();
      const auto totals = torch::tensor(grpo::rewards::with_nan(scores.total)).view({shard.size(), group_size});
      const auto informative = grpo::train::informative_groups(totals);
      for (std::int64_t i = 0; i < shard.size(); ++i) {
        double correct = 0.0, judged = 0.0;
        for (std::int64_t g = 0; g < group_size; ++g) {
          correct += scores.correct[static_cast<std::size_t>(i * group_size + g)];
          judged += scores.judged[static_cast<std::size_t>(i * group_size + g)];
        }
        // Over the completions the judge could score; NaN (the filter's "unknown") when it scored none, so a
        // failing judge endpoint does not retire prompts as unsolved.
        flag[0][shard.begin + i] = judged > 0 ? correct / judged : NAN;
        flag[1][shard.begin + i] = dynamic_sampling ? informative[static_cast<std::size_t>(i)] : 1.0;
      }
      group.all_reduce_(flags);
      task->observe(all_problems, std::span<const double>(flags[0].contiguous().data_ptr<double>(), all_problems.size()), step);
      std::vector<std::uint8_t> spread(static_cast<std::size_t>(round_prompts));
      for (std::int64_t p = 0; p < round_prompts; ++p) spread[static_cast<std::size_t>(p)] = flag[1][p] > 0.5;
      const std::vector<std::uint8_t> keep = collector.add_round(spread);

      // This rank's kept groups.
      std::vector<std::int64_t> rows;
      for (std::int64_t i = 0; i < shard.size(); ++i) {
        if (!keep[static_cast<std::size_t>(shard.begin + i)]) continue;
        for (std::int64_t g = 0; g < group_size; ++g) {
          const auto b = static_cast<std::size_t>(i * group_size + g);
          rows.push_back(static_cast<std::int64_t>(b));
          Completion completion = round_batch[b];
          completion.group = kept_problems.size();
          batch.push_back(std::move(completion));
          kept_total.push_back(scores.total[b]);
          kept_rewards.push_back(scores.rewards[b]);
        }
        kept_problems.push_back(problems[static_cast<std::size_t>(i)]);
      }
      kept_rollouts.push_back(rollout.select(torch::tensor(rows, torch::kInt64)));
    } while (!collector.done());
    const bool train_step = collector.train();
    const grpo::Rollout rollout = grpo::concat_rollouts(kept_rollouts, task->pad_token_id());
    const std::int64_t rows = rollout.batch_size();  // may be 0 on a rank whose groups were all dropped

    // 2. Group-relative advantages of the kept groups.
    grpo::AdvantageOutput adv;
    if (rows > 0) adv = advantage(torch::tensor(grpo::rewards::with_nan(kept_total)).view({rows / group_size, group_size}));
    // The loss mask: without the truncated completions when the stage filters them (DAPO overlong filtering).
    const torch::Tensor loss_mask = stage.mask_truncated
                                        ? grpo::truncated_completion_mask(rollout.completion_mask, rollout.truncated)
                                        : rollout.completion_mask;

    // 3. Old and reference log-probs (no grad), when μ > 1 and β > 0 need them.
    torch::Tensor old_log_probs, ref_log_probs;
    if (train_step && rows > 0) {
      torch::NoGradGuard no_grad;
      if (s.mu > 1) old_log_probs = policy.token_log_probs(rollout).log_probs;
      if (reference) ref_log_probs = reference->token_log_probs(rollout).log_probs;
    }

    // 4. μ passes; each accumulates the micro-batches' gradients with the whole (all ranks') batch's normaliser.
    const double beta = kl_control.beta();
    const auto loss = make_loss(s, beta, max_new_tokens);
    std::vector<std::vector<grpo::train::MetricValue>> loss_parts;  // one list per micro-batch of the last pass
    double grad_norm = 0.0;
    if (train_step) {
      const auto type = loss.options().loss_type;
      const auto normaliser = grpo::train::global_normaliser(
          group, type,
          rows > 0 ? std::optional(grpo::local_normaliser(type, loss_mask, {.max_completion_length = max_new_tokens}))
                   : std::nullopt);
      const std::int64_t micro = (rows + s.micro_batches - 1) / s.micro_batches;
      for (std::int64_t pass = 0; pass < s.mu; ++pass) {
        optimizer.zero_grad();
        loss_parts.clear();
        for (std::int64_t begin = 0; begin < rows; begin += micro) {
          const std::int64_t count = std::min(micro, rows - begin);
          const auto part = rollout.rows(begin, count);
          const auto lp = policy.token_log_probs(part, /*with_entropy=*/true);
          grpo::LossInputs inputs{.log_probs = lp.log_probs,
                                  .old_log_probs = s.mu > 1 ? old_log_probs.narrow(0, begin, count) : torch::Tensor(),
                                  .ref_log_probs = reference ? ref_log_probs.narrow(0, begin, count) : torch::Tensor(),
                                  .advantages = adv.advantages.narrow(0, begin, count),
                                  .mask = loss_mask.narrow(0, begin, count),
                                  .entropy = lp.entropy};
          const auto out = loss(inputs, normaliser);
          out.loss.backward();
          loss_parts.push_back(grpo::train::loss_metric_values(out.metrics));
        }
        if (rows == 0) {  // nothing kept on this rank: zero gradients and metrics that weigh nothing
          grpo::LossMetrics none;
          if (reference) none.kl_mean = 0.0;
          none.entropy_mean = 0.0;
          loss_parts.push_back(grpo::train::loss_metric_values(none));
        }
        grpo::train::all_reduce_gradients(group, model->parameters());  // summed: each rank's loss has the global normaliser
        grad_norm = s.max_grad_norm > 0 ? torch::nn::utils::clip_grad_norm_(model->parameters(), s.max_grad_norm)
                                         : torch::nn::utils::clip_grad_norm_(model->parameters(), 1e30);
        optimizer.step();
      }
      if (synced_reference && step % s.ref_sync_every == 0) reference->sync_from(policy, s.ref_sync_alpha);
    }

    // 5. Log: metrics file, TensorBoard, sample table, console. Reward and length metrics cover every completion
    //    sampled this step (all rounds: the policy, not the filter); the loss metrics cover the kept groups.
    const double step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    const auto lengths = torch::cat(sampled_lengths);
    const double tokens = lengths.sum().item<double>();
    using grpo::train::MetricReduction;
    const double sampled = static_cast<double>(lengths.numel());
    std::vector<grpo::train::MetricValue> values = grpo::train::combine_metrics(score_parts);
    values.push_back({"frac_reward_zero_std", adv.frac_reward_zero_std, MetricReduction::weighted_mean,
                      static_cast<double>(rows / group_size)});
    for (auto& value : grpo::train::combine_metrics(loss_parts)) values.push_back(std::move(value));
    values.insert(values.end(),
                  {{"completions/mean_length", lengths.mean().item<double>(), MetricReduction::weighted_mean, sampled},
                   {"completions/min_length", lengths.min().item<double>(), MetricReduction::min, sampled},
                   {"completions/max_length", lengths.max().item<double>(), MetricReduction::max, sampled},
                   {"completions/clipped_ratio", torch::cat(sampled_truncated).mean().item<double>(),
                    MetricReduction::weighted_mean, sampled},
                   {"grad_norm", grad_norm, MetricReduction::max, 1.0},
                   {"learning_rate", lr, MetricReduction::max, 1.0},
                   {"kl_coef", beta, MetricReduction::max, 1.0},
                   {"context/stage", static_cast<double>(context.index()), MetricReduction::max, 1.0},
                   {"context/max_new_tokens", static_cast<double>(max_new_tokens), MetricReduction::max, 1.0},
                   {"tokens_per_second", tokens / step_seconds, MetricReduction::sum, 1.0},
                   {"step_time", step_seconds, MetricReduction::max, 1.0}});
    if (dynamic_sampling) {
      for (const auto& [name, value] : collector.metrics()) values.push_back({name, value, MetricReduction::max, 1.0});
    }
    for (const auto& [name, value] : task->metrics(step)) values.push_back({name, value, MetricReduction::max, 1.0});
    const grpo::train::Scalars scalars = grpo::train::reduce_metrics(group, values);
    const std::map<std::string, double> logged(scalars.begin(), scalars.end());
    // A stage condition on a metric this run never logs would never fire: stop at the first step that trains.
    if (train_step && !stage_metrics_checked) {
      for (std::size_t i = 0; i < context.stages().size(); ++i) {
        const std::string& metric = context.stages()[i].metric;
        GRPO_CHECK_CONFIG(metric.empty() || logged.contains(metric),
                          "stages[{}]: 'when' names metric '{}', which this run does not log (e.g. "
                          "completions/clipped_ratio, completions/mean_length, reward, kl; see metrics.jsonl)",
                          i, metric);
      }
      stage_metrics_checked = true;
    }
    // Adaptive KL: the step's measured KL (token mean over every rank) sets β for the next step.
    const double sequences = group.all_reduce(static_cast<double>(rows));
    if (const auto kl = logged.find("kl"); kl != logged.end()) kl_control.update(kl->second, static_cast<std::int64_t>(sequences));
    if (main_rank) log_scalars(step, scalars);
    std::vector<grpo::train::CompletionRecord> records;
    for (std::size_t b = 0; b < batch.size() && static_cast<std::int64_t>(b) < s.log_completions; ++b) {
      records.push_back({batch[b].prompt, batch[b].text, kept_rewards[b],
                         adv.advantages[static_cast<int64_t>(b)].item<double>(),
                         multi_domain ? domain_names[kept_problems[batch[b].group].domain] : std::string()});
    }
    if (main_rank) completion_table->write(step, records);
    if (main_rank && (step % s.log_every == 0 || step == first_step || step == s.steps)) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::vector<std::pair<std::string, double>> shown{{"reward", logged.at("reward")}};
      if (multi_domain) {
        for (const std::string& name : domain_names) shown.emplace_back(name + "_acc", logged.at("domains/" + name + "/accuracy"));
      } else {
        const std::string first = scorer.headline_reward();
        shown.emplace_back(first, logged.at("rewards/" + first + "/mean"));
      }
      shown.insert(shown.end(), {{"zero_std", logged.at("frac_reward_zero_std")},
                                 {"entropy", logged.count("entropy") ? logged.at("entropy") : 0.0},
                                 {"len", logged.at("completions/mean_length")}});
      if (dynamic_sampling) shown.emplace_back("rounds", logged.at("dynamic_sampling/rounds"));
      if (kl_control.options().type == grpo::train::KlControl::adaptive) shown.emplace_back("beta", beta);
      fmt::print("{}{}\n", grpo::train::format_progress_line(step - first_step + 1, s.steps - first_step + 1, elapsed, shown),
                 train_step ? "" : " | step skipped: too few groups with reward spread");
      if (multi_domain) {  // each domain's line: which one learns, which one stalls
        for (const std::string& name : domain_names) {
          const auto metric = [&](const std::string& key) { return logged.at("domains/" + name + "/" + key); };
          fmt::print("{:>14}: reward {:.4g} ± {:.4g} | accuracy {:.4g} | zero_std {:.4g} | len {:.4g} | {} completions\n",
                     name, metric("reward/mean"), metric("reward/std"), metric("accuracy"),
                     metric("frac_reward_zero_std"), metric("completion_length"), metric("completions"));
        }
      }
      std::fflush(stdout);
    }
    // A metric-triggered context stage starts with the next step.
    if (const auto change = context.end_step(step, logged); change && main_rank) report_stage(*change, context);

    // 6. Evaluate (rank 0; the others wait at the next collective) and checkpoint (rank 0 writes).
    const bool last = step == s.steps;
    if (main_rank && ((s.eval_every > 0 && step % s.eval_every == 0) || last)) {
      curve.emplace_back(step, run_eval(step, context.current().max_new_tokens));
    }
    if ((s.save_every > 0 && step % s.save_every == 0) || last) {
      grpo::train::TrainerState state{.step = step, .seed = s.seed, .values = context.state_values()};
      state.values["kl_coef"] = kl_control.beta();
      task->save_state(state);
      grpo::train::save_checkpoint(group, checkpoints, model, optimizer, state,
                                   synced_reference ? &reference->model() : nullptr);
    }
  }

  if (main_rank) {
    fmt::print("held-out accuracy by step:");
    for (const auto& [step, accuracy] : curve) fmt::print("  {}: {:.3f}", step, accuracy);
    fmt::print("\n");
  }
  return 0;
} catch (const grpo::Error& e) {
  fmt::print(stderr, "r1_zero: {}\n", e.what());
  return 1;
}

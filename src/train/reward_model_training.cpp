// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/reward_model_training.hpp>

#include <grpo/core/error.hpp>
#include <grpo/core/permutation.hpp>
#include <grpo/io/json_lines.hpp>
#include <grpo/io/read_file.hpp>
#include <grpo/loss/bradley_terry.hpp>
#include <grpo/models/value_model.hpp>
#include <grpo/rewards/reward_model_reward.hpp>
#include <grpo/text/chat_messages.hpp>
#include <grpo/text/chat_template.hpp>
#include <grpo/text/tokenizer.hpp>
#include <grpo/train/master_weights.hpp>
#include <grpo/train/optimizer_step.hpp>
#include <grpo/train/training_mode.hpp>

#include <fmt/format.h>
#include <simdjson.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace grpo::train {
namespace {

/// One side of a line: its text, or its messages.
struct Side {
  std::optional<std::string> text;
  std::vector<text::ChatMessage> messages;
  bool is_messages() const { return !text.has_value(); }
};

Side read_side(simdjson::dom::object line, std::string_view field, std::string_view where, bool required) {
  simdjson::dom::element e;
  if (line[field].get(e) || e.is_null()) {
    if (required) throw ParseError(fmt::format("{}: missing field \"{}\" (a preference pair needs \"chosen\" and "
                                               "\"rejected\")", where, field));
    return {std::string(), {}};
  }
  std::string_view s;
  if (!e.get_string().get(s)) return {std::string(s), {}};
  if (e.is_array()) {
    try {
      return {std::nullopt, text::parse_chat_messages(simdjson::minify(e), field)};
    } catch (const ParseError& error) {
      throw ParseError(fmt::format("{}: {}", where, error.what()));
    }
  }
  throw ParseError(fmt::format("{}: field \"{}\" must be a string or a list of messages", where, field));
}

/// A conversational line: the prompt rendered with the assistant header, each side as the whole conversation after
/// it. With no explicit prompt, the messages both sides begin with are the prompt (TRL's maybe_extract_prompt).
void render_conversation(PreferencePair& pair, std::vector<text::ChatMessage> prompt, std::vector<text::ChatMessage> chosen,
                         std::vector<text::ChatMessage> rejected, const text::ChatTemplate& chat) {
  if (prompt.empty()) {
    std::size_t common = 0;
    while (common + 1 < chosen.size() && common + 1 < rejected.size() && chosen[common].role == rejected[common].role &&
           chosen[common].content == rejected[common].content) {
      ++common;
    }
    prompt.assign(chosen.begin(), chosen.begin() + static_cast<std::ptrdiff_t>(common));
    chosen.erase(chosen.begin(), chosen.begin() + static_cast<std::ptrdiff_t>(common));
    rejected.erase(rejected.begin(), rejected.begin() + static_cast<std::ptrdiff_t>(common));
  }
  if (!prompt.empty()) {
    text::ChatRenderOptions header;
    header.add_generation_prompt = true;
    pair.prompt = chat.render(prompt, header);
  }
  const auto after_prompt = [&](const std::vector<text::ChatMessage>& side, std::string_view field) {
    std::vector<text::ChatMessage> whole = prompt;
    whole.insert(whole.end(), side.begin(), side.end());
    const std::string text = chat.render(whole);
    if (!text.starts_with(pair.prompt)) {
      throw ParseError(fmt::format("{}: the chat template's render of prompt + \"{}\" does not start with the "
                                   "prompt's render (with the assistant header): \"{}\" must hold assistant turns",
                                   pair.source, field, field));
    }
    return text.substr(pair.prompt.size());
  };
  pair.chosen = after_prompt(chosen, "chosen");
  pair.rejected = after_prompt(rejected, "rejected");
}

/// [2P] sequence scores: the chosen sides, then the rejected ones (right-padded, one forward).
torch::Tensor score_pairs(models::ValueModel& model, const text::Tokenizer& tokenizer,
                          std::span<const PreferencePair* const> pairs, std::int64_t max_length) {
  rewards::RewardModelOptions encoding;
  encoding.max_length = max_length;
  std::vector<std::vector<std::int64_t>> rows;
  for (const bool chosen : {true, false}) {
    for (const PreferencePair* pair : pairs) {
      rewards::Completion completion;
      completion.prompt = pair->prompt;
      completion.text = chosen ? pair->chosen : pair->rejected;
      auto ids = rewards::encode_for_reward_model(tokenizer, completion, encoding).ids;
      GRPO_CHECK(!ids.empty(), "{}: the {} side and its prompt are empty", pair->source, chosen ? "chosen" : "rejected");
      rows.push_back(std::move(ids));
    }
  }
  std::int64_t width = 1;
  for (const auto& r : rows) width = std::max<std::int64_t>(width, static_cast<std::int64_t>(r.size()));
  const auto n = static_cast<std::int64_t>(rows.size());
  torch::Tensor ids = torch::zeros({n, width}, torch::kInt64), mask = torch::zeros({n, width}, torch::kInt64);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto length = static_cast<std::int64_t>(rows[static_cast<std::size_t>(i)].size());
    ids[i].narrow(0, 0, length).copy_(torch::tensor(rows[static_cast<std::size_t>(i)], torch::kInt64));
    mask[i].narrow(0, 0, length).fill_(1);
  }
  const torch::Device device = model->head_weight().device();
  return model->sequence_scores(ids.to(device), mask.to(device)).to(torch::kFloat32);
}

torch::Tensor margins_of(std::span<const PreferencePair* const> pairs, const torch::Device& device) {
  bool any = false;
  std::vector<float> margins;
  for (const PreferencePair* p : pairs) {
    any = any || p->margin.has_value();
    margins.push_back(static_cast<float>(p->margin.value_or(0.0)));
  }
  return any ? torch::tensor(margins, torch::kFloat32).to(device) : torch::Tensor();
}

}  // namespace

std::vector<PreferencePair> parse_preference_pairs(std::string_view jsonl, std::string_view source,
                                                   const text::ChatTemplate* chat) {
  std::vector<PreferencePair> out;
  simdjson::dom::parser parser;
  io::for_each_json_line(jsonl, source, [&](std::string_view line, const std::string& where) {
    simdjson::dom::object object;
    const simdjson::padded_string padded(line);
    if (auto error = parser.parse(padded).get_object().get(object)) {
      throw ParseError(fmt::format("{}: not a JSON object: {}", where, simdjson::error_message(error)));
    }
    PreferencePair pair;
    pair.source = where;
    Side prompt = read_side(object, "prompt", where, false);
    Side chosen = read_side(object, "chosen", where, true);
    Side rejected = read_side(object, "rejected", where, true);
    simdjson::dom::element margin;
    if (!object["margin"].get(margin) && !margin.is_null()) {
      double value = 0;
      if (margin.get_double().get(value) || !std::isfinite(value)) {
        throw ParseError(fmt::format("{}: field \"margin\" must be a finite number", where));
      }
      pair.margin = value;
    }
    if (chosen.is_messages() != rejected.is_messages() ||
        (!prompt.text.value_or("x").empty() && prompt.is_messages() != chosen.is_messages())) {
      throw ParseError(fmt::format("{}: \"prompt\", \"chosen\" and \"rejected\" must all be texts or all be lists of "
                                   "messages", where));
    }
    if (chosen.is_messages()) {
      GRPO_CHECK_CONFIG(chat != nullptr, "{}: a conversational preference pair needs a chat template (the reward "
                        "model's tokenizer's)", where);
      render_conversation(pair, std::move(prompt.messages), std::move(chosen.messages), std::move(rejected.messages),
                          *chat);
    } else {
      pair.prompt = prompt.text.value_or("");
      pair.chosen = std::move(*chosen.text);
      pair.rejected = std::move(*rejected.text);
    }
    out.push_back(std::move(pair));
  });
  return out;
}

std::vector<PreferencePair> read_preference_pairs(const std::filesystem::path& file, const text::ChatTemplate* chat) {
  return parse_preference_pairs(io::read_file(file), file.string(), chat);
}

std::vector<PreferencePair> graded_preference_pairs(std::span<const rewards::Completion> completions,
                                                    std::span<const std::optional<bool>> correct,
                                                    std::int64_t pairs_per_prompt, std::uint64_t seed) {
  GRPO_CHECK_CONFIG(pairs_per_prompt >= 1, "preference pairs: pairs_per_prompt must be >= 1, got {}",
                    pairs_per_prompt);
  GRPO_CHECK(correct.size() == completions.size(), "graded_preference_pairs: {} grades for {} completions",
             correct.size(), completions.size());
  struct Graded {
    std::vector<std::size_t> correct, wrong;
  };
  std::vector<std::size_t> order;  // groups by their first completion
  std::map<std::size_t, Graded> groups;
  for (std::size_t i = 0; i < completions.size(); ++i) {
    const std::size_t group = completions[i].group;
    if (groups.find(group) == groups.end()) order.push_back(group);
    Graded& graded = groups[group];
    if (correct[i]) (*correct[i] ? graded.correct : graded.wrong).push_back(i);
  }
  std::vector<PreferencePair> out;
  std::uint64_t draw = seed;
  for (const std::size_t group : order) {
    const Graded& graded = groups.at(group);
    const std::size_t combinations = graded.correct.size() * graded.wrong.size();
    if (combinations == 0) continue;
    const auto picks = seeded_permutation(combinations, draw++);
    for (std::size_t k = 0; k < std::min(combinations, static_cast<std::size_t>(pairs_per_prompt)); ++k) {
      const rewards::Completion& chosen = completions[graded.correct[picks[k] / graded.wrong.size()]];
      const rewards::Completion& rejected = completions[graded.wrong[picks[k] % graded.wrong.size()]];
      out.push_back({.prompt = chosen.prompt, .chosen = chosen.text, .rejected = rejected.text, .margin = std::nullopt,
                     .source = fmt::format("group {}", group)});
    }
  }
  return out;
}

std::vector<PreferencePair> verifier_preference_pairs(std::span<const rewards::Completion> completions,
                                                      const rewards::RewardFunction& verifier, double threshold,
                                                      std::int64_t pairs_per_prompt, std::uint64_t seed) {
  GRPO_CHECK_CONFIG(pairs_per_prompt >= 1, "verifier_preference_pairs: pairs_per_prompt must be >= 1, got {}",
                    pairs_per_prompt);
  const auto values = verifier.score(completions, rewards::ScoringContext{});
  GRPO_CHECK(values.size() == completions.size(), "verifier_preference_pairs: the verifier '{}' gave {} values for {} "
             "completions", verifier.name(), values.size(), completions.size());
  std::vector<std::optional<bool>> correct(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i]) correct[i] = *values[i] >= threshold;
  }
  return graded_preference_pairs(completions, correct, pairs_per_prompt, seed);
}

void RewardModelTrainingOptions::validate() const {
  GRPO_CHECK_CONFIG(epochs >= 1, "reward model training: epochs must be >= 1, got {}", epochs);
  GRPO_CHECK_CONFIG(batch_size >= 1, "reward model training: batch_size must be >= 1, got {}", batch_size);
  GRPO_CHECK_CONFIG(std::isfinite(learning_rate) && learning_rate >= 0.0,
                    "reward model training: learning_rate must be finite and >= 0, got {}", learning_rate);
  GRPO_CHECK_CONFIG(std::isfinite(weight_decay) && weight_decay >= 0.0,
                    "reward model training: weight_decay must be finite and >= 0, got {}", weight_decay);
  GRPO_CHECK_CONFIG(std::isfinite(max_grad_norm) && max_grad_norm >= 0.0,
                    "reward model training: max_grad_norm must be finite and >= 0, got {}", max_grad_norm);
  GRPO_CHECK_CONFIG(max_length >= 1, "reward model training: max_length must be >= 1, got {}", max_length);
  BradleyTerryOptions{.center_rewards_coefficient = center_rewards_coefficient, .pairs = std::nullopt}.validate();
}

void RewardModelRefreshOptions::validate() const {
  GRPO_CHECK_CONFIG(every_steps >= 0, "reward model refresh: every_steps must be >= 0, got {}", every_steps);
  GRPO_CHECK_CONFIG(pairs_per_prompt >= 1, "reward model refresh: pairs_per_prompt must be >= 1, got {}",
                    pairs_per_prompt);
  GRPO_CHECK_CONFIG(buffer_pairs >= 1, "reward model refresh: buffer_pairs must be >= 1, got {}", buffer_pairs);
  training.validate();
}

PreferenceMetrics evaluate_reward_model(models::ValueModel& model, const text::Tokenizer& tokenizer,
                                        std::span<const PreferencePair> pairs, std::int64_t batch_size,
                                        std::int64_t max_length) {
  GRPO_CHECK_CONFIG(batch_size >= 1, "evaluate_reward_model: batch_size must be >= 1, got {}", batch_size);
  torch::NoGradGuard no_grad;
  const TrainingModeScope evaluation(*model, /*training=*/false);  // the caller's mode back, also when scoring throws
  PreferenceMetrics out;
  for (std::size_t first = 0; first < pairs.size(); first += static_cast<std::size_t>(batch_size)) {
    std::vector<const PreferencePair*> part;
    for (std::size_t i = first; i < std::min(pairs.size(), first + static_cast<std::size_t>(batch_size)); ++i) {
      part.push_back(&pairs[i]);
    }
    const auto p = static_cast<std::int64_t>(part.size());
    const torch::Tensor scores = score_pairs(model, tokenizer, part, max_length);
    const auto result = bradley_terry_loss(scores.narrow(0, 0, p), scores.narrow(0, p, p),
                                           margins_of(part, scores.device()), {.center_rewards_coefficient = std::nullopt, .pairs = static_cast<double>(pairs.size())});
    out.loss += result.loss.item<double>();
    out.accuracy += result.accuracy * static_cast<double>(p) / static_cast<double>(pairs.size());
  }
  out.pairs = static_cast<std::int64_t>(pairs.size());
  return out;
}

std::vector<PreferenceMetrics> train_reward_model(models::ValueModel& model, const text::Tokenizer& tokenizer,
                                                  std::span<const PreferencePair> pairs,
                                                  const RewardModelTrainingOptions& options) {
  options.validate();
  GRPO_CHECK_CONFIG(!pairs.empty(), "train_reward_model: no preference pairs");
  // bf16 weights train through fp32 masters (or in place, compensated): AdamW's steps on bf16 weights are mostly
  // below their resolution. fp16 would need loss scaling (its gradients overflow), which this loop does not do.
  for (const auto& p : model->parameters()) {
    GRPO_CHECK_CONFIG(!p.requires_grad() || p.scalar_type() != torch::kHalf,
                      "train_reward_model: the model's trainable parameters are float16, whose gradients overflow "
                      "without loss scaling: load it in bfloat16 or float32");
  }
  MasterWeights master(trainable_parameters(*model), options.optimizer_precision);
  GRPO_CHECK_CONFIG(!master.masters().empty(), "train_reward_model: the model has no parameter that requires grad");
  const auto optimizer = make_adamw(
      master, torch::optim::AdamWOptions(options.learning_rate).weight_decay(options.weight_decay), options.seed);
  model->zero_grad();  // a caller's leftover gradients: the optimizer clears the masters' alone
  model->train();
  std::vector<PreferenceMetrics> epochs;
  for (std::int64_t epoch = 0; epoch < options.epochs; ++epoch) {
    const auto order = seeded_permutation(pairs.size(), options.seed + static_cast<std::uint64_t>(epoch));
    PreferenceMetrics metrics;
    for (std::size_t first = 0; first < order.size(); first += static_cast<std::size_t>(options.batch_size)) {
      std::vector<const PreferencePair*> part;
      for (std::size_t i = first; i < std::min(order.size(), first + static_cast<std::size_t>(options.batch_size)); ++i) {
        part.push_back(&pairs[order[i]]);
      }
      const auto p = static_cast<std::int64_t>(part.size());
      const torch::Tensor scores = score_pairs(model, tokenizer, part, options.max_length);
      const auto result = bradley_terry_loss(scores.narrow(0, 0, p), scores.narrow(0, p, p),
                                             margins_of(part, scores.device()),
                                             {.center_rewards_coefficient = options.center_rewards_coefficient, .pairs = std::nullopt});
      optimizer->zero_grad();
      result.loss.backward();
      master.accumulate_gradients();
      clip_and_step(*optimizer, master.masters(), options.max_grad_norm);
      master.masters_to_parameters();
      metrics.loss += result.loss.item<double>() * static_cast<double>(p);
      metrics.accuracy += result.accuracy * static_cast<double>(p);
      metrics.pairs += p;
    }
    metrics.loss /= static_cast<double>(metrics.pairs);
    metrics.accuracy /= static_cast<double>(metrics.pairs);
    epochs.push_back(metrics);
  }
  model->eval();
  return epochs;
}

}  // namespace grpo::train

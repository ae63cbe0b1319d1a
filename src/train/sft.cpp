// SPDX-License-Identifier: Apache-2.0
// Supervised fine-tuning: assistant-only targets from chat templates, chat data files, padded and packed batches,
// the fused-linear NLL loss and a small trainer. simdjson reads the chat files and never leaves this file.
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <grpo/core/tensor_checks.hpp>
#include <grpo/io/json_lines.hpp>
#include <grpo/io/read_file.hpp>
#include <grpo/logprob/linear_log_probs.hpp>
#include <grpo/text/chat_messages.hpp>
#include <grpo/train/optimizer_step.hpp>
#include <grpo/train/sft.hpp>
#include <limits>
#include <map>
#include <numeric>
#include <utility>

namespace grpo::train {
namespace {

// ---------------------------------------------------------------------------------------------------------------
// Chat → example

/// Up to 40 bytes of `text` from `at`, with newlines shown as \n, for error messages.
std::string snippet(std::string_view text, std::size_t at) {
  std::string out;
  for (std::size_t i = at; i < text.size() && i < at + 40; ++i)
    out += text[i] == '\n' ? std::string("\\n") : std::string(1, text[i]);
  return out;
}

void append_encoded(const text::Tokenizer& tokenizer, std::string_view piece, bool target, SftExample& out) {
  if (piece.empty()) return;
  const auto ids = tokenizer.encode(piece, {.add_special_tokens = false});
  out.ids.insert(out.ids.end(), ids.begin(), ids.end());
  out.loss_mask.insert(out.loss_mask.end(), ids.size(), target ? 1 : 0);
}

// ---------------------------------------------------------------------------------------------------------------
// Chat files

[[noreturn]] void row_error(std::string_view where, std::string_view message) {
  ::grpo::detail::throw_formatted<ParseError>("{}: {}", where, message);
}

std::string string_field(simdjson::dom::object object, std::string_view key, std::string_view path,
                         std::string_view where) {
  simdjson::dom::element value;
  if (object.at_key(key).get(value)) row_error(where, fmt::format("missing field '{}'", path));
  std::string_view text;
  if (value.get_string().get(text)) row_error(where, fmt::format("field '{}' should be a string", path));
  return std::string(text);
}

/// An optional string field: nullopt when absent or null.
std::optional<std::string> optional_string_field(simdjson::dom::object object, std::string_view key,
                                                 std::string_view path, std::string_view where) {
  simdjson::dom::element value;
  if (object.at_key(key).get(value) || value.is_null()) return std::nullopt;
  std::string_view text;
  if (value.get_string().get(text)) row_error(where, fmt::format("field '{}' should be a string", path));
  return std::string(text);
}

simdjson::dom::object object_item(simdjson::dom::element item, std::string_view path, std::string_view where) {
  simdjson::dom::object object;
  if (item.get_object().get(object)) row_error(where, fmt::format("field '{}' should be an object", path));
  return object;
}

/// A `messages` list through text::parse_chat_messages, its errors prefixed with the row's place.
std::vector<text::ChatMessage> read_messages(simdjson::dom::array list, std::string_view where) {
  try {
    return text::parse_chat_messages(simdjson::minify(list), "messages");
  } catch (const ParseError& e) {
    row_error(where, e.what());
  }
}

std::string role_of_sharegpt(std::string_view from) {
  if (from == "human" || from == "user") return "user";
  if (from == "gpt" || from == "assistant" || from == "model") return "assistant";
  if (from == "system" || from == "tool") return std::string(from);
  return {};
}

std::vector<text::ChatMessage> read_conversations(simdjson::dom::object row, simdjson::dom::array list,
                                                  std::string_view where) {
  std::vector<text::ChatMessage> messages;
  if (auto system = optional_string_field(row, "system", "system", where); system && !system->empty()) {
    messages.push_back({"system", std::move(*system), std::nullopt});
  }
  std::size_t index = 0;
  for (simdjson::dom::element item : list) {
    const std::string path = fmt::format("conversations[{}]", index++);
    const auto object = object_item(item, path, where);
    const std::string from = string_field(object, "from", path + ".from", where);
    std::string role = role_of_sharegpt(from);
    if (role.empty()) {
      row_error(where, fmt::format("field '{}.from' is '{}', expected human, user, gpt, assistant, system or tool",
                                   path, from));
    }
    messages.push_back({std::move(role), string_field(object, "value", path + ".value", where), std::nullopt});
  }
  return messages;
}

SftConversation read_row(simdjson::dom::element root, std::string where) {
  simdjson::dom::object row;
  if (root.get_object().get(row)) row_error(where, "expected a JSON object");
  SftConversation out;
  simdjson::dom::element field;
  if (!row.at_key("messages").get(field) && !field.is_null()) {
    simdjson::dom::array list;
    simdjson::dom::parser inner;  // a list given as JSON text (ROLL's style) is parsed by its own parser
    std::string_view text;
    if (!field.get_string().get(text)) {
      simdjson::dom::element parsed;
      if (inner.parse(simdjson::padded_string(text)).get(parsed) || parsed.get_array().get(list)) {
        row_error(where, "field 'messages' is a string that does not hold a JSON list of messages");
      }
    } else if (field.get_array().get(list)) {
      row_error(where, "field 'messages' should be a list of {role, content} objects");
    }
    out.messages = read_messages(list, where);
  } else if (!row.at_key("conversations").get(field) && !field.is_null()) {
    simdjson::dom::array list;
    if (field.get_array().get(list))
      row_error(where, "field 'conversations' should be a list of {from, value} objects");
    out.messages = read_conversations(row, list, where);
  } else {
    row_error(where, "no field 'messages' (list of {role, content}) or 'conversations' (list of {from, value})");
  }
  if (out.messages.empty()) row_error(where, "the conversation holds no messages");
  out.source = std::move(where);
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Packed forward

/// The packed batch through the model: each example attends to itself only, at its own positions
/// (CausalLM::packed_hidden_states); padding is a run of its own.
torch::Tensor packed_hidden_states(models::CausalLM& model, const SftBatch& batch) {
  const auto segments = (batch.sequence_ids + 1).masked_fill(batch.attention_mask == 0, 0);
  return model->packed_hidden_states(batch.input_ids, batch.position_ids.to(torch::kInt64), segments);
}

void check_batch(const SftBatch& batch) {
  ::grpo::detail::check_dim(batch.input_ids, 2, "input_ids", "SftBatch");
  for (const auto& [tensor, name] :
       {std::pair{&batch.attention_mask, "attention_mask"}, std::pair{&batch.position_ids, "position_ids"},
        std::pair{&batch.sequence_ids, "sequence_ids"}, std::pair{&batch.targets, "targets"},
        std::pair{&batch.target_mask, "target_mask"}}) {
    ::grpo::detail::check_same_shape(batch.input_ids, "input_ids", *tensor, name, "SftBatch");
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Examples

std::int64_t SftExample::num_targets() const {
  return std::count_if(loss_mask.begin(), loss_mask.end(), [](std::uint8_t m) { return m != 0; });
}

void check_sft_example(const SftExample& example, std::string_view what) {
  GRPO_CHECK(!example.ids.empty(), "{}: ids is empty", what);
  GRPO_CHECK(example.loss_mask.size() == example.ids.size(), "{}: ids has {} tokens but loss_mask has {} entries", what,
             example.ids.size(), example.loss_mask.size());
  for (std::size_t t = 0; t < example.ids.size(); ++t) {
    GRPO_CHECK(example.ids[t] >= 0, "{}: ids[{}] = {} is negative", what, t, example.ids[t]);
    GRPO_CHECK(example.loss_mask[t] <= 1, "{}: loss_mask[{}] = {}, expected 0 or 1", what, t,
               static_cast<int>(example.loss_mask[t]));
  }
  GRPO_CHECK(example.loss_mask[0] == 0, "{}: loss_mask[0] is 1, but the first token has no context to predict it from",
             what);
}

SftExample sft_example_from_chat(const text::Tokenizer& tokenizer, std::span<const text::ChatMessage> messages,
                                 const SftChatOptions& options) {
  constexpr std::string_view kWhat = "sft_example_from_chat";
  GRPO_CHECK_CONFIG(options.max_length >= 0, "SftChatOptions.max_length must be >= 0, got {}", options.max_length);
  GRPO_CHECK(!messages.empty(), "{}: the conversation has no messages", kWhat);
  const text::ChatTemplate& chat_template = options.chat_template ? *options.chat_template : tokenizer.chat_template();
  const text::ChatFormat format = chat_template.options().format;
  const std::string end_of_turn = options.end_of_turn.empty() ? text::end_of_turn(format) : options.end_of_turn;

  std::vector<std::size_t> assistants;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role == "assistant") assistants.push_back(i);
  }
  GRPO_CHECK(!assistants.empty(), "{}: the conversation ({} messages, roles {}) has no assistant message to learn from",
             kWhat, messages.size(), [&] {
               std::string roles;
               for (const auto& m : messages) roles += (roles.empty() ? "" : ", ") + m.role;
               return roles;
             }());
  if (options.targets == SftTargets::last_assistant) assistants.erase(assistants.begin(), assistants.end() - 1);

  const std::vector<text::ChatMessage> rendered = text::messages_in_context(messages, format);
  for (const std::size_t i : assistants) {
    GRPO_CHECK(
        rendered[i].content.find(end_of_turn) == std::string::npos &&
            (!rendered[i].reasoning_content || rendered[i].reasoning_content->find(end_of_turn) == std::string::npos),
        "{}: assistant message {} contains the end-of-turn marker '{}', so its end cannot be found", kWhat, i,
        end_of_turn);
  }
  const std::string full = chat_template.render(rendered);

  // Target spans [start, end) in the text: each turn from the end of its generation prompt to its end-of-turn marker.
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  std::size_t previous_end = 0;
  for (const std::size_t i : assistants) {
    const std::string prefix = chat_template.render(std::span(rendered).first(i),
                                                    {.add_generation_prompt = true, .enable_thinking = std::nullopt});
    if (prefix.size() > full.size() || full.compare(0, prefix.size(), prefix) != 0) {
      std::size_t at = 0;
      while (at < prefix.size() && at < full.size() && prefix[at] == full[at]) ++at;
      ::grpo::detail::throw_formatted<Error>(
          "{}: the chat template renders the first {} messages and an assistant header differently from the same "
          "messages inside the whole conversation (first difference at character {}: \"{}\" vs \"{}\"), so "
          "assistant message {} cannot be located",
          kWhat, i, at, snippet(prefix, at), snippet(full, at), i);
    }
    const std::size_t start = prefix.size();
    GRPO_CHECK(start >= previous_end,
               "{}: assistant message {} starts (character {}) before the previous one ends ({})", kWhat, i, start,
               previous_end);
    const std::size_t marker = full.find(end_of_turn, start);
    GRPO_CHECK(marker != std::string::npos, "{}: no end-of-turn marker '{}' after assistant message {} (character {})",
               kWhat, end_of_turn, i, start);
    spans.emplace_back(start, marker + end_of_turn.size());
    previous_end = spans.back().second;
  }

  SftExample out;
  std::size_t at = 0;
  const std::string_view text = full;
  for (const auto& [start, end] : spans) {
    append_encoded(tokenizer, text.substr(at, start - at), false, out);
    append_encoded(tokenizer, text.substr(start, end - start), true, out);
    at = end;
  }
  append_encoded(tokenizer, text.substr(at), false, out);
  if (!out.loss_mask.empty()) out.loss_mask[0] = 0;
  if (options.max_length > 0 && static_cast<std::int64_t>(out.ids.size()) > options.max_length) {
    out.ids.resize(static_cast<std::size_t>(options.max_length));
    out.loss_mask.resize(static_cast<std::size_t>(options.max_length));
  }
  return out;
}

std::vector<SftConversation> read_sft_conversations(const std::filesystem::path& path) {
  return parse_sft_conversations(io::read_file(path), path.string());
}

std::vector<SftConversation> parse_sft_conversations(std::string_view text, std::string_view source) {
  std::vector<SftConversation> out;
  simdjson::dom::parser parser;
  if (io::is_json_array(text)) {
    simdjson::dom::element root;
    if (const auto error = parser.parse(simdjson::padded_string(text)).get(root)) {
      ::grpo::detail::throw_formatted<ParseError>("{}: invalid JSON array ({})", source,
                                                  simdjson::error_message(error));
    }
    simdjson::dom::array array;
    if (root.get_array().get(array))
      ::grpo::detail::throw_formatted<ParseError>("{}: expected a JSON array of rows", source);
    std::size_t index = 0;
    for (simdjson::dom::element item : array) out.push_back(read_row(item, fmt::format("{}[{}]", source, index++)));
    return out;
  }
  io::for_each_json_line(text, source, [&](std::string_view line, const std::string& where) {
    simdjson::dom::element root;
    if (const auto error = parser.parse(simdjson::padded_string(line)).get(root)) {
      row_error(where, fmt::format("invalid JSON ({})", simdjson::error_message(error)));
    }
    out.push_back(read_row(root, where));
  });
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Batches

void SftBatchOptions::validate() const {
  GRPO_CHECK_CONFIG(batch_size >= 1, "SftBatchOptions.batch_size must be >= 1, got {}", batch_size);
  GRPO_CHECK_CONFIG(bucket_window >= 0, "SftBatchOptions.bucket_window must be >= 0, got {}", bucket_window);
  GRPO_CHECK_CONFIG(max_tokens >= 1, "SftBatchOptions.max_tokens must be >= 1, got {}", max_tokens);
  GRPO_CHECK_CONFIG(pad_token_id >= 0, "SftBatchOptions.pad_token_id must be >= 0, got {}", pad_token_id);
}

SftBatch collate_sft_rows(std::span<const SftExample> examples, std::span<const std::vector<std::size_t>> rows,
                          const SftBatchOptions& options) {
  options.validate();
  GRPO_CHECK(!rows.empty(), "collate_sft_rows: no rows");
  std::int64_t time = 1;
  for (std::size_t b = 0; b < rows.size(); ++b) {
    GRPO_CHECK(!rows[b].empty(), "collate_sft_rows: row {} holds no example", b);
    GRPO_CHECK(rows[b].size() == 1 || options.layout == SftLayout::packed,
               "collate_sft_rows: row {} holds {} examples, which needs SftLayout::packed", b, rows[b].size());
    std::int64_t length = 0;
    for (const std::size_t e : rows[b]) {
      GRPO_CHECK(e < examples.size(), "collate_sft_rows: row {} names example {} of {}", b, e, examples.size());
      check_sft_example(examples[e], fmt::format("SftExample {}", e));
      length += static_cast<std::int64_t>(examples[e].size());
    }
    time = std::max(time, length);
  }
  const auto batch = static_cast<std::int64_t>(rows.size());
  const auto cells = static_cast<std::size_t>(batch * time);
  std::vector<std::int64_t> input(cells, options.pad_token_id), attention(cells, 0), position(cells, 0),
      sequence(cells, -1), target(cells, 0);
  std::vector<float> target_mask(cells, 0.0f);
  SftBatch out;
  out.layout = options.layout;
  for (std::size_t b = 0; b < rows.size(); ++b) {
    std::size_t at = b * static_cast<std::size_t>(time);
    std::int64_t place = 0;
    for (const std::size_t e : rows[b]) {
      const SftExample& example = examples[e];
      const std::size_t n = example.size();
      for (std::size_t t = 0; t < n; ++t, ++at) {
        input[at] = example.ids[t];
        attention[at] = 1;
        position[at] = static_cast<std::int64_t>(t);
        sequence[at] = place;
        if (t + 1 < n && example.loss_mask[t + 1] != 0) {
          target[at] = example.ids[t + 1];
          target_mask[at] = 1.0f;
          ++out.num_targets;
        }
      }
      out.num_tokens += static_cast<std::int64_t>(n);
      ++place;
    }
    out.rows.push_back(rows[b]);
  }
  const auto as_tensor = [&](auto& values, torch::ScalarType dtype) {
    return torch::from_blob(values.data(), {batch, time}, dtype).clone();
  };
  out.input_ids = as_tensor(input, torch::kInt64);
  out.attention_mask = as_tensor(attention, torch::kInt64);
  out.position_ids = as_tensor(position, torch::kInt64);
  out.sequence_ids = as_tensor(sequence, torch::kInt64);
  out.targets = as_tensor(target, torch::kInt64);
  out.target_mask = as_tensor(target_mask, torch::kFloat32);
  return out;
}

std::vector<std::vector<std::size_t>> plan_sft_rows(std::span<const SftExample> examples,
                                                    const SftBatchOptions& options) {
  options.validate();
  for (std::size_t e = 0; e < examples.size(); ++e) check_sft_example(examples[e], fmt::format("SftExample {}", e));
  const auto length = [&](std::size_t e) { return examples[e].size(); };
  const auto longest_first = [&](std::size_t a, std::size_t b) { return length(a) > length(b); };
  std::vector<std::vector<std::size_t>> rows;
  std::vector<std::size_t> order(examples.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (options.layout == SftLayout::padded) {
    if (options.bucket_window > 0) {
      const auto window = static_cast<std::size_t>(options.bucket_window * options.batch_size);
      for (std::size_t begin = 0; begin < order.size(); begin += window) {
        const auto first = order.begin() + static_cast<std::ptrdiff_t>(begin);
        std::stable_sort(first, first + static_cast<std::ptrdiff_t>(std::min(window, order.size() - begin)),
                         longest_first);
      }
    }
    for (const std::size_t e : order) rows.push_back({e});
    return rows;
  }
  // Best-fit decreasing: longest example first, each into the row with the least room that still fits it.
  std::stable_sort(order.begin(), order.end(), longest_first);
  std::multimap<std::int64_t, std::size_t> room;  // free tokens → row
  for (const std::size_t e : order) {
    const auto n = static_cast<std::int64_t>(length(e));
    GRPO_CHECK(n <= options.max_tokens,
               "plan_sft_rows: SftExample {} has {} tokens, more than a packed row's max_tokens = {} (truncate it "
               "with SftChatOptions::max_length)",
               e, n, options.max_tokens);
    const auto fit = room.lower_bound(n);
    if (fit == room.end()) {
      rows.push_back({e});
      room.emplace(options.max_tokens - n, rows.size() - 1);
    } else {
      const std::size_t row = fit->second;
      const std::int64_t left = fit->first - n;
      room.erase(fit);
      rows[row].push_back(e);
      room.emplace(left, row);
    }
  }
  return rows;
}

std::vector<SftBatch> make_sft_batches(std::span<const SftExample> examples, const SftBatchOptions& options) {
  const auto rows = plan_sft_rows(examples, options);
  std::vector<SftBatch> out;
  const auto per_batch = static_cast<std::size_t>(options.batch_size);
  for (std::size_t begin = 0; begin < rows.size(); begin += per_batch) {
    out.push_back(
        collate_sft_rows(examples, std::span(rows).subspan(begin, std::min(per_batch, rows.size() - begin)), options));
  }
  return out;
}

Normaliser sft_normaliser(std::span<const SftBatch> micro_batches) {
  std::int64_t tokens = 0;
  for (const SftBatch& batch : micro_batches) tokens += batch.num_targets;
  return Normaliser::tokens(static_cast<double>(tokens));
}

// ---------------------------------------------------------------------------------------------------------------
// Loss

SftLossOutput sft_loss_from_hidden(const torch::Tensor& hidden, const torch::Tensor& weight,
                                   const torch::Tensor& targets, const torch::Tensor& target_mask,
                                   const Normaliser& normaliser, const SftLossOptions& options) {
  constexpr std::string_view kWhat = "sft_loss";
  GRPO_CHECK(hidden.defined() && (hidden.dim() == 3 || hidden.dim() == 2),
             "{}: hidden must be [B, T, H] or [N, H], got {}", kWhat, shape_str(hidden));
  ::grpo::detail::check_floating(hidden, "hidden", kWhat);
  const auto lead = hidden.sizes().slice(0, static_cast<std::size_t>(hidden.dim() - 1));
  GRPO_CHECK(targets.defined() && targets.sizes() == lead && targets.scalar_type() == torch::kInt64,
             "{}: targets must be int64 of hidden's leading shape {}, got {} {}", kWhat, shape_str(hidden),
             shape_str(targets), targets.defined() ? c10::toString(targets.scalar_type()) : "");
  GRPO_CHECK(target_mask.defined() && target_mask.sizes() == lead,
             "{}: target_mask must have hidden's leading shape (hidden {}), got {}", kWhat, shape_str(hidden),
             shape_str(target_mask));
  GRPO_CHECK(options.chunk_rows >= 0, "{}: chunk_rows must be >= 0, got {}", kWhat, options.chunk_rows);
  const int64_t width = hidden.size(-1);
  const auto flat_hidden = hidden.reshape({-1, width});
  const auto index = (target_mask.reshape({-1}).to(hidden.device()) != 0).nonzero().squeeze(1);
  SftLossOutput out;
  out.tokens = index.numel();
  if (out.tokens == 0) {
    const auto dtype = at::promote_types(hidden.scalar_type(), torch::kFloat32);
    out.loss = flat_hidden.sum().to(dtype) * 0.0;  // zero, but part of the graph so backward() works
  } else {
    const auto log_probs = linear_token_log_probs(flat_hidden.index_select(0, index), weight,
                                                  targets.reshape({-1}).to(hidden.device()).index_select(0, index),
                                                  {.chunk_rows = options.chunk_rows})
                               .log_probs;
    const auto nll = -log_probs.sum();
    out.loss = nll / normaliser.divisor();
    out.nll_sum = nll.item<double>();
  }
  const double loss_value = out.loss.item<double>();
  out.metrics = {{"loss", loss_value},
                 {"nll", out.tokens > 0 ? out.nll_sum / static_cast<double>(out.tokens)
                                        : std::numeric_limits<double>::quiet_NaN()},
                 {"num_tokens", static_cast<double>(out.tokens)}};
  return out;
}

torch::Tensor sft_hidden_states(models::CausalLM& model, const SftBatch& batch) {
  check_batch(batch);
  if (batch.layout == SftLayout::packed) return packed_hidden_states(model, batch);
  return model->hidden_states(batch.input_ids, batch.attention_mask);
}

SftLossOutput sft_loss(models::CausalLM& model, const SftBatch& batch, const Normaliser& normaliser,
                       const SftLossOptions& options) {
  return sft_loss_from_hidden(sft_hidden_states(model, batch), model->lm_head_weight(), batch.targets,
                              batch.target_mask, normaliser, options);
}

SftEvaluation evaluate_nll(models::CausalLM& model, std::span<const SftBatch> batches) {
  torch::NoGradGuard no_grad;
  SftEvaluation out;
  for (const SftBatch& batch : batches) {
    const auto loss = sft_loss(model, batch, Normaliser::tokens(static_cast<double>(batch.num_targets)));
    out.nll_sum += loss.nll_sum;
    out.tokens += loss.tokens;
  }
  out.mean_nll =
      out.tokens > 0 ? out.nll_sum / static_cast<double>(out.tokens) : std::numeric_limits<double>::quiet_NaN();
  return out;
}

SftEvaluation evaluate_nll(models::CausalLM& model, std::span<const SftExample> examples,
                           const SftBatchOptions& batching) {
  const auto rows = plan_sft_rows(examples, batching);
  const auto per_batch = static_cast<std::size_t>(batching.batch_size);
  SftEvaluation out;
  for (std::size_t begin = 0; begin < rows.size(); begin += per_batch) {
    const SftBatch batch =
        collate_sft_rows(examples, std::span(rows).subspan(begin, std::min(per_batch, rows.size() - begin)), batching);
    const auto part = evaluate_nll(model, std::span(&batch, 1));
    out.nll_sum += part.nll_sum;
    out.tokens += part.tokens;
  }
  out.mean_nll =
      out.tokens > 0 ? out.nll_sum / static_cast<double>(out.tokens) : std::numeric_limits<double>::quiet_NaN();
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Trainer

void SftTrainerOptions::validate() const {
  GRPO_CHECK_CONFIG(max_grad_norm >= 0.0 && std::isfinite(max_grad_norm),
                    "SftTrainerOptions.max_grad_norm must be >= 0, got {}", max_grad_norm);
  GRPO_CHECK_CONFIG(loss.chunk_rows >= 0, "SftTrainerOptions.loss.chunk_rows must be >= 0, got {}", loss.chunk_rows);
  if (schedule) schedule->validate();
}

Scalars SftStepOutput::metrics() const {
  return {{"loss", loss},
          {"grad_norm", grad_norm},
          {"learning_rate", learning_rate},
          {"num_tokens", static_cast<double>(tokens)}};
}

namespace {

models::CausalLM checked_model(models::CausalLM model) {
  GRPO_CHECK_CONFIG(!model.is_empty(), "SftTrainer: the model is empty");
  return model;
}

}  // namespace

SftTrainer::SftTrainer(models::CausalLM model, torch::optim::AdamWOptions adamw, SftTrainerOptions options)
    : model_(checked_model(std::move(model))),
      options_((options.validate(), std::move(options))),
      master_(trainable_parameters(*model_), options_.optimizer_precision),
      own_optimizer_(make_adamw(master_, adamw, options_.seed)),
      optimizer_(own_optimizer_.get()) {}

SftTrainer::SftTrainer(models::CausalLM model, torch::optim::AdamW& optimizer, SftTrainerOptions options)
    : model_(checked_model(std::move(model))),
      options_(std::move(options)),
      master_(trainable_parameters(*model_)),
      optimizer_(&optimizer) {
  GRPO_CHECK_CONFIG(!master_.mixed(),
                    "SftTrainer: the model has half-precision (bf16/fp16) trainable parameters, which an optimizer "
                    "over them would step directly (small updates rounded away); construct SftTrainer with "
                    "torch::optim::AdamWOptions to train through fp32 master weights");
  GRPO_CHECK_CONFIG(options_.optimizer_precision == OptimizerPrecision::fp32_master,
                    "SftTrainer: optimizer_precision {} chooses the optimizer the trainer builds; construct SftTrainer "
                    "with torch::optim::AdamWOptions instead of an optimizer", to_string(options_.optimizer_precision));
  options_.validate();
}

SftStepOutput SftTrainer::step(std::span<const SftBatch> micro_batches) {
  GRPO_CHECK(!micro_batches.empty(), "SftTrainer::step: no micro-batches");
  SftStepOutput out;
  out.step = steps_done_ + 1;
  if (options_.schedule) {
    out.learning_rate = learning_rate_at(out.step, *options_.schedule);
    set_learning_rate(*optimizer_, out.learning_rate);
  } else {
    out.learning_rate = optimizer_->param_groups().front().options().get_lr();
  }
  const Normaliser normaliser = sft_normaliser(micro_batches);
  optimizer_->zero_grad();
  for (const SftBatch& batch : micro_batches) {
    auto loss = sft_loss(model_, batch, normaliser, options_.loss);
    if (loss.tokens > 0) loss.loss.backward();
    master_.accumulate_gradients();
    out.nll_sum += loss.nll_sum;
    out.tokens += loss.tokens;
  }
  out.grad_norm = clip_and_step(*optimizer_, master_.masters(), options_.max_grad_norm);
  master_.masters_to_parameters();
  out.loss = out.nll_sum / normaliser.divisor();
  steps_done_ = out.step;
  return out;
}

}  // namespace grpo::train

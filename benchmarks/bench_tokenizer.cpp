// SPDX-License-Identifier: Apache-2.0
// Tokenizer encode throughput on the parity corpus (tests/text/data/corpus.jsonl: 3,348 texts, 0.47 MB of prose,
// code, 18 languages, math, emoji, whitespace and special-token cases) for the real Qwen3, Llama 3 and GPT-2
// tokenizers, beside Hugging Face's own Rust tokenizer timed on the same texts in the same run:
// tools/tokenizer-reference/time_encode.py, started here with fork/exec under the project's Python (PyPI's
// `tokenizers`), times one encode() per text and one encode_batch() of all texts after a warm-up pass, best of three.
//   encode/<name>        grpo's encode(), one text at a time on one thread, vs HF's encode() one text at a time
//   encode_batch/<name>  grpo's encode_batch() on every hardware thread, vs HF's encode_batch()
// Counters: MB/s and tokens/s for both, from the best pass of each (the machine is shared: the best pass is the
// least disturbed), and ratio = grpo MB/s / HF MB/s (goal ≥ 1). HF's figure includes the
// Python binding's per-call cost, which is how it is used from Python; the batch row amortises it.
// The tokenizers are unpacked by the build (cmake/ReferenceTokenizers.cmake). The HF columns need the project's
// Python environment (scripts/python-env.sh; $GRPO_PYTHON names another interpreter with `tokenizers`); without it
// the rows carry only grpo's figures.
#include <grpo/text/tokenizer.hpp>

#include <support/bench_support.hpp>
#include <text/reference_fixture.hpp>

#include <fmt/format.h>
#include <simdjson.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Corpus {
  std::vector<std::string> texts;
  double bytes = 0;
  double tokens = 0;  // Hugging Face's token count (from the reference ids)
};

const Corpus& corpus(const std::string& name) {
  static std::map<std::string, Corpus> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    Corpus c;
    using grpo::text::testing::fixture_path;
    for (auto& entry : grpo::text::testing::read_corpus(fixture_path("corpus.jsonl"),
                                                        fixture_path(fmt::format("corpus_ids_{}.txt", name)))) {
      c.bytes += static_cast<double>(entry.text.size());
      c.tokens += static_cast<double>(entry.ids.size());
      c.texts.push_back(std::move(entry.text));
    }
    it = loaded.emplace(name, std::move(c)).first;
  }
  return it->second;
}

/// Hugging Face's timings from time_encode.py, or the reason there are none.
struct HfTiming {
  double single_seconds = 0;
  double batch_seconds = 0;
  double tokens = 0;
  std::string error;
};

/// Runs `python time_encode.py <tokenizer dir> <corpus>` with fork/exec and reads its one JSON line from a pipe.
HfTiming run_hf_timing(const std::string& name) {
  HfTiming timing;
  const auto dir = grpo::text::testing::find_tokenizer_dir(name);
  if (!dir) return {.error = "no tokenizer.json"};
  const std::string script = std::string(GRPO_TOKENIZER_REFERENCE_DIR) + "/time_encode.py";
  const char* python_env = std::getenv("GRPO_PYTHON");
  const std::string python = python_env && *python_env ? python_env : GRPO_VENV_PYTHON;
  const std::string corpus_path = grpo::text::testing::fixture_path("corpus.jsonl").string();
  std::array<int, 2> pipe_fds{};
  if (pipe(pipe_fds.data()) != 0) return {.error = "pipe failed"};
  const pid_t pid = fork();
  if (pid < 0) return {.error = "fork failed"};
  if (pid == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    const std::string dir_string = dir->string();
    const char* argv[] = {python.c_str(), script.c_str(), dir_string.c_str(), corpus_path.c_str(), "3", nullptr};
    execvp(python.c_str(), const_cast<char* const*>(argv));
    _exit(127);  // no such interpreter
  }
  close(pipe_fds[1]);
  std::string output;
  std::array<char, 4096> buffer{};
  for (ssize_t n; (n = read(pipe_fds[0], buffer.data(), buffer.size())) > 0;) output.append(buffer.data(), n);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return {.error = fmt::format("{} {} exited with status {} (run scripts/python-env.sh, or set GRPO_PYTHON to a "
                                 "python with PyPI's tokenizers)",
                                 python, script, WIFEXITED(status) ? WEXITSTATUS(status) : -1)};
  }
  simdjson::dom::parser parser;
  simdjson::dom::element json;
  if (parser.parse(output).get(json) || json["single_seconds"].get(timing.single_seconds) ||
      json["batch_seconds"].get(timing.batch_seconds)) {
    return {.error = "cannot read time_encode.py output: " + output};
  }
  int64_t tokens = 0;
  if (!json["tokens"].get(tokens)) timing.tokens = static_cast<double>(tokens);
  return timing;
}

const HfTiming& hf_timing(const std::string& name) {
  static std::map<std::string, HfTiming> measured;
  auto it = measured.find(name);
  if (it == measured.end()) it = measured.emplace(name, run_hf_timing(name)).first;
  return it->second;
}

void report(benchmark::State& state, const Corpus& c, double seconds_per_pass, double hf_seconds,
            const HfTiming& hf) {
  const double mb_per_s = c.bytes / seconds_per_pass / 1e6;
  state.counters["MB/s"] = mb_per_s;
  state.counters["tokens/s"] = c.tokens / seconds_per_pass;
  if (!hf.error.empty()) {
    state.SetLabel("HF: " + hf.error);
    return;
  }
  state.counters["hf_MB/s"] = c.bytes / hf_seconds / 1e6;
  state.counters["hf_tokens/s"] = hf.tokens / hf_seconds;
  state.counters["ratio"] = hf_seconds / seconds_per_pass;
  if (hf.tokens != c.tokens) state.SetLabel("HF token count differs from the reference ids");
}

/// The tokenizer `name`, or nullptr after marking the benchmark skipped when its tokenizer.json is not installed.
const grpo::text::Tokenizer* tokenizer_or_skip(benchmark::State& state, const std::string& name) {
  const grpo::text::Tokenizer* tok = grpo::text::testing::shared_tokenizer(name);
  if (tok == nullptr) state.SkipWithError(grpo::text::testing::missing_tokenizer(name).c_str());
  return tok;
}

void encode(benchmark::State& state, const std::string& name) {
  const grpo::text::Tokenizer* tok = tokenizer_or_skip(state, name);
  if (tok == nullptr) return;
  const Corpus& c = corpus(name);
  const HfTiming& hf = hf_timing(name);
  double tokens = 0;
  for (const auto& text : c.texts) tokens += static_cast<double>(tok->encode(text).size());  // warm-up
  if (tokens != c.tokens) state.SkipWithError("token count differs from the reference ids");
  double best = 1e30;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    for (const auto& text : c.texts) benchmark::DoNotOptimize(tok->encode(text).data());
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  report(state, c, best, hf.single_seconds, hf);
}

void encode_batch(benchmark::State& state, const std::string& name) {
  const grpo::text::Tokenizer* tok = tokenizer_or_skip(state, name);
  if (tok == nullptr) return;
  const Corpus& c = corpus(name);
  const HfTiming& hf = hf_timing(name);
  double best = 1e30;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    auto ids = tok->encode_batch(c.texts);
    benchmark::DoNotOptimize(ids.data());
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  report(state, c, best, hf.batch_seconds, hf);
}

}  // namespace

BENCHMARK_CAPTURE(encode, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK_CAPTURE(encode_batch, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK_CAPTURE(encode, llama3, std::string("llama3"))->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK_CAPTURE(encode_batch, llama3, std::string("llama3"))->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK_CAPTURE(encode, gpt2, std::string("gpt2"))->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK_CAPTURE(encode_batch, gpt2, std::string("gpt2"))->Unit(benchmark::kMillisecond)->MinTime(1.0);

int main(int argc, char** argv) { return grpo::bench::run_benchmarks(argc, argv); }

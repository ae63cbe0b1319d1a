// SPDX-License-Identifier: Apache-2.0
// Test helpers for the sandbox and the code_tests reward: short limits, a Python runner, and a scan of /proc for
// processes that carry a marker in their command line (to prove nothing survives a run).
#pragma once

#include <grpo/sandbox/sandbox.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

namespace grpo::sandbox::testing {

/// Short limits so each abuse test ends within about a second.
inline SandboxOptions fast_options(bool allow_subprocesses = false) {
  SandboxOptions options;
  options.limits.wall_time = std::chrono::milliseconds(1500);
  options.limits.cpu_seconds = 1;
  options.limits.memory_bytes = 256ull << 20;
  options.limits.max_processes = 32;
  options.limits.max_output_bytes = 64 * 1024;
  options.limits.tmpfs_bytes = 8ull << 20;
  options.allow_subprocesses = allow_subprocesses;
  return options;
}

/// Runs `source` with /usr/bin/python3 (bound at /box/main.py), with `stdin_data` on stdin.
inline RunResult run_python(const Sandbox& sandbox, std::string source, std::string stdin_data = "") {
  RunRequest request;
  request.argv = {"/usr/bin/python3", "-I", "-B", "/box/main.py"};
  request.files = {{"/box/main.py", std::move(source)}};
  request.stdin_data = std::move(stdin_data);
  return sandbox.run(request);
}

/// A marker unique to this test run, to find processes a test started.
inline std::string unique_marker(const std::string& prefix) {
  std::random_device device;
  return prefix + std::to_string(device()) + std::to_string(device());
}

/// Number of live processes (zombies included) whose command line contains `marker`.
inline int processes_with_marker(const std::string& marker) {
  int found = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(marker) != std::string::npos) ++found;
  }
  return found;
}

}  // namespace grpo::sandbox::testing

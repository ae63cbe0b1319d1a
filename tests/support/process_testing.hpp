// SPDX-License-Identifier: Apache-2.0
// Running the project's programs from tests as a user would: a shell command line in, exit status and output out.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace grpo::testing {

struct CommandResult {
  int status = -1;  ///< exit status, or -1 when the process did not exit normally (killed by a signal)
  std::string out;  ///< everything the command wrote to stdout
};

/// Runs `command` with /bin/sh (tests build it from fixed parts and temporary paths), capturing stdout.
inline CommandResult run_command(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot start: " + command);
  CommandResult result;
  std::array<char, 4096> buffer{};
  while (const size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) result.out.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace grpo::testing

// SPDX-License-Identifier: Apache-2.0
// Running programs from tests: a shell command with its output captured (run_command), and for multi-process tests
// a free loopback port, posix_spawn with extra environment and the output in a file, and a wait with a deadline that
// kills a process that overstays.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace grpo::testing {

/// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick for port 0).
inline int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::runtime_error("free_loopback_port: no free port on 127.0.0.1");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

struct ChildProcess {
  pid_t pid = -1;
  std::filesystem::path log;  ///< stdout and stderr
};

/// Starts argv with this process's environment plus `env` (overriding), output appended to `log`.
inline ChildProcess spawn_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                                  const std::filesystem::path& log) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos) merged[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  ChildProcess child{-1, log};
  const int rc = posix_spawn(&child.pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("spawn_process: cannot start " + argv[0] + ": " + std::strerror(rc));
  return child;
}

struct ChildExit {
  bool timed_out = false;  ///< killed after the deadline
  int exit_code = -1;      ///< when it exited normally
  int signal = 0;          ///< when a signal ended it
  double seconds = 0.0;    ///< from the call to the exit
  std::string output;      ///< the log file
};

/// Waits up to `timeout` for the child; past it, kills the child (SIGKILL) and reports timed_out.
inline ChildExit wait_process(const ChildProcess& child, std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  ChildExit out;
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(child.pid, &status, WNOHANG);
    if (done == child.pid) break;
    if (std::chrono::steady_clock::now() - start > timeout) {
      kill(child.pid, SIGKILL);
      waitpid(child.pid, &status, 0);
      out.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFEXITED(status)) out.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) out.signal = WTERMSIG(status);
  std::ifstream in(child.log);
  std::stringstream text;
  text << in.rdbuf();
  out.output = text.str();
  return out;
}

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

// SPDX-License-Identifier: Apache-2.0
// The process sandbox: runs an untrusted program under bubblewrap, with resource limits and a seccomp filter, and
// returns its exit status and capped output. The code_tests reward uses it; docs/sandbox.md lists the guarantees.
//
// Layers, outermost first (each one holds when the ones inside it are defeated):
//  1. a wall-clock limit enforced by the parent: at expiry the whole sandbox is killed (the PID namespace's init, so
//     every process inside dies with it) and reaped;
//  2. bubblewrap (Debian `bubblewrap`): new user, PID, network, IPC, UTS and cgroup namespaces (no network at all,
//     only a loopback that is down), a root holding only read-only binds of the system directories (by default /usr
//     and the /bin, /lib, /lib64, /sbin links: no /home, /root, /etc or project files), a private size-capped tmpfs
//     at /tmp (the only writable place), --die-with-parent, --new-session (no terminal injection);
//  3. when the caller is root, bubblewrap runs as an unprivileged user (nobody by default), so nothing inside holds
//     any capability or a root uid;
//  4. rlimits set in the forked child before bwrap is executed, inherited by everything inside: CPU seconds, address
//     space, file size, open files, no core files, and processes when subprocesses are allowed (see max_processes);
//  5. a seccomp filter (libseccomp, loaded by bwrap just before exec): no process creation (threads are allowed)
//     unless allow_subprocesses, no sockets but AF_UNIX, and none of ptrace, mount, namespaces, keyrings, bpf,
//     perf, kernel modules, io_uring and similar kernel attack surface.
// Output is read with a byte cap; a program that writes more is killed. No shell is involved anywhere: argv only.
#pragma once

#include <grpo/core/error.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace grpo::sandbox {

/// The sandbox could not be set up (bwrap missing or not executable, namespaces refused, a bind path missing). Never
/// a verdict on the program: a reward that gets this gives no value, and nothing is ever run unconfined.
class SandboxError : public Error {
 public:
  using Error::Error;
};

/// Per-run resource limits. Every field must be positive.
struct SandboxLimits {
  std::chrono::milliseconds wall_time{2000};  ///< enforced by the parent (kill of the whole sandbox)
  std::size_t cpu_seconds = 2;                ///< RLIMIT_CPU, per process (SIGXCPU then SIGKILL)
  std::size_t memory_bytes = 1024ull << 20;   ///< RLIMIT_AS, virtual address space per process
  /// RLIMIT_NPROC (+ 2 for bwrap itself), only with allow_subprocesses and a root caller, which gives each run a uid
  /// of its own (2000000000 + slot) so that the count is per sandbox; otherwise the seccomp filter (no processes at
  /// all) or nothing (a non-root caller with allow_subprocesses) bounds processes.
  std::size_t max_processes = 64;
  std::size_t max_file_bytes = 16ull << 20;   ///< RLIMIT_FSIZE, largest file a process may write
  std::size_t max_open_files = 64;            ///< RLIMIT_NOFILE
  std::size_t max_output_bytes = 1ull << 20;  ///< stdout and stderr each; more is killed (status output_limit)
  std::size_t tmpfs_bytes = 64ull << 20;      ///< size of the writable /tmp
};

struct SandboxOptions {
  std::string bwrap_path = "/usr/bin/bwrap";
  /// Host paths bound read-only at the same place. A symlink (as /bin → usr/bin on merged-/usr systems) is recreated
  /// as the same symlink; a path missing on the host is skipped.
  std::vector<std::string> ro_binds = {"/usr", "/bin", "/lib", "/lib64", "/sbin"};
  SandboxLimits limits{};
  /// false (default): the seccomp filter refuses fork/vfork and clone without CLONE_THREAD (EAGAIN), so a program
  /// cannot start processes at all; threads still work.
  bool allow_subprocesses = false;
  /// When the caller runs as root, bwrap is started as this uid and gid (65534 = nobody), so the sandbox holds no root
  /// identity; ignored for other callers (who are already unprivileged).
  unsigned run_as_uid = 65534;
  unsigned run_as_gid = 65534;
};

/// A file the program can read, bound read-only at `path` (absolute, under /box by convention).
struct SandboxFile {
  std::string path;
  std::string contents;
  bool executable = false;  ///< mode 0555 instead of 0444 (a compiled program)
};

struct RunRequest {
  std::vector<std::string> argv;                            ///< argv[0] is an absolute path inside the sandbox
  std::string stdin_data;                                   ///< the program's stdin (a sealed in-memory file)
  std::vector<SandboxFile> files;                           ///< read-only inputs (program source, harness)
  std::vector<std::pair<std::string, std::string>> env;     ///< added to PATH, HOME=/tmp, LANG=C.UTF-8
  std::optional<SandboxLimits> limits;                      ///< overrides SandboxOptions::limits for this run
};

enum class RunStatus {
  exited,        ///< the program exited (see exit_code)
  signaled,      ///< killed by a signal it caused (SIGSEGV, SIGXCPU from the CPU limit, SIGKILL, ...)
  timeout,       ///< the wall-clock limit passed: the sandbox was killed
  output_limit,  ///< stdout or stderr exceeded max_output_bytes: the sandbox was killed
};

struct RunResult {
  RunStatus status = RunStatus::exited;
  int exit_code = -1;        ///< when status == exited
  int signal = 0;            ///< when status == signaled
  std::string stdout_text;   ///< at most max_output_bytes
  std::string stderr_text;   ///< at most max_output_bytes
  double wall_seconds = 0.0;

  bool success() const { return status == RunStatus::exited && exit_code == 0; }
};

/// Runs programs in a fresh sandbox each. Thread-safe: `run` is const and may be called from many threads at once
/// (each call forks its own bwrap). Every process a run starts is dead and reaped when `run` returns.
class Sandbox {
 public:
  /// Validates the options (ConfigError naming the field), builds the seccomp filter, and runs a probe program
  /// (`/usr/bin/true` or the first ro_bind's `true`) through the full sandbox: throws SandboxError with bwrap's own
  /// message when it cannot be set up here.
  explicit Sandbox(SandboxOptions options = {});

  /// Runs one program. Throws SandboxError when bwrap cannot be started or fails before the sandbox exists; a program
  /// that misbehaves is a RunResult, never an exception. A namespace creation or init fork refused with EAGAIN
  /// (transient under heavy process churn) is retried after 50, 200 and 800 ms; nothing of the program has run then.
  RunResult run(const RunRequest& request) const;

  const SandboxOptions& options() const { return options_; }

 private:
  RunResult run_once(const RunRequest& request) const;

  SandboxOptions options_;
  std::vector<unsigned char> seccomp_bpf_;  // the compiled filter, written to a fresh memfd for each run
  std::vector<std::string> mount_args_;     // the bind/symlink arguments for ro_binds, resolved once
};

/// A short name for a status, as used in logs and test names: "exited", "signaled", "timeout", "output_limit".
const char* to_string(RunStatus status);

}  // namespace grpo::sandbox

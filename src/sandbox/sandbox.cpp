// SPDX-License-Identifier: Apache-2.0
// The bubblewrap process runner (see sandbox.hpp and docs/sandbox.md).
//
// One run: the parent prepares everything (argv, environment, in-memory files, the seccomp program) before fork, so
// the child only makes async-signal-safe system calls: death signal, new session, stdio, rlimits, drop to an
// unprivileged uid, close every other descriptor, execve(bwrap). bwrap reports the host PID of the sandbox's
// PID-namespace init on --info-fd; killing that process kills every process in the namespace, which is how a
// timeout, an output overflow, and the final clean-up reach processes the program left behind.
#include <grpo/sandbox/sandbox.hpp>

#include <fmt/format.h>
#include <seccomp.h>

#include <cerrno>
#include <cstdio>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <linux/close_range.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

namespace grpo::sandbox {
namespace {

using Clock = std::chrono::steady_clock;

// Processes of bwrap itself under the sandbox's uid: the outer bwrap and the namespace's init.
constexpr std::size_t kBwrapProcesses = 2;

/// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

[[noreturn]] void throw_errno(std::string_view what) {
  throw SandboxError(fmt::format("sandbox: {} failed: {}", what, std::strerror(errno)));
}

// Descriptors the child passes on are kept at 3 and above, so that dup2 onto 0..2 never overwrites one of them.
Fd high_fd(int fd, std::string_view what) {
  if (fd < 0) throw_errno(what);
  if (fd >= 3) return Fd(fd);
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  ::close(fd);
  if (moved < 0) throw_errno(what);
  return Fd(moved);
}

// A sealed in-memory file holding `contents`, read from offset 0 (stdin, files bound with --ro-bind-data, the BPF
// program for --seccomp). Close-on-exec until the child clears it for the descriptors it passes on.
Fd memory_file(const char* name, std::string_view contents) {
  Fd fd = high_fd(static_cast<int>(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING)), "memfd_create");
  std::size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd.get(), contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno("writing a memfd");
    written += static_cast<std::size_t>(n);
  }
  if (::lseek(fd.get(), 0, SEEK_SET) != 0) throw_errno("lseek");
  ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  return fd;
}

struct Pipe {
  Fd read, write;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  Pipe pipe{high_fd(fds[0], "pipe2"), high_fd(fds[1], "pipe2")};
  return pipe;
}

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int pidfd_kill(int pidfd) { return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0)); }

// The compiled seccomp program (see the file comment of sandbox.hpp, layer 5). Default allow with a deny list: a
// default-deny list for CPython would be long and brittle across versions; what matters is that the calls used to
// escape or attack the kernel are refused. Other architectures' system calls (int 0x80 from x86-64) kill the
// process: libseccomp's bad-arch action.
std::vector<unsigned char> build_seccomp_program(bool allow_subprocesses) {
  std::unique_ptr<void, void (*)(scmp_filter_ctx)> ctx(seccomp_init(SCMP_ACT_ALLOW), seccomp_release);
  GRPO_CHECK(ctx != nullptr, "sandbox: seccomp_init failed");
  const auto deny = [&](const char* name, int error_code) {
    const int number = seccomp_syscall_resolve_name(name);
    if (number == __NR_SCMP_ERROR) return;  // not a system call on this architecture
    const int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(error_code), number, 0);
    if (rc != 0) throw SandboxError(fmt::format("sandbox: seccomp rule for {} failed: {}", name, std::strerror(-rc)));
  };
  for (const char* name :
       {"ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "chroot", "unshare",
        "setns", "open_tree", "move_mount", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr", "keyctl",
        "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
        "io_uring_register", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
        "reboot", "swapon", "swapoff", "acct", "syslog", "quotactl", "open_by_handle_at", "name_to_handle_at",
        "mknod", "mknodat", "lookup_dcookie", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
        "sethostname", "setdomainname", "iopl", "ioperm", "vhangup", "pidfd_getfd", "fanotify_init"}) {
    deny(name, EPERM);
  }
  // Sockets: only AF_UNIX (Python's multiprocessing and some libraries use socketpair); the network namespace has no
  // route anyway, this makes the refusal immediate and explicit.
  if (seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX)) != 0) {
    throw SandboxError("sandbox: seccomp rule for socket failed");
  }
  if (!allow_subprocesses) {
    deny("fork", EAGAIN);
    deny("vfork", EAGAIN);
    // clone3 passes its flags in memory the filter cannot read: ENOSYS makes glibc fall back to clone, whose flags
    // argument is checked: a new thread (CLONE_THREAD) is fine, a new process is not.
    deny("clone3", ENOSYS);
    if (seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EAGAIN), SCMP_SYS(clone), 1,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0)) != 0) {
      throw SandboxError("sandbox: seccomp rule for clone failed");
    }
  }
  Fd out = high_fd(static_cast<int>(::memfd_create("grpo-seccomp", MFD_CLOEXEC)), "memfd_create");
  const int rc = seccomp_export_bpf(ctx.get(), out.get());
  if (rc != 0) throw SandboxError(fmt::format("sandbox: seccomp_export_bpf failed: {}", std::strerror(-rc)));
  const off_t size = ::lseek(out.get(), 0, SEEK_END);
  std::vector<unsigned char> program(static_cast<std::size_t>(size));
  if (::pread(out.get(), program.data(), program.size(), 0) != static_cast<ssize_t>(program.size())) {
    throw_errno("reading the seccomp program");
  }
  return program;
}

void check_limits(const SandboxLimits& limits, std::string_view where) {
  GRPO_CHECK_CONFIG(limits.wall_time.count() > 0, "{}: wall_time must be > 0 ms, got {} ms", where,
                    limits.wall_time.count());
  GRPO_CHECK_CONFIG(limits.cpu_seconds > 0, "{}: cpu_seconds must be > 0", where);
  GRPO_CHECK_CONFIG(limits.memory_bytes >= (16ull << 20), "{}: memory_bytes must be >= 16 MiB, got {}", where,
                    limits.memory_bytes);
  GRPO_CHECK_CONFIG(limits.max_processes > 0, "{}: max_processes must be > 0", where);
  GRPO_CHECK_CONFIG(limits.max_file_bytes > 0, "{}: max_file_bytes must be > 0", where);
  GRPO_CHECK_CONFIG(limits.max_open_files >= 8, "{}: max_open_files must be >= 8, got {}", where,
                    limits.max_open_files);
  GRPO_CHECK_CONFIG(limits.max_output_bytes > 0, "{}: max_output_bytes must be > 0", where);
  GRPO_CHECK_CONFIG(limits.tmpfs_bytes > 0, "{}: tmpfs_bytes must be > 0", where);
}

// The host PID bwrap writes on --info-fd: {"child-pid": 1234, ...}.
std::optional<pid_t> parse_child_pid(const std::string& info) {
  const auto key = info.find("\"child-pid\"");
  if (key == std::string::npos) return std::nullopt;
  std::size_t i = info.find(':', key);
  if (i == std::string::npos) return std::nullopt;
  ++i;
  while (i < info.size() && (info[i] == ' ' || info[i] == '\n' || info[i] == '\t')) ++i;
  pid_t pid = 0;
  bool digits = false;
  while (i < info.size() && info[i] >= '0' && info[i] <= '9') {
    pid = pid * 10 + (info[i++] - '0');
    digits = true;
  }
  return digits && pid > 0 ? std::optional<pid_t>(pid) : std::nullopt;
}

// The parent pid of `pid` from /proc/<pid>/stat (the field after the parenthesised command name), or -1.
pid_t parent_of(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buffer[512];
  const ssize_t n = ::read(fd, buffer, sizeof buffer - 1);
  ::close(fd);
  if (n <= 0) return -1;
  buffer[n] = '\0';
  const char* close_paren = std::strrchr(buffer, ')');
  int parent = -1;
  if (close_paren == nullptr || std::sscanf(close_paren + 1, " %*c %d", &parent) != 1) return -1;
  return parent;
}

// A pidfd for the namespace init bwrap reported, only if that process really is our bwrap's child: the pid comes
// through a pipe, and a pid that is not bwrap's child must never be signalled.
Fd open_init(pid_t pid, pid_t bwrap) {
  Fd fd(pidfd_open(pid));
  if (fd.valid() && parent_of(pid) != bwrap) fd.reset();
  return fd;
}

// Everything the child needs, prepared before fork (the child must not allocate).
struct ChildPlan {
  std::vector<std::string> args;
  std::vector<char*> argv;
  std::array<char*, 1> envp{nullptr};
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1, exec_error_fd = -1;
  std::vector<int> pass_fds;
  std::array<rlimit, 6> limits{};
  std::array<int, 6> resources{RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE, RLIMIT_NPROC};
  std::size_t limit_count = 5;  // RLIMIT_NPROC (the sixth) only when it can be per sandbox
  bool drop_root = false;
  unsigned uid = 0, gid = 0;
  pid_t parent = 0;
};

[[noreturn]] void child_fail(int error_fd, int error_number) {
  (void)!::write(error_fd, &error_number, sizeof error_number);
  ::_exit(127);
}

// Runs in the forked child: async-signal-safe calls only.
[[noreturn]] void exec_child(const ChildPlan& plan) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // if the scoring thread dies, bwrap (and through it the sandbox) dies too
  if (::getppid() != plan.parent) ::_exit(127);
  ::setsid();
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &default_action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (::dup2(plan.stdin_fd, 0) < 0 || ::dup2(plan.stdout_fd, 1) < 0 || ::dup2(plan.stderr_fd, 2) < 0) {
    child_fail(plan.exec_error_fd, errno);
  }
  for (std::size_t i = 0; i < plan.limit_count; ++i) {
    if (::setrlimit(plan.resources[i], &plan.limits[i]) != 0) child_fail(plan.exec_error_fd, errno);
  }
  if (plan.drop_root) {
    // Raw system calls: glibc's setuid would try to signal the parent's other threads (they do not exist here).
    if (::syscall(SYS_setgroups, 0, nullptr) != 0 || ::syscall(SYS_setresgid, plan.gid, plan.gid, plan.gid) != 0 ||
        ::syscall(SYS_setresuid, plan.uid, plan.uid, plan.uid) != 0) {
      child_fail(plan.exec_error_fd, errno);
    }
  }
  ::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
  for (int fd : plan.pass_fds) ::fcntl(fd, F_SETFD, 0);
  ::execve(plan.argv[0], plan.argv.data(), const_cast<char* const*>(plan.envp.data()));
  child_fail(plan.exec_error_fd, errno);
}

rlimit limit_of(std::size_t value) { return rlimit{static_cast<rlim_t>(value), static_cast<rlim_t>(value)}; }

// RLIMIT_NPROC counts every process of a user, so a per-sandbox process limit needs a user per sandbox: when the
// caller is root and subprocesses are allowed, each concurrent run takes its own uid from this pool.
constexpr unsigned kUidPoolBase = 2000000000u;
constexpr std::size_t kUidPoolSize = 4096;

class UidPool {
 public:
  static UidPool& instance() {
    static UidPool pool;
    return pool;
  }
  std::size_t acquire() {
    std::lock_guard lock(mutex_);
    for (std::size_t k = 0; k < kUidPoolSize; ++k) {
      const std::size_t slot = (next_ + k) % kUidPoolSize;  // round robin: a just-freed uid is reused last
      if (!used_[slot]) {
        used_[slot] = true;
        next_ = slot + 1;
        return slot;
      }
    }
    throw SandboxError("sandbox: more than 4096 concurrent sandboxes");
  }
  void release(std::size_t slot) {
    std::lock_guard lock(mutex_);
    used_[slot] = false;
  }

 private:
  std::mutex mutex_;
  std::vector<bool> used_ = std::vector<bool>(kUidPoolSize, false);
  std::size_t next_ = 0;
};

struct UidLease {
  std::optional<std::size_t> slot;
  ~UidLease() {
    if (slot) UidPool::instance().release(*slot);
  }
};

}  // namespace

const char* to_string(RunStatus status) {
  switch (status) {
    case RunStatus::exited: return "exited";
    case RunStatus::signaled: return "signaled";
    case RunStatus::timeout: return "timeout";
    case RunStatus::output_limit: return "output_limit";
  }
  return "unknown";
}

Sandbox::Sandbox(SandboxOptions options) : options_(std::move(options)) {
  check_limits(options_.limits, "SandboxOptions::limits");
  GRPO_CHECK_CONFIG(!options_.bwrap_path.empty() && options_.bwrap_path.front() == '/',
                    "SandboxOptions::bwrap_path must be an absolute path, got '{}'", options_.bwrap_path);
  if (::access(options_.bwrap_path.c_str(), X_OK) != 0) {
    throw SandboxError(fmt::format(
        "sandbox: bubblewrap is not available at '{}' ({}); install it (Debian: apt-get install bubblewrap). Code is "
        "never run without the sandbox.",
        options_.bwrap_path, std::strerror(errno)));
  }
  for (const std::string& path : options_.ro_binds) {
    GRPO_CHECK_CONFIG(!path.empty() && path.front() == '/', "SandboxOptions::ro_binds: '{}' is not an absolute path",
                      path);
    std::error_code error;
    const auto status = std::filesystem::symlink_status(path, error);
    if (error || !std::filesystem::exists(status)) continue;
    if (std::filesystem::is_symlink(status)) {
      mount_args_.insert(mount_args_.end(), {"--symlink", std::filesystem::read_symlink(path).string(), path});
    } else {
      mount_args_.insert(mount_args_.end(), {"--ro-bind", path, path});
    }
  }
  seccomp_bpf_ = build_seccomp_program(options_.allow_subprocesses);

  const char* probe = std::filesystem::exists("/usr/bin/true") ? "/usr/bin/true" : "/bin/true";
  RunRequest probe_request;
  probe_request.argv = {probe};
  const RunResult result = run(probe_request);
  if (!result.success()) {
    throw SandboxError(fmt::format("sandbox: the probe program {} did not run inside bubblewrap ({}, exit code {}): {}",
                                   probe, to_string(result.status), result.exit_code, result.stderr_text));
  }
}

namespace {
// bwrap's report of a clone() refused with EAGAIN: the kernel was momentarily out of a per-user resource.
struct TransientSetupFailure : SandboxError {
  using SandboxError::SandboxError;
};
}  // namespace

RunResult Sandbox::run(const RunRequest& request) const {
  for (int attempt = 0;; ++attempt) {
    try {
      return run_once(request);
    } catch (const TransientSetupFailure&) {
      if (attempt == 3) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(50 << (2 * attempt)));
    }
  }
}

RunResult Sandbox::run_once(const RunRequest& request) const {
  const SandboxLimits& limits = request.limits ? *request.limits : options_.limits;
  if (request.limits) check_limits(limits, "RunRequest::limits");
  GRPO_CHECK_CONFIG(!request.argv.empty() && !request.argv.front().empty() && request.argv.front().front() == '/',
                    "RunRequest::argv[0] must be an absolute path inside the sandbox");

  // In-memory files: stdin, the program's files, the seccomp program.
  Fd stdin_file = memory_file("grpo-stdin", request.stdin_data);
  Fd seccomp_file = memory_file("grpo-seccomp",
                                std::string_view(reinterpret_cast<const char*>(seccomp_bpf_.data()), seccomp_bpf_.size()));
  std::vector<Fd> data_files;
  for (const SandboxFile& file : request.files) {
    GRPO_CHECK_CONFIG(file.path.size() > 1 && file.path.front() == '/' && file.path.find("..") == std::string::npos,
                      "SandboxFile::path must be absolute without '..', got '{}'", file.path);
    data_files.push_back(memory_file("grpo-file", file.contents));
  }
  Pipe out = make_pipe(), err = make_pipe(), info = make_pipe(), exec_error = make_pipe();

  ChildPlan plan;
  plan.args = {options_.bwrap_path, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
               "--new-session", "--hostname", "sandbox"};
  plan.args.insert(plan.args.end(), mount_args_.begin(), mount_args_.end());
  plan.args.insert(plan.args.end(), {"--proc", "/proc", "--dev", "/dev", "--size", std::to_string(limits.tmpfs_bytes),
                                     "--tmpfs", "/tmp", "--dir", "/box"});
  for (std::size_t i = 0; i < request.files.size(); ++i) {
    plan.args.insert(plan.args.end(), {"--perms", request.files[i].executable ? "0555" : "0444", "--ro-bind-data",
                                       std::to_string(data_files[i].get()), request.files[i].path});
  }
  plan.args.insert(plan.args.end(), {"--remount-ro", "/", "--chdir", "/tmp", "--clearenv", "--setenv", "PATH",
                                     "/usr/bin:/bin", "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8"});
  for (const auto& [name, value] : request.env) plan.args.insert(plan.args.end(), {"--setenv", name, value});
  plan.args.insert(plan.args.end(), {"--seccomp", std::to_string(seccomp_file.get()), "--info-fd",
                                     std::to_string(info.write.get()), "--"});
  plan.args.insert(plan.args.end(), request.argv.begin(), request.argv.end());
  for (std::string& arg : plan.args) plan.argv.push_back(arg.data());
  plan.argv.push_back(nullptr);
  plan.stdin_fd = stdin_file.get();
  plan.stdout_fd = out.write.get();
  plan.stderr_fd = err.write.get();
  plan.exec_error_fd = exec_error.write.get();
  plan.pass_fds = {seccomp_file.get(), info.write.get()};
  for (const Fd& fd : data_files) plan.pass_fds.push_back(fd.get());
  // CPU: SIGXCPU at the soft limit, SIGKILL one second later.
  plan.limits = {rlimit{static_cast<rlim_t>(limits.cpu_seconds), static_cast<rlim_t>(limits.cpu_seconds + 1)},
                 limit_of(limits.memory_bytes), limit_of(limits.max_file_bytes), limit_of(limits.max_open_files),
                 limit_of(0), limit_of(limits.max_processes + kBwrapProcesses)};
  plan.drop_root = ::geteuid() == 0;
  plan.uid = options_.run_as_uid;
  plan.gid = options_.run_as_gid;
  // Without subprocesses the seccomp filter is the process limit (threads are bounded by RLIMIT_AS). With them, as
  // root, a uid of our own makes RLIMIT_NPROC count this sandbox only; a non-root caller shares its uid with its own
  // threads and processes, so RLIMIT_NPROC cannot be set meaningfully for it (see docs/sandbox.md).
  UidLease lease;
  if (options_.allow_subprocesses && plan.drop_root) {
    lease.slot = UidPool::instance().acquire();
    plan.uid = kUidPoolBase + static_cast<unsigned>(*lease.slot);
    plan.limit_count = 6;
  }
  plan.parent = ::getpid();

  const auto started = Clock::now();
  // The raw system call, not fork(3): fork runs the process's atfork handlers, and OpenBLAS's handler shuts its
  // thread pool down, which blocks for as long as another thread is inside a matrix product (a sampler generating
  // while this scores: observed as a hang). The child only makes raw, async-signal-safe calls until execve.
  const pid_t child = static_cast<pid_t>(::syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0));
  if (child < 0) throw_errno("fork");
  if (child == 0) exec_child(plan);

  // Parent: drop the child's ends, then learn whether execve(bwrap) worked (the error pipe closes on exec).
  out.write.reset();
  err.write.reset();
  info.write.reset();
  exec_error.write.reset();
  stdin_file.reset();
  seccomp_file.reset();
  data_files.clear();
  int exec_errno = 0;
  ssize_t got = 0;
  do {
    got = ::read(exec_error.read.get(), &exec_errno, sizeof exec_errno);
  } while (got < 0 && errno == EINTR);
  if (got > 0) {
    int status = 0;
    ::waitpid(child, &status, 0);
    const auto message =
        fmt::format("sandbox: cannot start bubblewrap '{}': {}", options_.bwrap_path, std::strerror(exec_errno));
    if (exec_errno == EAGAIN) throw TransientSetupFailure(message);  // the user's process count, momentarily
    throw SandboxError(message);
  }

  Fd outer = Fd(pidfd_open(child));  // bwrap outside the namespaces: our child
  Fd init;                            // the sandbox's PID-namespace init (bwrap's child), once known
  std::string info_text;
  RunResult result;
  std::optional<RunStatus> killed_for;
  bool out_open = true, err_open = true, info_open = true, outer_exited = !outer.valid();
  const auto deadline = started + limits.wall_time;

  const auto kill_all = [&](RunStatus reason) {
    if (killed_for) return;
    killed_for = reason;
    if (init.valid()) pidfd_kill(init.get());
    ::kill(-child, SIGKILL);
    ::kill(child, SIGKILL);
  };
  const auto drain = [&](int fd, std::string& into, bool& open) {
    char buffer[65536];
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) {
      open = false;
    } else if (n > 0) {
      const std::size_t room = limits.max_output_bytes - std::min(limits.max_output_bytes, into.size());
      into.append(buffer, std::min<std::size_t>(room, static_cast<std::size_t>(n)));
      if (static_cast<std::size_t>(n) > room) kill_all(RunStatus::output_limit);
    } else if (errno != EINTR && errno != EAGAIN) {
      open = false;
    }
  };

  while (!outer_exited || out_open || err_open) {
    std::array<pollfd, 4> fds{};
    nfds_t count = 0;
    int out_index = -1, err_index = -1, info_index = -1, outer_index = -1;
    if (out_open) { out_index = static_cast<int>(count); fds[count++] = {out.read.get(), POLLIN, 0}; }
    if (err_open) { err_index = static_cast<int>(count); fds[count++] = {err.read.get(), POLLIN, 0}; }
    if (info_open) { info_index = static_cast<int>(count); fds[count++] = {info.read.get(), POLLIN, 0}; }
    if (!outer_exited) { outer_index = static_cast<int>(count); fds[count++] = {outer.get(), POLLIN, 0}; }
    int timeout_ms = -1;
    if (!killed_for) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        kill_all(RunStatus::timeout);
        continue;
      }
      timeout_ms = static_cast<int>(std::min<long long>(left + 1, 1 << 30));
    } else if (outer_exited) {
      // Killed and bwrap reaped: the writers are dying with the namespace; bound the wait for their EOF.
      timeout_ms = 1000;
    }
    const int ready = ::poll(fds.data(), count, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      kill_all(RunStatus::timeout);
      break;
    }
    if (ready == 0 && killed_for && outer_exited) break;
    if (out_index >= 0 && fds[out_index].revents) drain(out.read.get(), result.stdout_text, out_open);
    if (err_index >= 0 && fds[err_index].revents) drain(err.read.get(), result.stderr_text, err_open);
    if (info_index >= 0 && fds[info_index].revents) {
      char buffer[512];
      const ssize_t n = ::read(info.read.get(), buffer, sizeof buffer);
      if (n > 0) info_text.append(buffer, static_cast<std::size_t>(n));
      if (n == 0 || (n < 0 && errno != EINTR)) info_open = false;
      if (!init.valid()) {
        if (const auto pid = parse_child_pid(info_text)) {
          init = open_init(*pid, child);
          info_open = false;  // the first report is bwrap's; nothing later is read
          if (killed_for && init.valid()) pidfd_kill(init.get());
        }
      }
    }
    if (outer_index >= 0 && fds[outer_index].revents) outer_exited = true;
  }

  // Reap bwrap, then make sure the namespace init (and with it every process of the sandbox) is gone: kill it (a
  // no-op when it already exited) and wait until it has exited.
  int status = 0;
  pid_t reaped = 0;
  while ((reaped = ::waitpid(child, &status, 0)) < 0 && errno == EINTR) {
  }
  const bool status_lost = reaped < 0;  // SIGCHLD ignored by the host process: the kernel reaped bwrap itself
  if (!init.valid()) {  // the info may have arrived after the last poll
    char buffer[512];
    ssize_t n = 0;
    while ((n = ::read(info.read.get(), buffer, sizeof buffer)) > 0) info_text.append(buffer, static_cast<std::size_t>(n));
    if (const auto pid = parse_child_pid(info_text)) init = open_init(*pid, child);
  }
  if (init.valid()) {
    pidfd_kill(init.get());
    pollfd wait_init{init.get(), POLLIN, 0};
    while (::poll(&wait_init, 1, 5000) < 0 && errno == EINTR) {
    }
  }
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - started).count();

  if (killed_for) {
    result.status = *killed_for;
    return result;
  }
  if (status_lost) {
    throw SandboxError("sandbox: the program's exit status was lost (is SIGCHLD set to SIG_IGN in this process?)");
  }
  if (WIFSIGNALED(status)) {  // bwrap itself was killed from outside the sandbox's reach (e.g. the OOM killer)
    result.status = RunStatus::signaled;
    result.signal = WTERMSIG(status);
    return result;
  }
  const int code = WEXITSTATUS(status);
  if (parse_child_pid(info_text) == std::nullopt) {
    // bwrap failed before it created the namespaces: nothing of the program ran, so this is a set-up failure.
    const auto message = fmt::format("sandbox: bubblewrap could not create the sandbox (exit code {}): {}", code,
                                     result.stderr_text);
    if (result.stderr_text.find("Resource temporarily unavailable") != std::string::npos) {
      throw TransientSetupFailure(message);
    }
    throw SandboxError(message);
  }
  // bwrap could not fork the namespace's init (EAGAIN under heavy process churn): the program never ran.
  if (code == 1 && result.stderr_text.rfind("bwrap: ", 0) == 0 &&
      result.stderr_text.find("Resource temporarily unavailable") != std::string::npos) {
    throw TransientSetupFailure(fmt::format("sandbox: bubblewrap could not start the program: {}", result.stderr_text));
  }
  // bwrap reports a program killed by signal N as exit code 128 + N.
  if (code > 128 && code < 128 + NSIG) {
    result.status = RunStatus::signaled;
    result.signal = code - 128;
  } else {
    result.status = RunStatus::exited;
    result.exit_code = code;
  }
  return result;
}

}  // namespace grpo::sandbox

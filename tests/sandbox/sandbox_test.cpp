// SPDX-License-Identifier: Apache-2.0
// The bubblewrap sandbox: a program runs, and every escape or abuse attempt is contained with the host unaffected.
#include <grpo/sandbox/sandbox.hpp>

#include "sandbox/sandbox_testing.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <csignal>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

using namespace grpo::sandbox;
using namespace grpo::sandbox::testing;

namespace {

const Sandbox& shared_sandbox() {
  static const Sandbox sandbox(fast_options());
  return sandbox;
}

}  // namespace

TEST_CASE("sandbox runs a program with stdin, stdout, stderr and its exit code", "[sandbox]") {
  const auto result = run_python(shared_sandbox(),
                                 "import sys\n"
                                 "data = sys.stdin.read()\n"
                                 "print(data.upper(), end='')\n"
                                 "print('note', file=sys.stderr)\n"
                                 "sys.exit(3)\n",
                                 "hello\n");
  CHECK(result.status == RunStatus::exited);
  CHECK(result.exit_code == 3);
  CHECK(result.stdout_text == "HELLO\n");
  CHECK(result.stderr_text == "note\n");
  CHECK_FALSE(result.success());
}

TEST_CASE("sandbox reports a crash as signaled", "[sandbox]") {
  const auto result = run_python(shared_sandbox(), "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n");
  CHECK(result.status == RunStatus::signaled);
  CHECK(result.signal == SIGSEGV);
}

TEST_CASE("sandbox environment: unprivileged, no host environment, read-only inputs, private tmp", "[sandbox]") {
  ::setenv("GRPO_SANDBOX_HOST_SECRET", "leak", 1);
  const auto result = run_python(shared_sandbox(),
                                 "import os\n"
                                 "print(os.getuid() if os.getuid() != 0 else 'root')\n"
                                 "print(os.environ.get('GRPO_SANDBOX_HOST_SECRET', 'absent'))\n"
                                 "print(os.getcwd())\n"
                                 "open('/tmp/scratch', 'w').write('ok')\n"
                                 "print(open('/tmp/scratch').read())\n");
  ::unsetenv("GRPO_SANDBOX_HOST_SECRET");
  REQUIRE(result.success());
  const std::string expected_uid = ::geteuid() == 0 ? "65534" : std::to_string(::geteuid());
  CHECK(result.stdout_text == expected_uid + "\nabsent\n/tmp\nok\n");
}

TEST_CASE("escape: no network socket, and a host listener on loopback sees no connection", "[sandbox][escape]") {
  // A real listener on the host's loopback: the sandbox must not reach it.
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  REQUIRE(listener >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(listener, 4) == 0);
  socklen_t length = sizeof address;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  const int port = ntohs(address.sin_port);

  const auto result = run_python(shared_sandbox(),
                                 "import socket\n"
                                 "for family in (socket.AF_INET, socket.AF_INET6):\n"
                                 "    try:\n"
                                 "        s = socket.socket(family, socket.SOCK_STREAM)\n"
                                 "        s.connect(('127.0.0.1', " + std::to_string(port) + "))\n"
                                 "        print('connected')\n"
                                 "    except OSError as e:\n"
                                 "        print('refused', e.errno)\n"
                                 "a, b = socket.socketpair()\n"
                                 "a.send(b'x'); print('unix', b.recv(1))\n");
  REQUIRE(result.status == RunStatus::exited);
  CHECK(result.stdout_text == "refused 13\nrefused 13\nunix b'x'\n");  // EACCES from the seccomp filter
  CHECK(::accept(listener, nullptr, nullptr) < 0);                     // nobody knocked
  ::close(listener);
}

TEST_CASE("escape: writes outside the private tmp fail and leave the host unchanged", "[sandbox][escape]") {
  const auto host_dir = std::filesystem::temp_directory_path() / unique_marker("grpo-sandbox-write-");
  std::filesystem::create_directories(host_dir);
  const auto result = run_python(shared_sandbox(),
                                 "paths = ['/box/main.py', '/usr/grpo_evil', '/grpo_evil', '/proc/sys/kernel/hostname',\n"
                                 "         '" + (host_dir / "evil").string() + "']\n"
                                 "for p in paths:\n"
                                 "    try:\n"
                                 "        open(p, 'w').write('x')\n"
                                 "        print('wrote', p)\n"
                                 "    except OSError as e:\n"
                                 "        print('denied')\n");
  REQUIRE(result.status == RunStatus::exited);
  CHECK(result.stdout_text == "denied\ndenied\ndenied\ndenied\ndenied\n");
  CHECK_FALSE(std::filesystem::exists(host_dir / "evil"));
  CHECK_FALSE(std::filesystem::exists("/usr/grpo_evil"));
  CHECK_FALSE(std::filesystem::exists("/grpo_evil"));
  std::filesystem::remove_all(host_dir);
}

TEST_CASE("escape: a file planted on the host outside the bound directories cannot be read", "[sandbox][escape]") {
  const auto host_dir = std::filesystem::temp_directory_path() / unique_marker("grpo-sandbox-plant-");
  std::filesystem::create_directories(host_dir);
  const auto secret = host_dir / "secret.txt";
  std::ofstream(secret) << "top secret";
  const auto cwd_secret = std::filesystem::current_path() / (unique_marker("grpo-plant-") + ".txt");
  std::ofstream(cwd_secret) << "top secret";
  const auto result = run_python(shared_sandbox(),
                                 "for p in ['" + secret.string() + "', '" + cwd_secret.string() +
                                     "', '/etc/passwd', '/root/.bashrc', '/proc/1/environ']:\n"
                                     "    try:\n"
                                     "        print('read', open(p).read()[:20])\n"
                                     "    except OSError as e:\n"
                                     "        print('denied')\n");
  std::filesystem::remove_all(host_dir);
  std::filesystem::remove(cwd_secret);
  REQUIRE(result.status == RunStatus::exited);
  // /proc/1 is the sandbox's own init (bwrap), whose environment is empty (--clearenv applies to the program only,
  // but bwrap's init holds no secrets either): reading it is allowed and shows nothing of the host.
  CHECK(result.stdout_text.find("top secret") == std::string::npos);
  CHECK(result.stdout_text.rfind("denied\ndenied\ndenied\ndenied\n", 0) == 0);
}

TEST_CASE("abuse: a fork bomb cannot start a single process", "[sandbox][abuse]") {
  const std::string marker = unique_marker("grpo-forkbomb-");
  const auto result = run_python(shared_sandbox(),
                                 "import os, subprocess\n"
                                 "try:\n"
                                 "    while True: os.fork()\n"
                                 "except OSError as e: print('fork refused', e.errno)\n"
                                 "try:\n"
                                 "    subprocess.Popen(['/usr/bin/sleep', '5', '" + marker + "'])\n"
                                 "except OSError as e: print('spawn refused')\n"
                                 "import threading\n"
                                 "t = threading.Thread(target=lambda: print('thread ok')); t.start(); t.join()\n");
  REQUIRE(result.status == RunStatus::exited);
  CHECK(result.stdout_text == "fork refused 11\nspawn refused\nthread ok\n");
  CHECK(processes_with_marker(marker) == 0);
}

TEST_CASE("abuse: with subprocesses allowed, a fork bomb is bounded and nothing survives", "[sandbox][abuse]") {
  const Sandbox sandbox(fast_options(/*allow_subprocesses=*/true));
  const std::string marker = unique_marker("grpo-forkbomb-");
  const auto started = std::chrono::steady_clock::now();
  const auto result = run_python(sandbox,
                                 "import os, time\n"
                                 "# " + marker + "\n"
                                 "while True:\n"
                                 "    try: os.fork()\n"
                                 "    except OSError: time.sleep(0.01)\n");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  CHECK_FALSE(result.success());
  CHECK(seconds < 4.0);
  CHECK(processes_with_marker("/box/main.py") == 0);
}

TEST_CASE("abuse: a memory bomb fails inside its address-space limit", "[sandbox][abuse]") {
  const auto result = run_python(shared_sandbox(),
                                 "try:\n"
                                 "    blocks = [bytearray(64 << 20) for _ in range(64)]\n"
                                 "    print('allocated 4 GiB')\n"
                                 "except MemoryError:\n"
                                 "    print('MemoryError')\n");
  REQUIRE(result.status == RunStatus::exited);
  CHECK(result.stdout_text == "MemoryError\n");
}

TEST_CASE("abuse: an infinite loop is killed at the wall-clock limit", "[sandbox][abuse]") {
  SandboxLimits limits = fast_options().limits;
  limits.wall_time = std::chrono::milliseconds(500);
  limits.cpu_seconds = 10;
  RunRequest request;
  request.argv = {"/usr/bin/python3", "-c", "while True: pass"};
  request.limits = limits;
  const auto result = shared_sandbox().run(request);
  CHECK(result.status == RunStatus::timeout);
  CHECK(result.wall_seconds < 1.5);
}

TEST_CASE("abuse: a CPU-bound loop is stopped by the CPU rlimit", "[sandbox][abuse]") {
  SandboxLimits limits = fast_options().limits;
  limits.wall_time = std::chrono::milliseconds(5000);
  limits.cpu_seconds = 1;
  RunRequest request;
  request.argv = {"/usr/bin/python3", "-c", "while True: pass"};
  request.limits = limits;
  const auto result = shared_sandbox().run(request);
  CHECK(result.status == RunStatus::signaled);
  CHECK((result.signal == SIGXCPU || result.signal == SIGKILL));
  CHECK(result.wall_seconds < 4.0);
}

TEST_CASE("abuse: huge output is capped and the program killed", "[sandbox][abuse]") {
  const auto result = run_python(shared_sandbox(), "import sys\nwhile True: sys.stdout.write('x' * 65536)\n");
  CHECK(result.status == RunStatus::output_limit);
  CHECK(result.stdout_text.size() == 64 * 1024);
}

TEST_CASE("abuse: a huge file is stopped by the file-size limit and the tmpfs size", "[sandbox][abuse]") {
  const auto result = run_python(shared_sandbox(),
                                 "try:\n"
                                 "    with open('/tmp/big', 'wb') as f:\n"
                                 "        for _ in range(1024): f.write(b'x' * (1 << 20))\n"
                                 "    print('wrote 1 GiB')\n"
                                 "except OSError as e:\n"
                                 "    print('stopped', e.errno)\n");
  REQUIRE(result.status == RunStatus::exited);
  CHECK(result.stdout_text == "stopped 28\n");  // ENOSPC: the 8 MiB tmpfs fills before the 16 MiB file limit
}

TEST_CASE("abuse: killing the parent or every process reaches only the sandbox", "[sandbox][abuse]") {
  // Inside the PID namespace the parent is bwrap's init (pid 1), which the kernel shields from its namespace's
  // SIGKILL; kill(-1) reaches only the sandbox's own processes.
  const auto result = run_python(shared_sandbox(),
                                 "import os\n"
                                 "print(os.getppid(), flush=True)\n"
                                 "os.kill(os.getppid(), 9)\n"
                                 "print('alive', flush=True)\n"
                                 "os.kill(-1, 9)\n"
                                 "print('alive after kill -1', flush=True)\n");
  CHECK(result.stdout_text.rfind("1\nalive\n", 0) == 0);
  CHECK(::kill(::getpid(), 0) == 0);  // the host process is alive (this test runs)
}

TEST_CASE("abuse: background processes left behind are killed and reaped", "[sandbox][abuse]") {
  const Sandbox sandbox(fast_options(/*allow_subprocesses=*/true));
  const std::string marker = unique_marker("grpo-background-");
  const auto result = run_python(sandbox,
                                 "import os, subprocess\n"
                                 "subprocess.Popen(['/usr/bin/python3', '-c', 'import time; time.sleep(30)', '" + marker +
                                     "'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
                                     "if os.fork() == 0:\n"
                                     "    os.setsid()\n"
                                     "    if os.fork() == 0:\n"
                                     "        os.execv('/usr/bin/python3', ['python3', '-c', 'import time; time.sleep(30)', '" +
                                     marker + "'])\n"
                                     "    os._exit(0)\n"
                                     "print('left behind')\n");
  REQUIRE(result.status == RunStatus::exited);
  CHECK(result.stdout_text == "left behind\n");
  CHECK(processes_with_marker(marker) == 0);
}

TEST_CASE("the sandbox refuses to run when bubblewrap is missing", "[sandbox]") {
  SandboxOptions options = fast_options();
  options.bwrap_path = "/nonexistent/bwrap";
  CHECK_THROWS_AS(Sandbox(options), SandboxError);
  CHECK_THROWS_WITH(Sandbox(options), Catch::Contains("bubblewrap is not available"));
}

TEST_CASE("the sandbox refuses to run when bubblewrap cannot set up", "[sandbox]") {
  // /bin/false stands for a bwrap that fails before creating the sandbox: no value, never an unconfined run.
  SandboxOptions options = fast_options();
  options.bwrap_path = "/bin/false";
  CHECK_THROWS_AS(Sandbox(options), SandboxError);
}

TEST_CASE("sandbox options are validated", "[sandbox]") {
  SandboxOptions options = fast_options();
  options.limits.wall_time = std::chrono::milliseconds(0);
  CHECK_THROWS_WITH(Sandbox(options), Catch::Contains("wall_time"));
  RunRequest request;
  request.argv = {"python3"};
  CHECK_THROWS_WITH(shared_sandbox().run(request), Catch::Contains("argv[0]"));
}

TEST_CASE("concurrent runs from several threads all succeed", "[sandbox][concurrency]") {
  // Process limits must be per sandbox: 4 × 10 concurrent runs, with and without subprocesses (RLIMIT_NPROC counts
  // per user, so each run with subprocesses gets its own uid when the caller is root).
  const bool allow_subprocesses = GENERATE(false, true);
  SandboxOptions options = fast_options(allow_subprocesses);
  options.limits.max_processes = 4;
  const Sandbox sandbox(options);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  std::mutex mutex;
  std::string report;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        RunResult result;
        try {
          result = run_python(sandbox, "print(int(input()) * 2)\n", std::to_string(t * 100 + i) + "\n");
        } catch (const SandboxError& e) {
          result.stderr_text = e.what();
        }
        if (result.stdout_text != std::to_string(2 * (t * 100 + i)) + "\n") {
          ++failures;
          std::lock_guard lock(mutex);
          report += std::string(to_string(result.status)) + " " + std::to_string(result.exit_code) + " " +
                    std::to_string(result.signal) + " " + result.stderr_text + "\n";
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  INFO(report);
  CHECK(failures == 0);
}

TEST_CASE("abuse: a timed-out run leaves no process behind either", "[sandbox][abuse]") {
  SandboxOptions options = fast_options(/*allow_subprocesses=*/true);
  options.limits.wall_time = std::chrono::milliseconds(700);
  options.limits.cpu_seconds = 5;
  const Sandbox sandbox(options);
  const std::string marker = unique_marker("grpo-timeout-");
  const auto result = run_python(sandbox,
                                 "import subprocess\n"
                                 "subprocess.Popen(['/usr/bin/python3', '-c', 'while True: pass', '" + marker + "'])\n"
                                 "while True: pass\n");
  CHECK(result.status == RunStatus::timeout);
  CHECK(processes_with_marker(marker) == 0);  // checked at once: the namespace init was killed and waited for
}

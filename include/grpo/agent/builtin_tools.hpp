// SPDX-License-Identifier: Apache-2.0
// The built-in tools: a calculator on the verifier's exact arithmetic, and Python in the process sandbox.
#pragma once

#include <grpo/agent/tool.hpp>
#include <grpo/sandbox/sandbox.hpp>

#include <memory>

namespace grpo::agent {

/// "calculator": {"expression": "(123456789 * 987654321) / 3"} → the exact value, "40637630157063969" (a fraction "p/q"
/// when it is not an integer; math::exact_value). Expressions are read as plain text (parse_plain: + - * / ^ **,
/// parentheses, abs, factorial, binom, gcd, lcm, min, max, mod, floor, ceiling). An expression without an exact
/// rational value (symbols, sqrt(2), division by zero) is an error reply.
std::shared_ptr<const Tool> calculator_tool();

/// "python": {"code": "print(sum(range(10)))"} → the program's stdout (and its stderr after it when it wrote any),
/// run by /usr/bin/python3 -I in `sandbox` (no network, no files but its own /tmp; docs/sandbox.md) under `limits`:
/// the wall-clock limit is the tool's timeout, output beyond max_output_bytes is cut. A program that fails, times out
/// or is killed is an error reply with its exit status and stderr. Null `sandbox`: one made with the default options
/// (throws sandbox::SandboxError when bubblewrap cannot run here).
std::shared_ptr<const Tool> python_tool(std::shared_ptr<const sandbox::Sandbox> sandbox = nullptr,
                                        sandbox::SandboxLimits limits = {.wall_time = std::chrono::milliseconds(5000),
                                                                         .cpu_seconds = 5,
                                                                         .memory_bytes = 512ull << 20,
                                                                         .max_processes = 1,
                                                                         .max_file_bytes = 1ull << 20,
                                                                         .max_open_files = 64,
                                                                         .max_output_bytes = 16 << 10,
                                                                         .tmpfs_bytes = 16ull << 20});

}  // namespace grpo::agent

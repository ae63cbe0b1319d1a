// SPDX-License-Identifier: Apache-2.0
// Exceptions thrown by grpo, and GRPO_CHECK, the one way user-facing checks are written.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace grpo {

/// Base of every exception grpo throws for bad input or misuse. LibTorch's c10::Error passes through unchanged.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An option or configuration value is invalid (names the option and the value).
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A file or text could not be parsed (names the file, line or field).
class ParseError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename ErrorType, typename... Args>
[[noreturn]] void throw_formatted(fmt::format_string<Args...> format, Args&&... args) {
  throw ErrorType(fmt::format(format, std::forward<Args>(args)...));
}
}  // namespace detail

}  // namespace grpo

/// GRPO_CHECK(cond, "fmt message {}", args...): throws grpo::Error with the formatted message when cond is
/// false. The message is formatted only on failure.
#define GRPO_CHECK(cond, ...)                                     \
  do {                                                            \
    if (!(cond)) ::grpo::detail::throw_formatted<::grpo::Error>(__VA_ARGS__); \
  } while (false)

/// GRPO_CHECK_CONFIG(cond, ...): as GRPO_CHECK, but throws grpo::ConfigError (for option validation).
#define GRPO_CHECK_CONFIG(cond, ...)                              \
  do {                                                            \
    if (!(cond)) ::grpo::detail::throw_formatted<::grpo::ConfigError>(__VA_ARGS__); \
  } while (false)

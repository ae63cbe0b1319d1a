// SPDX-License-Identifier: Apache-2.0
// Reading a whole file into memory, with the error every loader reports the same way.
#pragma once

#include <filesystem>
#include <string>

namespace grpo::io {

/// The file's bytes (binary mode, no newline translation). Throws grpo::Error "cannot read <path>" when it is
/// missing or unreadable.
std::string read_file(const std::filesystem::path& path);

}  // namespace grpo::io

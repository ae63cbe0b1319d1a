// SPDX-License-Identifier: Apache-2.0
// Writing files so that a reader (or a crash) never sees half of one.
#pragma once

#include <filesystem>
#include <functional>
#include <ostream>

namespace grpo::io {

/// Calls write(stream) on "<path>.tmp" (binary), flushes it, then renames it over path (atomic on POSIX when both
/// are on one file system). Throws grpo::Error naming the file if it cannot be written; an exception from write
/// propagates. On any failure the temporary file is removed and the old file, if any, is left untouched.
void write_file_atomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write);

}  // namespace grpo::io

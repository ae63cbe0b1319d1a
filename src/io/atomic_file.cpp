// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/io/atomic_file.hpp>

#include <fstream>

namespace grpo::io {

void write_file_atomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write) {
  auto tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    GRPO_CHECK(out.good(), "cannot write {}", tmp.string());
    try {
      write(out);
    } catch (...) {
      out.close();
      std::filesystem::remove(tmp);
      throw;
    }
    out.flush();
    if (!out.good()) {
      out.close();
      std::filesystem::remove(tmp);
      GRPO_CHECK(false, "writing {} failed", tmp.string());
    }
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  GRPO_CHECK(!error, "cannot rename {} to {}: {}", tmp.string(), path.string(), error.message());
}

}  // namespace grpo::io

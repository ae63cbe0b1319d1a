// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/io/read_file.hpp>

#include <fstream>
#include <sstream>

namespace grpo::io {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  GRPO_CHECK(in.good() && !std::filesystem::is_directory(path), "cannot read {}", path.string());
  std::ostringstream content;
  content << in.rdbuf();
  GRPO_CHECK(!in.bad(), "cannot read {}", path.string());
  return content.str();
}

}  // namespace grpo::io

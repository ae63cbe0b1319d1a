// SPDX-License-Identifier: Apache-2.0
#include "grpo/core/ascii_text.hpp"
#include "grpo/math/graders.hpp"

#include <algorithm>

namespace grpo::math {
namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::size_t i = 0;
  while ((i = s.find(from, i)) != std::string::npos) {
    s.replace(i, from.size(), to);
    i += to.size();
  }
}

bool is_int(std::string_view s) {
  if (s.empty()) return false;
  const std::size_t start = s[0] == '-' ? 1 : 0;
  if (start == s.size()) return false;
  // Python's str(int(a)) == a: no leading zeros (except "0"), no '+'.
  if (s[start] == '0' && s.size() - start > 1) return false;
  return std::all_of(s.begin() + static_cast<std::ptrdiff_t>(start), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string fix_sqrt(const std::string& s) {
  // "\sqrtX" → "\sqrt{X}" for a single character X.
  std::string out;
  std::size_t i = 0;
  while (true) {
    const auto j = s.find("\\sqrt", i);
    if (j == std::string::npos) break;
    out.append(s, i, j + 5 - i);
    i = j + 5;
    if (i < s.size() && s[i] != '{') {
      out += '{';
      out += s[i];
      out += '}';
      ++i;
    }
  }
  out.append(s, i, std::string::npos);
  return out;
}

std::string fix_fracs(const std::string& s) {
  // Upstream: split on "\frac"; each piece not starting with '{' gets its first two characters braced.
  std::vector<std::string> parts;
  std::size_t i = 0;
  while (true) {
    const auto j = s.find("\\frac", i);
    parts.push_back(s.substr(i, j == std::string::npos ? std::string::npos : j - i));
    if (j == std::string::npos) break;
    i = j + 5;
  }
  std::string out = parts[0];
  for (std::size_t k = 1; k < parts.size(); ++k) {
    const std::string& p = parts[k];
    out += "\\frac";
    if (!p.empty() && p[0] == '{') {
      out += p;
      continue;
    }
    if (p.size() < 2) return s;  // upstream returns the input unchanged
    const char a = p[0], b = p[1];
    if (b != '{') {
      out += std::string("{") + a + "}{" + b + "}" + p.substr(2);
    } else {
      out += std::string("{") + a + "}" + b + p.substr(2);
    }
  }
  return out;
}

std::string fix_a_slash_b(const std::string& s) {
  const auto slash = s.find('/');
  if (slash == std::string::npos || s.find('/', slash + 1) != std::string::npos) return s;
  const std::string a = s.substr(0, slash), b = s.substr(slash + 1);
  if (!is_int(a) || !is_int(b)) return s;
  return "\\frac{" + a + "}{" + b + "}";
}


}  // namespace

std::string hendrycks_strip_string(std::string_view in) {
  std::string s(in);
  replace_all(s, "\n", "");
  replace_all(s, "\\!", "");
  replace_all(s, "\\\\", "\\");
  replace_all(s, "tfrac", "frac");
  replace_all(s, "dfrac", "frac");
  replace_all(s, "\\left", "");
  replace_all(s, "\\right", "");
  replace_all(s, "^{\\circ}", "");
  replace_all(s, "^\\circ", "");
  replace_all(s, "\\$", "");
  if (const auto u = s.find("\\text{ "); u != std::string::npos) s.resize(u);  // a unit
  replace_all(s, "\\%", "");
  replace_all(s, " .", " 0.");
  replace_all(s, "{.", "{0.");
  if (s.empty()) return s;
  if (s[0] == '.') s = "0" + s;
  if (const auto eq = s.find('='); eq != std::string::npos && s.find('=', eq + 1) == std::string::npos && eq <= 2) {
    s = s.substr(eq + 1);
  }
  s = fix_sqrt(s);
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  s = fix_fracs(s);
  if (s == "0.5") s = "\\frac{1}{2}";
  return fix_a_slash_b(s);
}

Verdict hendrycks_is_equiv(std::string_view gold, std::string_view pred) {
  return hendrycks_strip_string(gold) == hendrycks_strip_string(pred) ? Verdict::equal : Verdict::not_equal;
}

Verdict nemo_skills_math_equal(std::string_view gold, std::string_view pred, const VerifyOptions& options) {
  auto strip = [](std::string_view s) {
    std::string t(trim_ascii_space(s));
    if (t.size() >= 2 && t.compare(t.size() - 2, 2, "\\%") == 0) t.resize(t.size() - 2);
    else if (!t.empty() && t.back() == '%') t.pop_back();
    while (!t.empty() && (t.back() == '.' || t.back() == '\\')) t.pop_back();
    return t;
  };
  const std::string g = strip(gold), p = strip(pred);
  if (g.empty() || p.empty()) return Verdict::not_equal;
  auto plain = [](const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) {
      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == ' ';
    });
  };
  NormalizationOptions class_defaults;
  class_defaults.units = false;
  class_defaults.malformed_operators = false;
  class_defaults.nits = false;
  if (plain(g) && plain(p)) {
    return normalize_latex(g, class_defaults) == normalize_latex(p, class_defaults) ? Verdict::equal
                                                                                    : Verdict::not_equal;
  }
  auto wrap = [](const std::string& s) {
    bool dollar = false;
    for (std::size_t i = 0; i < s.size(); ++i) dollar |= s[i] == '$' && (i == 0 || s[i - 1] != '\\');
    const bool has_env = dollar || s.find("\\(") != std::string::npos ||
                         s.find("\\[") != std::string::npos || s.find("\\boxed") != std::string::npos;
    return has_env ? s : "$" + s + "$";
  };
  VerifyOptions o = options;
  o.gold.expr = false;
  o.pred.expr = false;
  return verify(wrap(g), wrap(p), o);
}

}  // namespace grpo::math

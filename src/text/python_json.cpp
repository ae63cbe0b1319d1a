// SPDX-License-Identifier: Apache-2.0
// python_json_dumps: simdjson's On Demand parser walks the value in document order, so object keys keep their order
// and numbers keep their source text; the writer follows CPython's json encoder (Lib/json/encoder.py) and its float
// repr (Python/pystrtod.c, mode 'r').
#include <grpo/text/python_json.hpp>

#include <grpo/core/error.hpp>

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grpo::text {
namespace {

namespace ondemand = simdjson::ondemand;

[[noreturn]] void fail(std::string_view what, std::string_view reason) {
  ::grpo::detail::throw_formatted<ParseError>("{}: invalid JSON: {}", what, reason);
}

void check(simdjson::error_code error, std::string_view what) {
  if (error) fail(what, simdjson::error_message(error));
}

/// json.dumps's string literal with ensure_ascii=False (CPython's ESCAPE_DCT), appended to `out`.
void append_string(std::string_view text, std::string& out) {
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

enum class NumberKind { invalid, integer, real };

/// RFC 8259's number grammar, -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?: integer when it has neither a
/// fraction nor an exponent (Python's json reads those as int, the others as float).
NumberKind classify_number(std::string_view token) {
  std::size_t i = 0;
  const auto digits = [&] {
    const std::size_t start = i;
    while (i < token.size() && token[i] >= '0' && token[i] <= '9') ++i;
    return i - start;
  };
  if (i < token.size() && token[i] == '-') ++i;
  const std::size_t integer_start = i;
  const std::size_t integer_digits = digits();
  if (integer_digits == 0 || (integer_digits > 1 && token[integer_start] == '0')) return NumberKind::invalid;
  NumberKind kind = NumberKind::integer;
  if (i < token.size() && token[i] == '.') {
    ++i;
    if (digits() == 0) return NumberKind::invalid;
    kind = NumberKind::real;
  }
  if (i < token.size() && (token[i] == 'e' || token[i] == 'E')) {
    ++i;
    if (i < token.size() && (token[i] == '+' || token[i] == '-')) ++i;
    if (digits() == 0) return NumberKind::invalid;
    kind = NumberKind::real;
  }
  return i == token.size() ? kind : NumberKind::invalid;
}

/// For a valid real number `token` outside the double range: whether it is too large (Python's float() gives
/// ±inf) rather than too small (±0.0). Compares the decimal exponent of its first significant digit with 0.
bool beyond_largest_double(std::string_view token) {
  const std::size_t e = token.find_first_of("eE");
  const std::string_view mantissa = token.substr(0, e);
  long long exponent = 0;
  if (e != std::string_view::npos) {
    std::string_view digits = token.substr(e + 1);
    const bool negative = digits.front() == '-';
    if (digits.front() == '+' || digits.front() == '-') digits.remove_prefix(1);
    for (const char c : digits) exponent = std::min(exponent * 10 + (c - '0'), 1'000'000'000LL);
    if (negative) exponent = -exponent;
  }
  const std::size_t point = std::min(mantissa.find('.'), mantissa.size());
  const std::size_t first = mantissa.find_first_of("123456789");
  const long long position = first < point ? static_cast<long long>(point - first) - 1
                                           : -static_cast<long long>(first - point);
  return position + exponent > 0;
}

/// Python's repr(float) (float_repr_style 'short'): the shortest digits that round-trip, in fixed notation when
/// the decimal point falls in (-4, 16] digits from the first one, else "d.ddde±XX"; json.dumps's Infinity.
std::string python_float_repr(double value) {
  if (std::isinf(value)) return value < 0 ? "-Infinity" : "Infinity";
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  std::string_view text(buffer, static_cast<std::size_t>(result.ptr - buffer));  // "-d.ddde-XX"
  std::string out;
  if (text.front() == '-') {
    out += '-';
    text.remove_prefix(1);
  }
  const std::size_t e = text.find('e');
  std::string digits;
  for (const char c : text.substr(0, e)) {
    if (c != '.') digits += c;
  }
  std::string_view exponent_text = text.substr(e + 1);
  if (exponent_text.front() == '+') exponent_text.remove_prefix(1);
  int exponent = 0;
  std::from_chars(exponent_text.data(), exponent_text.data() + exponent_text.size(), exponent);
  // The value is 0.<digits> * 10^decpt.
  const int decpt = exponent + 1;
  const int size = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (size > 1) out.append(".").append(digits, 1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (decpt <= 0) {
    out.append("0.").append(static_cast<std::size_t>(-decpt), '0').append(digits);
  } else if (decpt >= size) {
    out.append(digits).append(static_cast<std::size_t>(decpt - size), '0').append(".0");
  } else {
    out.append(digits, 0, static_cast<std::size_t>(decpt)).append(".").append(digits, static_cast<std::size_t>(decpt));
  }
  return out;
}

/// `text` without JSON whitespace (space, tab, newline, carriage return) at either end.
std::string_view trim_json_space(std::string_view text) {
  constexpr std::string_view kSpace = " \t\n\r";
  const std::size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(kSpace) - begin + 1);
}

/// `token` is an On Demand raw number token, which runs up to the next token (trailing whitespace included).
void append_number(std::string_view token, std::string_view what, std::string& out) {
  token = trim_json_space(token);
  switch (classify_number(token)) {
    case NumberKind::invalid:
      fail(what, fmt::format("'{}' is not a number", token));
    case NumberKind::integer:
      out += token == "-0" ? std::string_view("0") : token;
      return;
    case NumberKind::real: {
      double value = 0;
      const auto result = std::from_chars(token.data(), token.data() + token.size(), value);
      if (result.ec == std::errc::result_out_of_range) {
        const double limit = beyond_largest_double(token) ? HUGE_VAL : 0.0;
        value = token.front() == '-' ? -limit : limit;
      }
      out += python_float_repr(value);
      return;
    }
  }
}

/// Writes the value `value` (an On Demand value or the document itself) to `out`.
template <typename Value>
void append_value(Value& value, std::string_view what, std::string& out) {
  ondemand::json_type type = ondemand::json_type::null;  // set by type() (check throws on its error)
  check(value.type().get(type), what);
  switch (type) {
    case ondemand::json_type::object: {
      ondemand::object object;
      check(value.get_object().get(object), what);
      // Python's dict: a repeated key keeps its first place and takes the last value.
      std::vector<std::pair<std::string, std::string>> members;
      for (auto item : object) {
        ondemand::field field;
        check(std::move(item).get(field), what);
        std::string_view key;
        check(field.unescaped_key().get(key), what);
        std::string text;
        append_value(field.value(), what, text);
        auto existing = members.begin();
        while (existing != members.end() && existing->first != key) ++existing;
        if (existing == members.end()) {
          members.emplace_back(std::string(key), std::move(text));
        } else {
          existing->second = std::move(text);
        }
      }
      out += '{';
      for (std::size_t i = 0; i < members.size(); ++i) {
        if (i > 0) out += ", ";
        append_string(members[i].first, out);
        out += ": ";
        out += members[i].second;
      }
      out += '}';
      return;
    }
    case ondemand::json_type::array: {
      ondemand::array array;
      check(value.get_array().get(array), what);
      out += '[';
      bool first = true;
      for (auto item : array) {
        ondemand::value element;
        check(std::move(item).get(element), what);
        if (!first) out += ", ";
        first = false;
        append_value(element, what, out);
      }
      out += ']';
      return;
    }
    case ondemand::json_type::string: {
      std::string_view text;
      check(value.get_string().get(text), what);
      append_string(text, out);
      return;
    }
    case ondemand::json_type::number: {
      // The value's raw_json_token is a plain string_view, the document's a simdjson_result.
      simdjson::simdjson_result<std::string_view> raw = value.raw_json_token();
      std::string_view token;
      check(std::move(raw).get(token), what);
      append_number(token, what, out);
      return;
    }
    case ondemand::json_type::boolean: {
      bool flag = false;
      check(value.get_bool().get(flag), what);
      out += flag ? "true" : "false";
      return;
    }
    case ondemand::json_type::null: {
      bool null = false;
      check(value.is_null().get(null), what);
      if (!null) fail(what, "expected null");
      out += "null";
      return;
    }
  }
}

}  // namespace

std::string python_json_string(std::string_view text) {
  std::string out;
  append_string(text, out);
  return out;
}

std::string python_json_dumps(std::string_view json, std::string_view what) {
  const simdjson::padded_string padded(json);
  ondemand::parser parser;
  ondemand::document document;
  check(parser.iterate(padded).get(document), what);
  ondemand::json_type type;
  check(document.type().get(type), what);
  if (type == ondemand::json_type::number) {
    // On Demand reads a number in place without moving past it: it must be the whole text.
    std::string_view token;
    check(document.raw_json_token().get(token), what);
    if (trim_json_space(token) != trim_json_space(json)) fail(what, "trailing content after the value");
  }
  std::string out;
  append_value(document, what, out);
  // After an array or object, anything but whitespace is left over (strings, booleans and null check it themselves).
  const char* location = nullptr;
  if (type != ondemand::json_type::number && !document.current_location().get(location)) {
    fail(what, "trailing content after the value");
  }
  return out;
}

}  // namespace grpo::text

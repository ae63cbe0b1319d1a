// SPDX-License-Identifier: Apache-2.0
#include "unicode.hpp"

#include <grpo/core/error.hpp>

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>

namespace grpo::text::detail {
namespace {

/// Length of the well-formed sequence at p[0..n) (> 0), or minus the length of its maximal ill-formed subpart.
int sequence_length(const unsigned char* p, std::size_t n) {
  const unsigned char lead = p[0];
  if (lead < 0x80) return 1;
  int length = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // no overlong forms
    if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  } else {
    return -1;  // a continuation byte, C0, C1 or F5..FF cannot start a character
  }
  for (int i = 1; i < length; ++i) {
    if (static_cast<std::size_t>(i) >= n) return -i;
    const unsigned char byte = p[i];
    const unsigned char lo = i == 1 ? low : 0x80;
    const unsigned char hi = i == 1 ? high : 0xBF;
    if (byte < lo || byte > hi) return -i;
  }
  return length;
}

/// Combining marks (non-zero canonical combining class in utf8proc's Unicode 15) that Hugging Face tokenizers
/// treats as unassigned: it normalizes with the Unicode 9.0 tables of the unicode-normalization-alignments
/// crate, where these are starters that neither reorder nor compose. Found by probing its NFC of "a" + mark +
/// U+0334 against utf8proc's for every mark of class > 1 (and every decomposable character: no other differences).
constexpr std::array<char32_t, 108> kMarksAfterUnicode9 = {
    0x7FD,   0x898,   0x899,   0x89A,   0x89B,   0x89C,   0x89D,   0x89E,   0x89F,   0x8CA,   0x8CB,   0x8CC,
    0x8CD,   0x8CE,   0x8CF,   0x8D0,   0x8D1,   0x8D2,   0x8D3,   0x9FE,   0xC3C,   0xD3B,   0xD3C,   0xEBA,
    0x1715,  0x1ABF,  0x1AC0,  0x1AC1,  0x1AC2,  0x1AC3,  0x1AC4,  0x1AC5,  0x1AC6,  0x1AC7,  0x1AC8,  0x1AC9,
    0x1ACA,  0x1ACB,  0x1ACC,  0x1ACD,  0x1ACE,  0x1DF6,  0x1DF7,  0x1DF8,  0x1DF9,  0x1DFA,  0xA82C,  0x10D24,
    0x10D25, 0x10D26, 0x10D27, 0x10EAB, 0x10EAC, 0x10EFD, 0x10EFE, 0x10EFF, 0x10F46, 0x10F47, 0x10F48, 0x10F49,
    0x10F4A, 0x10F4B, 0x10F4C, 0x10F4D, 0x10F4E, 0x10F4F, 0x10F50, 0x10F82, 0x10F83, 0x10F84, 0x10F85, 0x11070,
    0x1133B, 0x1145E, 0x11839, 0x1183A, 0x1193D, 0x1193E, 0x11943, 0x119E0, 0x11A34, 0x11A47, 0x11A99, 0x11D42,
    0x11D44, 0x11D45, 0x11D97, 0x11F41, 0x11F42, 0x16FF0, 0x16FF1, 0x1E08F, 0x1E130, 0x1E131, 0x1E132, 0x1E133,
    0x1E134, 0x1E135, 0x1E136, 0x1E2AE, 0x1E2EC, 0x1E2ED, 0x1E2EE, 0x1E2EF, 0x1E4EC, 0x1E4ED, 0x1E4EE, 0x1E4EF};

bool is_mark_after_unicode9(char32_t c) {
  return std::binary_search(kMarksAfterUnicode9.begin(), kMarksAfterUnicode9.end(), c);
}

/// Ranges whose characters all have NFC_Quick_Check = Yes and combining class 0 (Latin below the combining
/// diacritics, general punctuation, CJK punctuation and ideographs, Hangul syllables, variation selectors,
/// half/full-width forms, emoji): text made only of them is already NFC (UAX #15 quick check), so utf8proc is
/// skipped for most text.
bool is_nfc_inert(char32_t c) {
  return c < 0x300 || (c >= 0x2010 && c < 0x2070) || (c >= 0x3001 && c < 0x302A) || (c >= 0x4E00 && c < 0xA000) ||
         (c >= 0xAC00 && c < 0xD7A4) || (c >= 0xFE00 && c < 0xFE10) || (c >= 0xFF01 && c < 0xFFEF) ||
         (c >= 0x1F300 && c < 0x1FB00);
}

std::string utf8proc_normalize(std::string_view text, int options) {
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &mapped, static_cast<utf8proc_option_t>(options));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner(mapped, &std::free);
  GRPO_CHECK(length >= 0, "Unicode normalization failed: {}", utf8proc_errmsg(length));
  return std::string(reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(length));
}

}  // namespace

std::size_t find_invalid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = 0;
  while (i < text.size()) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const int length = sequence_length(p + i, text.size() - i);
    if (length < 0) return i;
    i += static_cast<std::size_t>(length);
  }
  return std::string_view::npos;
}

std::string replace_invalid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = 0;
  while (i < text.size()) {
    const int length = sequence_length(p + i, text.size() - i);
    if (length > 0) {
      out.append(text.substr(i, static_cast<std::size_t>(length)));
      i += static_cast<std::size_t>(length);
    } else {
      out.append("\xEF\xBF\xBD");
      i += static_cast<std::size_t>(-length);
    }
  }
  return out;
}

char32_t next_code_point(std::string_view text, std::size_t& pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  if (p[0] < 0x80) {
    ++pos;
    return p[0];
  }
  if (p[0] < 0xE0) {
    pos += 2;
    return (char32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (p[0] < 0xF0) {
    pos += 3;
    return (char32_t(p[0] & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  pos += 4;
  return (char32_t(p[0] & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) | (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

char32_t previous_code_point(std::string_view text, std::size_t& pos) {
  std::size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  std::size_t cursor = start;
  const char32_t code_point = next_code_point(text, cursor);
  pos = start;
  return code_point;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool is_white_space(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  switch (c) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool is_word_character(char32_t c) {
  // Rust regex's \w: Alphabetic (letters, letter numbers, and the circled / squared letters that are symbols
  // with Other_Alphabetic), marks, decimal digits, connector punctuation, and the two join controls.
  if (c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
      (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189)) {
    return true;
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

std::string normalize(std::string_view text, NormalizationForm form) {
  bool ascii = true;
  for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);  // every normalization form leaves ASCII unchanged
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalizationForm::nfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalizationForm::nfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalizationForm::nfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalizationForm::nfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  // The text is cut at normalization boundaries: before every NFC-inert character (under NFC) and on both sides
  // of a mark unknown to the reference's Unicode 9.0 tables (a starter there). Chunks holding only inert
  // characters and such marks are copied; the others go through utf8proc.
  const bool nfc = form == NormalizationForm::nfc;
  std::string out;
  out.reserve(text.size());
  std::size_t emitted = 0;  // text before it is in out
  std::size_t chunk = 0;    // start of the current chunk
  bool dirty = false;       // the current chunk needs utf8proc
  bool after_mark = false;
  const auto close_chunk = [&](std::size_t end) {
    if (dirty) {
      out.append(text.substr(emitted, chunk - emitted));
      out += utf8proc_normalize(text.substr(chunk, end - chunk), options);
      emitted = end;
    }
    chunk = end;
    dirty = false;
  };
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t at = pos;
    const char32_t c = next_code_point(text, pos);
    const bool mark = is_mark_after_unicode9(c);
    const bool inert = nfc && is_nfc_inert(c);
    if (inert || mark || after_mark) close_chunk(at);
    after_mark = mark;
    dirty = dirty || !(inert || mark);
  }
  close_chunk(text.size());
  out.append(text.substr(emitted));
  return out;
}

/// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes are shifted to
/// U+0100.. in byte order, so every byte has a visible, non-space character in the vocabulary files.
std::array<char32_t, 256> byte_to_char_table() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

/// The inverse of byte_to_char_table for code points below 0x144; -1 for characters that are not byte stand-ins.
int char_to_byte(char32_t c) {
  static const auto inverse = [] {
    std::array<int, 0x144> table;
    table.fill(-1);
    const auto forward = byte_to_char_table();
    for (int b = 0; b < 256; ++b) table[forward[b]] = b;
    return table;
  }();
  return c < inverse.size() ? inverse[c] : -1;
}

}  // namespace grpo::text::detail

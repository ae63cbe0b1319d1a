// SPDX-License-Identifier: Apache-2.0
// Private UTF-8 and Unicode helpers of the text area (utf8proc stays behind this header).
#pragma once

#include <cstddef>
#include <array>
#include <string>
#include <string_view>

namespace grpo::text::detail {

/// Byte offset of the first ill-formed UTF-8 sequence (Unicode Table 3-7), or std::string_view::npos.
std::size_t find_invalid_utf8(std::string_view text);

/// `text` with every maximal ill-formed subpart replaced by U+FFFD (the Unicode "substitution of maximal
/// subparts" practice that Python, Rust's from_utf8_lossy and WHATWG's TextDecoder follow).
std::string replace_invalid_utf8(std::string_view text);

/// Decodes the code point starting at text[pos] of valid UTF-8 and advances pos past it.
char32_t next_code_point(std::string_view text, std::size_t& pos);
/// Decodes the code point ending at text[pos - 1] of valid UTF-8 and moves pos back to its first byte.
char32_t previous_code_point(std::string_view text, std::size_t& pos);
void append_utf8(std::string& out, char32_t code_point);

/// GPT-2's bytes_to_unicode: the character that stands for each byte in a byte-level BPE vocabulary.
std::array<char32_t, 256> byte_to_char_table();
/// The byte `c` stands for, or -1 when it is not one of byte_to_char_table's characters.
int char_to_byte(char32_t c);

/// Unicode White_Space (Rust's char::is_whitespace; the set Oniguruma's \s matches).
bool is_white_space(char32_t code_point);
/// Rust regex's Unicode \w, which Hugging Face uses to decide whether an added token marked single_word stands
/// inside a word.
bool is_word_character(char32_t code_point);

enum class NormalizationForm { nfc, nfd, nfkc, nfkd };
/// Unicode normalization of valid UTF-8 (utf8proc); ASCII text skips utf8proc (every form leaves it unchanged).
std::string normalize(std::string_view text, NormalizationForm form);

}  // namespace grpo::text::detail

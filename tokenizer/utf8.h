// UTF-8 helpers for the tokenizer: validation, lossy decoding and the streaming
// "stable prefix" used by the incremental detokenizer.
//
// Lossy decoding replaces each *maximal subpart* of an ill-formed sequence by
// one U+FFFD (Unicode 15, section 3.9 "U+FFFD Substitution of Maximal
// Subparts"). This is what WHATWG TextDecoder (the node reference) and Rust's
// String::from_utf8_lossy (Hugging Face tokenizers) do, so Decode matches both.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tpserve::utf8 {

// True when `s` is well-formed UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
bool IsValid(std::string_view s);

// Appends `s` to `out`, each maximal ill-formed subpart replaced by U+FFFD.
void AppendLossy(std::string_view s, std::string& out);

// `s` with every maximal ill-formed subpart replaced by U+FFFD.
std::string Lossy(std::string_view s);

// Length of the longest prefix of `s` whose lossy decoding no later byte can
// change: all of `s` except a trailing sequence that is incomplete but could
// still become valid (at most 3 bytes). Lossy(s[0, k)) is then a prefix of
// Lossy(s + anything).
size_t StablePrefix(std::string_view s);

// Decodes the code point at s[i] (s must be valid UTF-8 there); advances i.
char32_t NextCodePoint(std::string_view s, size_t& i);

// Appends the UTF-8 encoding of `cp` to `out`.
void AppendCodePoint(char32_t cp, std::string& out);

}  // namespace tpserve::utf8

// The GPT-2 byte <-> unicode map used by byte-level BPE (ByteLevel
// pre-tokenizer and decoder): every byte 0..255 stands for one printable code
// point, so a vocabulary of strings covers arbitrary bytes. Printable Latin-1
// bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves; the other 68 bytes map
// to U+0100, U+0101, ... in byte order (space 0x20 -> 'Ġ' U+0120, '\n' -> 'Ċ').
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tpserve::byte_level {

// UTF-8 text of the code point that stands for byte `b`.
const std::string& ByteToChar(uint8_t b);

// The byte that code point `cp` stands for, or -1 when `cp` is not in the map.
int CharToByte(char32_t cp);

// The bytes a vocabulary token stands for ("Ġthe" -> " the"), or nullopt when
// some character of `token` is not in the map. `token` must be valid UTF-8.
std::optional<std::string> TokenToBytes(std::string_view token);

// The vocabulary spelling of raw bytes (" the" -> "Ġthe").
std::string BytesToToken(std::string_view bytes);

}  // namespace tpserve::byte_level

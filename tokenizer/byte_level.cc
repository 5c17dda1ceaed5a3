#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace tpserve::byte_level {
namespace {

struct Maps {
  std::array<std::string, 256> byte_to_char;
  std::array<int16_t, 512> char_to_byte;  // every mapped code point is < 0x144

  Maps() {
    char_to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      utf8::AppendCodePoint(cp, byte_to_char[b]);
      char_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Maps& GetMaps() {
  static const Maps maps;
  return maps;
}

}  // namespace

const std::string& ByteToChar(uint8_t b) { return GetMaps().byte_to_char[b]; }

int CharToByte(char32_t cp) { return cp < 512 ? GetMaps().char_to_byte[cp] : -1; }

std::optional<std::string> TokenToBytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    const int b = CharToByte(utf8::NextCodePoint(token, i));
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
  }
  return out;
}

std::string BytesToToken(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += ByteToChar(static_cast<uint8_t>(c));
  return out;
}

}  // namespace tpserve::byte_level

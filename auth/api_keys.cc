#include "auth/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "auth/secret_file.h"

namespace tpserve {

namespace {

constexpr size_t kMinKeyChars = 16;

std::array<unsigned char, 32> Digest(absl::string_view text) {
  std::array<unsigned char, 32> digest{};
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  return digest;
}

}  // namespace

absl::StatusOr<ApiKeys> ApiKeys::FromText(absl::string_view text, absl::string_view source) {
  ApiKeys keys;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() > 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, " line ", line_number, ": expected `KEY` or `NAME KEY`, got ", fields.size(), " words"));
    }
    const absl::string_view key = fields.back();
    if (key.size() < kMinKeyChars) {
      return absl::InvalidArgumentError(absl::StrCat(source, " line ", line_number, ": a key needs at least ",
                                                     kMinKeyChars, " characters (openssl rand -hex 24 makes one)"));
    }
    Key entry{fields.size() == 2 ? std::string(fields[0]) : absl::StrCat("key-", line_number), Digest(key)};
    for (const Key& other : keys.keys_) {
      if (other.digest == entry.digest || other.name == entry.name) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, " line ", line_number, ": a duplicate key or name (", entry.name, ")"));
      }
    }
    keys.keys_.push_back(std::move(entry));
  }
  if (keys.keys_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, " holds no key: one key per line, `KEY` or `NAME KEY`"));
  }
  return keys;
}

absl::StatusOr<ApiKeys> ApiKeys::FromFile(const std::filesystem::path& path) {
  absl::StatusOr<std::string> text = ReadSecretFile(path, "--api-key-file");
  if (!text.ok()) return text.status();
  return FromText(*text, absl::StrCat("--api-key-file ", path.string()));
}

std::optional<std::string> ApiKeys::Match(absl::string_view presented) const {
  const std::array<unsigned char, 32> digest = Digest(presented);
  const Key* found = nullptr;
  for (const Key& key : keys_) {  // every key is compared, whichever matches
    if (CRYPTO_memcmp(key.digest.data(), digest.data(), digest.size()) == 0) found = &key;
  }
  if (found == nullptr) return std::nullopt;
  return found->name;
}

std::optional<absl::string_view> ApiKeys::BearerToken(absl::string_view header) {
  constexpr absl::string_view kBearer = "Bearer ";
  if (header.size() <= kBearer.size() || !absl::EqualsIgnoreCase(header.substr(0, kBearer.size()), kBearer)) {
    return std::nullopt;
  }
  return absl::StripAsciiWhitespace(header.substr(kBearer.size()));
}

absl::StatusOr<std::string> ReadClientApiKey(const std::filesystem::path& path, absl::string_view flag) {
  absl::StatusOr<std::string> text = ReadSecretFile(path, flag);
  if (!text.ok()) return text.status();
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<absl::string_view> words = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    return std::string(words.back());
  }
  return absl::InvalidArgumentError(absl::StrCat(flag, " ", path.string(), " holds no key"));
}

}  // namespace tpserve

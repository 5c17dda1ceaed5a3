// The tokenizer.json "model" of type BPE, for byte-level vocabularies: the
// vocabulary (token -> id), the ranked merges, ignore_merges, and a per
// pre-token cache. A pre-token arrives as raw bytes; each byte starts as the
// id of its byte-level character ('Ġ' for a space) and the lowest-ranked
// adjacent pair (leftmost on ties) is merged until no merge applies, exactly
// as Hugging Face tokenizers does.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace tpserve {

class BpeModel {
 public:
  // Parses `config` (the value of field `field`, i.e. "model"). Unsupported
  // model types or options (WordPiece, Unigram, dropout, byte_fallback,
  // subword prefixes) and merges naming unknown tokens are errors naming the field.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& config, const std::string& field);

  // Appends the ids of one pre-token (raw bytes). Thread-safe.
  void Encode(std::string_view piece, std::vector<int32_t>& out) const;

  // The vocabulary: token spelling (byte-level characters) <-> id.
  const absl::flat_hash_map<std::string, int32_t>& vocab() const { return vocab_; }
  // 1 + the largest id in the vocabulary.
  int32_t size() const { return size_; }

 private:
  struct Merge {
    uint32_t rank;   // position in "merges": lower merges first
    int32_t merged;  // id of the concatenation
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void Merges(std::string_view piece, std::vector<int32_t>& out) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;     // spelling -> id
  absl::flat_hash_map<std::string, int32_t> by_bytes_;  // raw bytes -> id (ignore_merges lookups)
  absl::flat_hash_map<uint64_t, Merge> merges_;         // (left id, right id) -> merge
  std::array<int32_t, 256> byte_ids_{};                 // byte -> id of its character, -1 if absent
  int32_t size_ = 0;
  int32_t unk_id_ = -1;  // emitted for a byte missing from the vocabulary; -1: dropped (as HF does without unk)
  bool ignore_merges_ = false;

  // Cache of pre-token -> ids, sharded so concurrent encoders rarely contend.
  static constexpr size_t kShards = 16;
  static constexpr size_t kShardCapacity = 16384;  // entries; a full shard is cleared
  static constexpr size_t kMaxCachedBytes = 256;
  struct Shard {
    absl::Mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> map ABSL_GUARDED_BY(mu);
  };
  mutable std::array<Shard, kShards> cache_;
};

}  // namespace tpserve

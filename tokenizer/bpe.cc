#include "tokenizer/bpe.h"

#include <queue>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/byte_level.h"

namespace tpserve {
namespace {

absl::Status FieldError(const std::string& field, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("field '", field, "': ", absl::string_view(what.data(), what.size())));
}

bool IsSet(const nlohmann::json& config, const char* name) {
  auto it = config.find(name);
  if (it == config.end() || it->is_null()) return false;
  if (it->is_string()) return !it->get<std::string>().empty();
  if (it->is_boolean()) return it->get<bool>();
  if (it->is_number()) return it->get<double>() != 0.0;
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const nlohmann::json& config, const std::string& field) {
  if (!config.is_object()) return FieldError(field, "must be an object");
  const std::string type = config.value("type", std::string("BPE"));
  if (type != "BPE") {
    return FieldError(field + ".type", absl::StrCat("model '", type,
                                                    "' is not supported; only byte-level BPE (Llama 3, Qwen2/3) is"));
  }
  for (const char* option : {"dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"}) {
    if (IsSet(config, option)) {
      return FieldError(absl::StrCat(field, ".", option), "is set, which byte-level BPE here does not support");
    }
  }
  std::unique_ptr<BpeModel> model(new BpeModel());
  model->ignore_merges_ = config.value("ignore_merges", false);

  auto vocab = config.find("vocab");
  if (vocab == config.end() || !vocab->is_object()) return FieldError(field + ".vocab", "must be an object token -> id");
  model->vocab_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= (int64_t{1} << 30)) {
      return FieldError(absl::StrCat(field, ".vocab[\"", it.key(), "\"]"), "id must be an integer in [0, 2^30)");
    }
    const auto id = it->get<int32_t>();
    model->vocab_.emplace(it.key(), id);
    model->size_ = std::max(model->size_, id + 1);
    if (auto bytes = byte_level::TokenToBytes(it.key())) model->by_bytes_.emplace(std::move(*bytes), id);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = model->vocab_.find(byte_level::ByteToChar(static_cast<uint8_t>(b)));
    model->byte_ids_[b] = it == model->vocab_.end() ? -1 : it->second;
  }
  if (auto unk = config.find("unk_token"); unk != config.end() && unk->is_string()) {
    auto it = model->vocab_.find(unk->get<std::string>());
    if (it == model->vocab_.end()) return FieldError(field + ".unk_token", "names a token that is not in the vocab");
    model->unk_id_ = it->second;
  }

  auto merges = config.find("merges");
  if (merges == config.end() || !merges->is_array()) return FieldError(field + ".merges", "must be an array");
  model->merges_.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const nlohmann::json& m = (*merges)[i];
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return FieldError(absl::StrCat(field, ".merges[", i, "]"), absl::StrCat("\"", s, "\" is not \"left right\""));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return FieldError(absl::StrCat(field, ".merges[", i, "]"), "must be \"left right\" or [left, right]");
    }
    auto l = model->vocab_.find(left), r = model->vocab_.find(right), merged = model->vocab_.find(left + right);
    if (l == model->vocab_.end() || r == model->vocab_.end() || merged == model->vocab_.end()) {
      return FieldError(absl::StrCat(field, ".merges[", i, "]"),
                        absl::StrCat("merge of \"", left, "\" and \"", right, "\" uses a token missing from the vocab"));
    }
    // Like HF, a repeated pair takes its last rank.
    model->merges_[PairKey(l->second, r->second)] = Merge{static_cast<uint32_t>(i), merged->second};
  }
  return model;
}

void BpeModel::Encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(piece[0])];
    if (id >= 0 || unk_id_ >= 0) out.push_back(id >= 0 ? id : unk_id_);
    return;
  }
  if (ignore_merges_) {
    if (auto it = by_bytes_.find(absl::string_view(piece.data(), piece.size())); it != by_bytes_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > kMaxCachedBytes) {
    Merges(piece, out);
    return;
  }
  const size_t hash = absl::HashOf(absl::string_view(piece.data(), piece.size()));
  Shard& shard = cache_[(hash >> 7) % kShards];
  {
    absl::ReaderMutexLock lock(&shard.mu);
    if (auto it = shard.map.find(absl::string_view(piece.data(), piece.size())); it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  Merges(piece, out);
  absl::MutexLock lock(&shard.mu);
  if (shard.map.size() >= kShardCapacity) shard.map.clear();
  shard.map.emplace(std::string(piece), std::vector<int32_t>(out.begin() + first, out.end()));
}

void BpeModel::Merges(std::string_view piece, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;    // -1: byte missing from the vocab; -2: merged away
    int32_t next;  // index of the next live symbol, -1 at the end
    int32_t prev;  // index of the previous live symbol, -1 at the start
  };
  struct Candidate {
    uint32_t rank;
    int32_t pos;  // index of the left symbol
    int32_t left, right, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const auto n = static_cast<int32_t>(piece.size());
  absl::InlinedVector<Symbol, 64> sym(static_cast<size_t>(n));  // [n]
  for (int32_t i = 0; i < n; ++i) sym[i] = {byte_ids_[static_cast<uint8_t>(piece[i])], i + 1 < n ? i + 1 : -1, i - 1};
  std::priority_queue<Candidate, absl::InlinedVector<Candidate, 64>, std::greater<>> queue;
  auto consider = [&](int32_t pos) {
    if (pos < 0) return;
    const int32_t next = sym[pos].next;
    if (next < 0 || sym[pos].id < 0 || sym[next].id < 0) return;
    auto it = merges_.find(PairKey(sym[pos].id, sym[next].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, sym[pos].id, sym[next].id, it->second.merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const int32_t next = sym[c.pos].next;
    if (sym[c.pos].id != c.left || next < 0 || sym[next].id != c.right) continue;  // stale
    sym[c.pos].id = c.merged;
    sym[c.pos].next = sym[next].next;
    if (sym[next].next >= 0) sym[sym[next].next].prev = c.pos;
    sym[next].id = -2;
    consider(sym[c.pos].prev);
    consider(c.pos);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = sym[i].next) {
    if (sym[i].id >= 0) {
      out.push_back(sym[i].id);
    } else if (unk_id_ >= 0) {
      out.push_back(unk_id_);
    }
  }
}

}  // namespace tpserve

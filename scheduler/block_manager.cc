#include "scheduler/block_manager.h"

#include <algorithm>
#include <bit>

#include "base/check.h"
#include "base/random.h"

namespace tpserve {

BlockManager::BlockManager(int64_t num_blocks, int32_t block_size, bool enable_prefix_caching)
    : block_size_(block_size), prefix_caching_(enable_prefix_caching), blocks_(num_blocks) {
  for (BlockId id = 0; id < num_blocks; ++id) {
    free_.push_back(id);
    blocks_[id].free_pos = std::prev(free_.end());
  }
}

BlockManagerStats BlockManager::stats() const {
  BlockManagerStats s;
  s.num_blocks = num_blocks();
  s.free_blocks = num_free_blocks();
  s.cached_blocks = static_cast<int64_t>(cached_.size());
  s.prefix_queries = prefix_queries_;
  s.prefix_hits = prefix_hits_;
  return s;
}

namespace {

// Token pair w (tokens 2w and 2w+1, the second 0 past the end) of `tokens`,
// as one 64-bit word: two 32-bit ids side by side, so no two pairs share one.
uint64_t TokenPair(std::span<const int32_t> tokens, size_t w) {
  const uint64_t lo = static_cast<uint32_t>(tokens[2 * w]);
  const uint64_t hi = 2 * w + 1 < tokens.size() ? static_cast<uint32_t>(tokens[2 * w + 1]) : 0;
  return lo | hi << 32;
}

// A block's tokens, digested without its parent: kHashLanes independent
// SplitMix64 chains (lane l takes token pairs l, l + kHashLanes, ...; each
// seeded with its index and the token count, which tells a short block from
// one ending in token 0), joined in a tree. The lanes' rounds do not wait on
// each other, nor on the parent's hash, so a CPU runs them side by side.
uint64_t TokenDigest(std::span<const int32_t> tokens) {
  constexpr size_t kHashLanes = 4;
  constexpr uint64_t kLaneSeed[kHashLanes] = {SplitMix64(0x6c616e6530), SplitMix64(0x6c616e6531),
                                              SplitMix64(0x6c616e6532), SplitMix64(0x6c616e6533)};
  const size_t pairs = (tokens.size() + 1) / 2;
  uint64_t lane[kHashLanes];
  for (size_t l = 0; l < kHashLanes; ++l) lane[l] = kLaneSeed[l] ^ tokens.size();
  size_t w = 0;
  for (; w + kHashLanes <= pairs; w += kHashLanes) {
    for (size_t l = 0; l < kHashLanes; ++l) lane[l] = SplitMix64(lane[l] ^ TokenPair(tokens, w + l));
  }
  for (size_t l = 0; w + l < pairs; ++l) lane[l] = SplitMix64(lane[l] ^ TokenPair(tokens, w + l));
  return SplitMix64(SplitMix64(lane[0] ^ std::rotl(lane[1], 17)) ^
                    std::rotl(SplitMix64(lane[2] ^ std::rotl(lane[3], 17)), 32));
}

}  // namespace

uint64_t BlockManager::HashBlock(uint64_t parent, std::span<const int32_t> tokens) {
  // Only this last round waits on the parent: a prompt's chain costs one
  // round a block in sequence, the digests overlapping around it.
  return SplitMix64(parent ^ TokenDigest(tokens) ^ 0x7470736572766531ull);
}

std::optional<BlockId> BlockManager::Lookup(uint64_t parent, uint64_t hash,
                                            std::span<const int32_t> tokens) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  const Block& b = blocks_[it->second];
  if (b.parent_hash != parent || b.tokens.size() != tokens.size() ||
      !std::equal(tokens.begin(), tokens.end(), b.tokens.begin())) {
    return std::nullopt;  // a hash collision: never share K/V of other tokens
  }
  return it->second;
}

void BlockManager::ExtendBlockHashes(std::span<const int32_t> tokens, int32_t block_size,
                                     std::vector<uint64_t>& hashes, int64_t max_blocks) {
  const int64_t full = std::min<int64_t>(static_cast<int64_t>(tokens.size()) / block_size, max_blocks);
  if (static_cast<int64_t>(hashes.size()) >= full) return;
  hashes.reserve(static_cast<size_t>(full));
  for (auto i = static_cast<int64_t>(hashes.size()); i < full; ++i) {
    hashes.push_back(HashBlock(i == 0 ? 0 : hashes.back(), tokens.subspan(i * block_size, block_size)));
  }
}

int64_t BlockManager::CachedPrefixBlocks(std::span<const int32_t> prompt, std::span<const uint64_t> hashes,
                                         int64_t max_blocks, std::vector<BlockId>* hits) const {
  uint64_t parent = 0;
  int64_t blocks = 0;
  for (; blocks < max_blocks; ++blocks) {
    auto tokens = prompt.subspan(blocks * block_size_, block_size_);
    const uint64_t h = blocks < std::ssize(hashes) ? hashes[blocks] : HashBlock(parent, tokens);
    const std::optional<BlockId> id = Lookup(parent, h, tokens);
    if (!id) break;
    if (hits != nullptr) hits->push_back(*id);
    parent = h;
  }
  return blocks;
}

int64_t BlockManager::CachedPrefixTokens(std::span<const int32_t> prompt, std::span<const uint64_t> hashes) const {
  if (!prefix_caching_) return 0;
  // Leave at least one token to compute: its hidden state gives the first logits.
  const int64_t max_blocks = (static_cast<int64_t>(prompt.size()) - 1) / block_size_;
  return CachedPrefixBlocks(prompt, hashes, max_blocks, nullptr) * block_size_;
}

BlockId BlockManager::TakeFree() {
  const BlockId id = free_.front();
  free_.pop_front();
  Block& b = blocks_[id];
  if (b.hash) {
    cached_.erase(*b.hash);
    if (observer_ != nullptr) observer_->OnBlockRemoved(*b.hash);
    b.hash.reset();
    b.tokens.clear();
  }
  b.ref_count = 1;
  return id;
}

void BlockManager::Acquire(BlockId id) {
  Block& b = blocks_[id];
  if (b.ref_count++ == 0) free_.erase(b.free_pos);
}

void BlockManager::Release(BlockId id) {
  TPSERVE_CHECK(id >= 0 && id < num_blocks(), "BlockManager: release of an unknown block ", id);
  Block& b = blocks_[id];
  TPSERVE_CHECK(b.ref_count > 0, "BlockManager: block ", id, " freed twice");
  if (--b.ref_count == 0) {
    free_.push_back(id);
    b.free_pos = std::prev(free_.end());
  }
}

std::optional<int64_t> BlockManager::AllocatePrompt(std::span<const int32_t> tokens,
                                                    int64_t num_tokens,
                                                    std::vector<BlockId>& table, bool read_cache,
                                                    std::span<const uint64_t> hashes) {
  TPSERVE_CHECK(table.empty(), "BlockManager::AllocatePrompt: the table must start empty, it holds ", table.size(), " blocks");
  std::vector<BlockId> hits;
  if (read_cache && prefix_caching_) {  // as CachedPrefixTokens: one token at least left to compute
    CachedPrefixBlocks(tokens, hashes, (num_tokens - 1) / block_size_, &hits);
  }
  const auto cached_blocks = static_cast<int64_t>(hits.size());
  const int64_t cached = cached_blocks * block_size_;
  const int64_t needed = BlocksFor(num_tokens);
  // Cached blocks with no users sit in the free queue: reusing them consumes it too.
  int64_t cached_free = 0;
  for (BlockId id : hits) cached_free += blocks_[id].ref_count == 0 ? 1 : 0;
  if (needed - cached_blocks + cached_free > num_free_blocks()) return std::nullopt;

  if (prefix_caching_ && read_cache) {
    prefix_queries_ += (num_tokens - 1) / block_size_;
    prefix_hits_ += cached_blocks;
  }
  for (BlockId id : hits) {
    Acquire(id);
    table.push_back(id);
  }
  while (static_cast<int64_t>(table.size()) < needed) table.push_back(TakeFree());
  return cached;
}

bool BlockManager::Grow(std::vector<BlockId>& table, int64_t num_tokens) {
  const int64_t needed = BlocksFor(num_tokens) - static_cast<int64_t>(table.size());
  if (needed <= 0) return true;
  if (needed > num_free_blocks()) return false;
  for (int64_t i = 0; i < needed; ++i) table.push_back(TakeFree());
  return true;
}

void BlockManager::Share(std::span<const BlockId> blocks, std::vector<BlockId>& table) {
  for (BlockId id : blocks) {
    TPSERVE_CHECK(blocks_[id].ref_count > 0, "BlockManager::Share: block ", id, " is free; share only held blocks");
    Acquire(id);
    table.push_back(id);
  }
}

bool BlockManager::PrepareWrite(std::vector<BlockId>& table, int64_t from, int64_t to,
                                std::vector<BlockCopy>& copies) {
  const int64_t held = static_cast<int64_t>(table.size());
  const int64_t first = from / block_size_, end = std::min(BlocksFor(to), held);
  int64_t shared = 0;
  for (int64_t i = first; i < end; ++i) shared += blocks_[table[i]].ref_count > 1 ? 1 : 0;
  const int64_t grow = std::max<int64_t>(0, BlocksFor(to) - held);
  if (grow + shared > num_free_blocks()) return false;
  for (int64_t i = first; i < end; ++i) {
    const BlockId src = table[i];
    if (blocks_[src].ref_count <= 1) continue;
    const BlockId dst = TakeFree();
    Release(src);  // still held by the others
    table[i] = dst;
    copies.push_back(BlockCopy{.index = i, .src = src, .dst = dst});
  }
  for (int64_t i = 0; i < grow; ++i) table.push_back(TakeFree());
  return true;
}

void BlockManager::CommitFullBlocks(std::span<const int32_t> tokens, int64_t num_computed,
                                    std::span<const BlockId> table, BlockHashChain& chain) {
  if (!prefix_caching_) return;
  const int64_t full = std::min<int64_t>(num_computed / block_size_, table.size());
  ExtendBlockHashes(tokens, block_size_, chain.hashes, full);
  for (; chain.blocks < full; ++chain.blocks) {
    auto block_tokens = tokens.subspan(chain.blocks * block_size_, block_size_);
    const uint64_t parent = chain.blocks == 0 ? 0 : chain.hashes[static_cast<size_t>(chain.blocks - 1)];
    const uint64_t h = chain.hashes[static_cast<size_t>(chain.blocks)];
    Block& b = blocks_[table[chain.blocks]];
    // A block reused from the cache is registered already; another block may
    // hold the same content (two identical prompts computed in one step): keep
    // the first registration.
    if (!b.hash && !cached_.contains(h)) {
      b.hash = h;
      b.parent_hash = parent;
      b.tokens.assign(block_tokens.begin(), block_tokens.end());
      cached_.emplace(h, table[chain.blocks]);
      if (observer_ != nullptr) observer_->OnBlockStored(h, parent, block_tokens);
    }
  }
}

std::vector<uint64_t> BlockManager::CachedHashes() const {
  std::vector<uint64_t> hashes;
  hashes.reserve(cached_.size());
  for (const auto& [hash, id] : cached_) hashes.push_back(hash);
  return hashes;
}

void BlockManager::Free(std::vector<BlockId>& table) {
  // Release the tail first so that, among equally old blocks, a prefix's later
  // blocks are evicted before its first ones (a shorter shared prefix survives).
  for (auto it = table.rbegin(); it != table.rend(); ++it) Release(*it);
  table.clear();
}

void BlockManager::Truncate(std::vector<BlockId>& table, size_t keep) {
  while (table.size() > keep) {
    const BlockId id = table.back();
    table.pop_back();
    Release(id);
    Block& b = blocks_[static_cast<size_t>(id)];
    if (b.ref_count == 0 && !b.hash) {  // holds nothing worth keeping: the next one taken, before a cached block
      free_.splice(free_.begin(), free_, b.free_pos);
      b.free_pos = free_.begin();
    }
  }
}

}  // namespace tpserve

// The paged-KV block manager: the only owner of KV block allocation (docs/architecture.md, "KV cache").
//
// Every worker holds num_blocks blocks of block_size tokens per layer; the block
// manager decides which block each token of each sequence goes to. A sequence's
// block table lists its blocks in order: token position p lives in
// table[p / block_size] at offset p % block_size (slot = block * block_size + offset).
//
// Prefix caching: when a block is full, its hash chains the previous block's
// hash with its token ids and the block is registered under that hash. A later
// sequence whose prompt starts with the same tokens reuses the registered blocks
// (reference counted) and computes only the uncached suffix. A hash hit is
// confirmed against the stored parent hash and token ids, so a collision can
// never hand out the wrong K/V. Blocks whose reference count drops to zero keep
// their hash and go to the back of the free queue; allocation takes from the
// front (least recently freed first), evicting the hash then.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace tpserve {

using BlockId = int32_t;

// A sequence's prefix-cache hashes and how many of its full blocks are
// registered (kept by the caller per sequence). The hashes are computed once:
// the prompt's with the request (BlockManager::ExtendBlockHashes, before the
// data-parallel router reads them), the outputs' as their blocks fill; they
// depend on the tokens alone, so they outlive a preemption.
struct BlockHashChain {
  int64_t blocks = 0;            // leading full blocks registered (CommitFullBlocks)
  std::vector<uint64_t> hashes;  // [full blocks hashed so far] hashes[i]: block i's chained hash
};

// A copy-on-write (PrepareWrite): entry `index` of a sequence's block table
// was `src`, which other sequences share; it is now `dst`, a copy the
// workers make (every layer's K and V of the block) before the step's forward.
struct BlockCopy {
  int64_t index = 0;
  BlockId src = -1;
  BlockId dst = -1;
};

struct BlockManagerStats {
  int64_t num_blocks = 0;
  int64_t free_blocks = 0;        // allocatable now (includes cached blocks with no users)
  int64_t cached_blocks = 0;      // blocks holding a registered hash (in use or free)
  int64_t prefix_queries = 0;     // full prompt blocks looked up
  int64_t prefix_hits = 0;        // of those, found in the cache
  double prefix_hit_rate() const {
    return prefix_queries == 0 ? 0.0 : static_cast<double>(prefix_hits) / prefix_queries;
  }
};

// Told of the prefix cache's changes (the KV events routers read:
// coordinator/kv_events.h). Called inside BlockManager's methods, on the thread
// that calls them; must not call back into the BlockManager.
class PrefixCacheObserver {
 public:
  virtual ~PrefixCacheObserver() = default;
  // `hash` now names a block holding `tokens` after the block `parent_hash`
  // (0: the first block of a prompt).
  virtual void OnBlockStored(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens) = 0;
  // `hash` left the cache (its block was taken for reuse).
  virtual void OnBlockRemoved(uint64_t hash) = 0;
};

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int32_t block_size, bool enable_prefix_caching = true);

  int32_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_.size()); }
  BlockManagerStats stats() const;

  // Blocks of `block_size` tokens needed to hold `num_tokens` tokens.
  static int64_t BlocksFor(int64_t num_tokens, int32_t block_size) {
    return (num_tokens + block_size - 1) / block_size;
  }
  int64_t BlocksFor(int64_t num_tokens) const { return BlocksFor(num_tokens, block_size_); }
  // The prefix cache's hash of a full block of `tokens` after the block whose
  // hash is `parent` (0 for a prompt's first block): the tokens digested in
  // four independent lanes, the parent mixed in last (docs/architecture.md,
  // "Prefix cache"). Published in KV events; not stable across versions.
  static uint64_t HashBlock(uint64_t parent, std::span<const int32_t> tokens);
  // Appends to `hashes` (the chained hashes of `tokens`' first hashes.size()
  // full blocks) those of its next full blocks, up to `max_blocks` in all: the
  // one place a sequence's chain is computed. Once per request, for the
  // data-parallel router (coordinator/dp_router.h) and the group's block
  // manager alike (PreparedRequest::block_hashes, Scheduler::Add).
  static void ExtendBlockHashes(std::span<const int32_t> tokens, int32_t block_size, std::vector<uint64_t>& hashes,
                                int64_t max_blocks = INT64_MAX);

  // How many leading tokens of `prompt` are in cached full blocks (always leaves
  // at least one token to compute, so the last prompt token produces logits).
  // Does not change any state. `hashes`: the chain of the prompt's leading
  // blocks when known (BlockHashChain::hashes); the blocks past it are hashed here.
  int64_t CachedPrefixTokens(std::span<const int32_t> prompt, std::span<const uint64_t> hashes = {}) const;

  // Allocates blocks for a new sequence's first `num_tokens` tokens of `tokens`,
  // reusing cached prefix blocks (none with read_cache false: a sequence that
  // needs every prompt position's logits, Scheduler::Add). Returns the number
  // of tokens whose K/V is already cached (a multiple of block_size), or
  // nullopt if there are not enough free blocks (then nothing changed).
  // `table` must be empty; `hashes` as for CachedPrefixTokens.
  std::optional<int64_t> AllocatePrompt(std::span<const int32_t> tokens, int64_t num_tokens,
                                        std::vector<BlockId>& table, bool read_cache = true,
                                        std::span<const uint64_t> hashes = {});

  // Grows `table` so it holds `num_tokens` tokens; false (nothing changed) when
  // there are not enough free blocks.
  bool Grow(std::vector<BlockId>& table, int64_t num_tokens);

  // Appends `blocks` (held by another sequence) to `table`, shared: each
  // block's reference count goes up, and a write to one of them copies it
  // first (PrepareWrite). Parallel sampling: a request's other choices start
  // from its first choice's prompt blocks.
  void Share(std::span<const BlockId> blocks, std::vector<BlockId>& table);

  // Makes `table` ready for its sequence to write positions [from, to): grows
  // it to hold `to` tokens (as Grow) and replaces each block in that range
  // that other sequences share (reference count > 1) by a fresh block, whose
  // copy it appends to `copies` (copy-on-write). The last holder of a shared
  // block writes it in place. False (nothing changed) when there are not
  // enough free blocks for both.
  bool PrepareWrite(std::vector<BlockId>& table, int64_t from, int64_t to, std::vector<BlockCopy>& copies);

  // Sequences holding `id` (0: free). For tests and checks.
  int32_t ref_count(BlockId id) const { return blocks_[static_cast<size_t>(id)].ref_count; }

  // Registers the full blocks of a sequence whose first `num_computed` tokens
  // (`tokens[0, num_computed)`) now have their K/V computed, so later sequences
  // can share them. `chain` (per sequence; empty or holding the prompt's
  // hashes at the start) advances past them, its hashes extended as far.
  void CommitFullBlocks(std::span<const int32_t> tokens, int64_t num_computed,
                        std::span<const BlockId> table, BlockHashChain& chain);

  // Releases a finished, aborted or preempted sequence's blocks.
  void Free(std::vector<BlockId>& table);
  // Releases the entries of `table` past its first `keep` (speculative
  // decoding: the blocks only rejected proposals used; never hashed, since
  // only blocks full of computed accepted tokens are committed). An unhashed
  // block freed so goes to the front of the free queue: the next allocation
  // takes it rather than evicting a cached block.
  void Truncate(std::vector<BlockId>& table, size_t keep);

  // Tells `observer` (null: nobody; must outlive this) of every hash registered or evicted from now on.
  void set_observer(PrefixCacheObserver* observer) { observer_ = observer; }
  // The hashes registered in the prefix cache now, unordered. For tests and checks.
  std::vector<uint64_t> CachedHashes() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    std::optional<uint64_t> hash;  // set while registered in the prefix cache
    uint64_t parent_hash = 0;
    std::vector<int32_t> tokens;   // the block's token ids, to confirm a hash hit
    std::list<BlockId>::iterator free_pos;  // valid while ref_count == 0
  };

  // The registered block holding exactly these tokens after `parent`, if any.
  std::optional<BlockId> Lookup(uint64_t parent, uint64_t hash, std::span<const int32_t> tokens) const;
  // Leading full blocks of `prompt` (at most max_blocks) in the cache: their
  // ids in `hits` when given. `hashes` as for CachedPrefixTokens.
  int64_t CachedPrefixBlocks(std::span<const int32_t> prompt, std::span<const uint64_t> hashes, int64_t max_blocks,
                             std::vector<BlockId>* hits) const;
  BlockId TakeFree();           // front of the free queue; evicts its hash
  void Acquire(BlockId id);     // ref++ (removes from the free queue at 0)
  void Release(BlockId id);     // ref-- (to the back of the free queue at 0)

  int32_t block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  std::list<BlockId> free_;  // front: next to allocate (least recently freed)
  std::unordered_map<uint64_t, BlockId> cached_;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
  PrefixCacheObserver* observer_ = nullptr;
};

}  // namespace tpserve

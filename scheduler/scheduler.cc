#include "scheduler/scheduler.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace tpserve {

Scheduler::Scheduler(BlockManager& blocks, SchedulerConfig config)
    : blocks_(blocks), config_(config) {}

absl::Status Scheduler::Add(uint64_t id, std::vector<int32_t> prompt, uint64_t group,
                            std::span<const uint64_t> forks, bool read_prefix_cache,
                            std::vector<uint64_t> block_hashes) {
  if (static_cast<int32_t>(waiting_.size()) >= config_.max_queue) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the admission queue is full (", config_.max_queue,
        " requests waiting; --max-queue); retry later"));
  }
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  const int64_t prompt_blocks = std::ssize(prompt) / blocks_.block_size();
  if (!block_hashes.empty() && std::ssize(block_hashes) != prompt_blocks) {
    return absl::InvalidArgumentError(absl::StrCat("block_hashes: ", block_hashes.size(), " hashes for a prompt of ",
                                                   prompt_blocks, " full blocks; give one per full block or none"));
  }
  if (blocks_.prefix_caching()) {  // none given: hashed here, once
    BlockManager::ExtendBlockHashes(prompt, blocks_.block_size(), block_hashes);
  }
  if (1 + std::ssize(forks) > config_.max_num_seqs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n: ", 1 + forks.size(), " choices run together but the server runs at most ", config_.max_num_seqs,
        " sequences at once (--max-num-seqs); ask for fewer"));
  }
  for (size_t i = 0; i <= forks.size(); ++i) {
    const uint64_t each = i == 0 ? id : forks[i - 1];
    if (sequences_.contains(each) || (i > 0 && (each == id || std::count(forks.begin(), forks.end(), each) > 1))) {
      return absl::AlreadyExistsError(absl::StrCat("sequence ", each, " is already scheduled"));
    }
  }
  auto make = [&](uint64_t each, std::vector<int32_t> tokens) {
    auto seq = std::make_unique<Sequence>();
    seq->id = each;
    seq->num_prompt_tokens = static_cast<int64_t>(tokens.size());
    seq->tokens = std::move(tokens);
    seq->group = group;
    seq->read_prefix_cache = read_prefix_cache;
    seq->hash_chain.hashes = block_hashes;
    Sequence* raw = seq.get();
    sequences_.emplace(each, std::move(seq));
    return raw;
  };
  Sequence* first = make(id, std::move(prompt));
  for (uint64_t fork : forks) {
    Sequence* seq = make(fork, first->tokens);
    seq->fork_of = first;
    first->forks.push_back(seq);
  }
  waiting_.push_back(first);
  return absl::OkStatus();
}

const Sequence* Scheduler::Find(uint64_t id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : it->second.get();
}

void Scheduler::ReleaseBlocks(Sequence* seq) {
  blocks_.Free(seq->block_table);
  seq->hash_chain.blocks = 0;  // its hashes stay: they follow from the tokens alone
  seq->num_computed_tokens = 0;
  if (seq->on_workers) dropped_.push_back(seq->id);
  seq->on_workers = false;
  seq->blocks_on_workers = 0;
  seq->workers_hold_next_input = false;
  seq->proposals_asked = 0;
  seq->num_inflight_tokens = 0;
  seq->workers_table_longer = false;
}

void Scheduler::Preempt(Sequence* seq) {
  if (!seq->forks.empty()) {
    // Its prompt is scheduled: the forks take their share of it first.
    if (seq->num_computed_tokens >= seq->num_prompt_tokens) {
      Fork(seq);
    } else {
      reserved_forks_ -= static_cast<int32_t>(seq->forks.size());  // reserved again at readmission
    }
  }
  if (seq->on_workers) preempted_.push_back(seq->id);
  ReleaseBlocks(seq);
  seq->status = SequenceStatus::kWaiting;
  ++seq->num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(seq);
}

void Scheduler::Fork(Sequence* parent) {
  const auto prompt_blocks = static_cast<size_t>(blocks_.BlocksFor(parent->num_prompt_tokens));
  const std::span<const BlockId> shared(parent->block_table.data(), prompt_blocks);
  for (Sequence* child : parent->forks) {
    blocks_.Share(shared, child->block_table);
    // Its own last prompt token gives its first logits (a decode-sized row),
    // written to its copy of the shared block that holds it.
    child->num_computed_tokens = parent->num_prompt_tokens - 1;
    child->num_cached_tokens = parent->num_cached_tokens;
    child->admitted_before = true;
    child->fork_of = nullptr;
    child->status = SequenceStatus::kRunning;
    running_.push_back(child);
  }
  reserved_forks_ -= static_cast<int32_t>(parent->forks.size());
  parent->forks.clear();
}

void Scheduler::PromoteFork(Sequence* parent, bool was_running) {
  if (was_running) reserved_forks_ -= static_cast<int32_t>(parent->forks.size());
  Sequence* next = parent->forks.front();
  next->fork_of = nullptr;
  next->forks.assign(parent->forks.begin() + 1, parent->forks.end());
  for (Sequence* f : next->forks) f->fork_of = next;
  parent->forks.clear();
  if (was_running) {
    waiting_.push_front(next);
  } else {
    *std::find(waiting_.begin(), waiting_.end(), parent) = next;
    waiting_.push_back(parent);  // Finish erases it from the queue next
  }
}

ScheduledSequence Scheduler::Plan(Sequence* seq, int64_t num_tokens, std::vector<BlockCopy> copies,
                                  int32_t draft_slots) {
  ScheduledSequence s;
  s.copies = std::move(copies);
  s.seq = seq;
  s.id = seq->id;
  s.start = seq->num_computed_tokens;
  s.num_tokens = num_tokens;
  s.is_new = !seq->on_workers;
  if (!s.is_new && seq->workers_table_longer) s.keep_blocks = static_cast<int64_t>(seq->blocks_on_workers);
  seq->workers_table_longer = false;
  const size_t known = s.is_new ? 0 : seq->blocks_on_workers;
  s.new_blocks.assign(seq->block_table.begin() + static_cast<ptrdiff_t>(known),
                      seq->block_table.end());
  s.sample = s.start + num_tokens - draft_slots == seq->length();
  s.draft_slots = draft_slots;
  s.decode_sampled = !s.is_new && seq->workers_hold_next_input;
  s.preemptions = seq->num_preemptions;
  seq->on_workers = true;
  seq->blocks_on_workers = seq->block_table.size();
  seq->workers_hold_next_input = s.sample;
  seq->num_computed_tokens += num_tokens;
  seq->num_inflight_tokens += num_tokens;
  s.pipelined = draft_slots > 0 && seq->num_pending_tokens > 0;  // counted before this step's own
  if (s.sample) {
    ++seq->num_pending_tokens;
    seq->num_pending_slots += draft_slots;
  }
  const bool holds = drafter_ != nullptr && drafter_->Holds(seq->id);
  s.speculate = s.is_new && holds;
  seq->proposals_asked = s.sample && holds ? std::max(drafter_->Proposals(*seq, num_running()), 0) : 0;
  s.num_proposals = seq->proposals_asked;
  return s;
}

std::deque<Sequence*>::iterator Scheduler::NextToAdmit(const absl::flat_hash_map<uint64_t, int32_t>& running) {
  auto count = [&](const Sequence* seq) {
    auto it = running.find(seq->group);
    return it == running.end() ? 0 : it->second;
  };
  // A preempted sequence was admitted before: it keeps its place at the front.
  // A front whose group runs nothing cannot be beaten either (the usual case).
  if (waiting_.front()->admitted_before || count(waiting_.front()) == 0) return waiting_.begin();
  auto best = waiting_.begin();
  int32_t best_count = count(*best);
  for (auto it = std::next(best); it != waiting_.end() && best_count > 0; ++it) {
    const int32_t c = count(*it);
    if (c < best_count) {
      best = it;
      best_count = c;
    }
  }
  return best;
}

bool Scheduler::MayAdmit(bool preempted, int64_t budget) const {
  return !preempted && !waiting_.empty() && budget > 0 &&
         static_cast<int32_t>(running_.size()) + reserved_forks_ < config_.max_num_seqs;
}

ScheduledStep Scheduler::Schedule() {
  ScheduledStep step;
  std::vector<ScheduledSequence> prefills, decodes;
  auto add = [&](ScheduledSequence s) {
    step.num_tokens += s.num_tokens;
    (s.num_tokens > 1 ? prefills : decodes).push_back(std::move(s));
  };
  int64_t budget = config_.max_num_batched_tokens;
  bool preempted = false;

  // 0. Forks whose first choice scheduled its whole prompt in an earlier step
  //    (the workers run steps in order: its K/V is there before they copy).
  for (size_t i = 0, n = running_.size(); i < n; ++i) {
    Sequence* seq = running_[i];
    if (!seq->forks.empty() && seq->num_computed_tokens >= seq->num_prompt_tokens) Fork(seq);
  }

  // 1. Running sequences: decodes and the next chunks of partial prefills.
  draft_rows_left_ = config_.max_num_draft_tokens;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int64_t remaining = seq->length() - seq->num_computed_tokens;
    // Nothing to compute until the service appends a token.
    if (remaining <= 0) {
      ++i;
      continue;
    }
    int32_t slots = DraftSlots(seq, budget);
    int64_t n = std::min(remaining, budget) + slots;
    bool scheduled = true;
    std::vector<BlockCopy> copies;
    if (slots > 0 && !blocks_.PrepareWrite(seq->block_table, seq->num_computed_tokens,
                                           seq->num_computed_tokens + n, copies)) {
      draft_rows_left_ += slots;  // not enough blocks: a plain decode
      slots = 0;
      n = 1;
    }
    while (slots == 0 && !blocks_.PrepareWrite(seq->block_table, seq->num_computed_tokens, seq->num_computed_tokens + n,
                                               copies)) {
      Sequence* victim = running_.back();  // the most recently admitted
      running_.pop_back();
      Preempt(victim);
      preempted = true;
      if (victim == seq) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;
    add(Plan(seq, n, std::move(copies), slots));
    budget -= n;
    ++i;
  }

  // 2. Waiting sequences, first come first served (none after a preemption:
  //    the blocks just freed go to the running sequences first).
  absl::flat_hash_map<uint64_t, int32_t> running_by_group;  // counted only when one may be admitted
  if (MayAdmit(preempted, budget)) {
    for (const Sequence* seq : running_) ++running_by_group[seq->group];
  }
  while (MayAdmit(preempted, budget)) {
    const auto next = NextToAdmit(running_by_group);
    Sequence* seq = *next;
    // Preempted while a step that samples it was in flight: its recompute
    // needs that token. Its result comes before the next Schedule.
    if (seq->num_pending_tokens > 0) break;
    // A request's choices are admitted together (its forks' slots reserved).
    if (static_cast<int32_t>(running_.size()) + reserved_forks_ + SlotsOf(seq) > config_.max_num_seqs) break;
    const int64_t total = static_cast<int64_t>(seq->tokens.size());
    if (blocks_.BlocksFor(total) > blocks_.num_blocks()) {
      waiting_.erase(next);  // can never fit, even alone
      step.unservable.push_back(seq->id);
      for (const Sequence* f : seq->forks) step.unservable.push_back(f->id);
      continue;
    }
    const int64_t cached = seq->read_prefix_cache ? blocks_.CachedPrefixTokens(seq->tokens, seq->hash_chain.hashes) : 0;
    const int64_t n = std::min(total - cached, budget);
    auto got = blocks_.AllocatePrompt(seq->tokens, cached + n, seq->block_table, seq->read_prefix_cache,
                                      seq->hash_chain.hashes);
    if (!got) break;  // wait for blocks; later arrivals wait behind it
    seq->num_computed_tokens = *got;
    if (!seq->admitted_before) {
      seq->num_cached_tokens = *got;
      seq->admitted_before = true;
    }
    seq->status = SequenceStatus::kRunning;
    waiting_.erase(next);
    running_.push_back(seq);
    reserved_forks_ += static_cast<int32_t>(seq->forks.size());
    running_by_group[seq->group] += SlotsOf(seq);
    add(Plan(seq, n, {}));
    budget -= n;
  }
  for (uint64_t id : step.unservable) sequences_.erase(id);

  step.num_prefills = static_cast<int32_t>(prefills.size());
  step.sequences = std::move(prefills);
  std::move(decodes.begin(), decodes.end(), std::back_inserter(step.sequences));
  step.dropped = std::move(dropped_);
  dropped_.clear();
  step.preempted = std::move(preempted_);
  preempted_.clear();
  return step;
}

int32_t Scheduler::DraftSlots(Sequence* seq, int64_t budget) {
  const int64_t c = seq->num_computed_tokens;
  // A decode of the token its last step samples, which the workers hold
  // (decode_sampled), with proposals asked for it; that step may be in flight.
  if (drafter_ == nullptr || seq->proposals_asked <= 0 || !seq->on_workers || !seq->workers_hold_next_input ||
      seq->length() - c != 1 || c < seq->num_prompt_tokens) {
    return 0;
  }
  int64_t k = std::min<int64_t>({seq->proposals_asked, draft_rows_left_, budget - 1});
  // The blocks the slots need beyond the decode's, one spare for a copy-on-write.
  const int64_t free = blocks_.num_free_blocks() - 1;
  while (k > 0 && blocks_.BlocksFor(c + 1 + k) - std::ssize(seq->block_table) > free) --k;
  if (k <= 0) return 0;
  draft_rows_left_ -= static_cast<int32_t>(k);
  return static_cast<int32_t>(k);
}

void Scheduler::RewindRejected(Sequence* seq, const ScheduledSequence& s, int32_t accepted) {
  seq->num_computed_tokens -= s.draft_slots - accepted;
  const auto keep = static_cast<size_t>(blocks_.BlocksFor(seq->num_computed_tokens));
  if (keep >= seq->block_table.size()) return;
  blocks_.Truncate(seq->block_table, keep);
  if (seq->blocks_on_workers > keep) {
    seq->blocks_on_workers = keep;
    seq->workers_table_longer = true;  // the next plan cuts the workers' table
  }
}

void Scheduler::OnStepDone(const ScheduledStep& step,
                           std::span<const std::pair<uint64_t, int32_t>> sampled) {
  // The tokens first: a sequence that verified drafts has a + 1 in a row.
  const bool verified = std::any_of(step.sequences.begin(), step.sequences.end(),
                                    [](const ScheduledSequence& s) { return s.draft_slots > 0; });
  absl::flat_hash_map<uint64_t, int32_t> got;  // tokens per sequence, when some verified drafts
  for (size_t i = 0; i < sampled.size(); ++i) {
    const auto& [id, token] = sampled[i];
    if (verified) ++got[id];
    auto it = sequences_.find(id);
    if (it == sequences_.end()) continue;
    Sequence* seq = it->second.get();
    seq->tokens.push_back(token);
    const bool first_of_run = i == 0 || sampled[i - 1].first != id;
    if (first_of_run && seq->num_pending_tokens > 0) --seq->num_pending_tokens;
  }
  for (const ScheduledSequence& s : step.sequences) {
    auto it = sequences_.find(s.id);
    if (it == sequences_.end()) continue;  // finished since it was scheduled
    Sequence* seq = it->second.get();
    if (s.sample) seq->num_pending_slots -= s.draft_slots;  // its tokens are in
    if (seq->num_preemptions != s.preemptions) continue;  // its blocks were freed since
    seq->num_inflight_tokens -= s.num_tokens;
    if (s.draft_slots > 0) {
      RewindRejected(seq, s, static_cast<int32_t>(std::clamp<int64_t>(got[s.id] - 1, 0, s.draft_slots)));
    }
    // Every input of the steps back is known by now: a decode's input was the
    // previous step's sample, whose result came first. Only blocks full of
    // positions known computed (accepted tokens) join the prefix cache.
    const int64_t computed = std::min(seq->num_known_computed(), static_cast<int64_t>(seq->tokens.size()));
    blocks_.CommitFullBlocks(seq->tokens, computed, seq->block_table, seq->hash_chain);
  }
}

bool Scheduler::Finish(uint64_t id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return false;
  Sequence* seq = it->second.get();
  if (seq->fork_of != nullptr) {  // a fork still waiting: it holds nothing yet
    Sequence* parent = seq->fork_of;
    parent->forks.erase(std::find(parent->forks.begin(), parent->forks.end(), seq));
    if (parent->status == SequenceStatus::kRunning) --reserved_forks_;
    sequences_.erase(it);
    return true;
  }
  const bool was_running = seq->status == SequenceStatus::kRunning;
  if (was_running) running_.erase(std::find(running_.begin(), running_.end(), seq));
  if (!seq->forks.empty()) {
    if (was_running && seq->num_computed_tokens >= seq->num_prompt_tokens) {
      Fork(seq);
    } else {
      PromoteFork(seq, was_running);
    }
  }
  if (!was_running) waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
  // Preempted since the last step and ended now: it does not come back.
  preempted_.erase(std::remove(preempted_.begin(), preempted_.end(), id), preempted_.end());
  ReleaseBlocks(seq);
  sequences_.erase(it);
  return true;
}

int64_t Scheduler::num_tokens_in_flight() const {
  int64_t n = 0;
  for (const Sequence* seq : running_) n += static_cast<int64_t>(seq->tokens.size());
  for (const Sequence* seq : waiting_) n += static_cast<int64_t>(seq->tokens.size());
  return n;
}

}  // namespace tpserve

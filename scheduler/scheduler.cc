#include "scheduler/scheduler.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace tpserve {

Scheduler::Scheduler(BlockManager& blocks, SchedulerConfig config)
    : blocks_(blocks), config_(config) {}

absl::Status Scheduler::Add(uint64_t id, std::vector<int32_t> prompt, uint64_t group) {
  if (static_cast<int32_t>(waiting_.size()) >= config_.max_queue) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the admission queue is full (", config_.max_queue,
        " requests waiting; --max-queue); retry later"));
  }
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  if (sequences_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " is already scheduled"));
  }
  auto seq = std::make_unique<Sequence>();
  seq->id = id;
  seq->num_prompt_tokens = static_cast<int64_t>(prompt.size());
  seq->tokens = std::move(prompt);
  seq->group = group;
  waiting_.push_back(seq.get());
  sequences_.emplace(id, std::move(seq));
  return absl::OkStatus();
}

const Sequence* Scheduler::Find(uint64_t id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : it->second.get();
}

void Scheduler::ReleaseBlocks(Sequence* seq) {
  blocks_.Free(seq->block_table);
  seq->hash_chain = BlockHashChain{};
  seq->num_computed_tokens = 0;
  if (seq->on_workers) dropped_.push_back(seq->id);
  seq->on_workers = false;
  seq->blocks_on_workers = 0;
  seq->workers_hold_next_input = false;
}

void Scheduler::Preempt(Sequence* seq) {
  ReleaseBlocks(seq);
  seq->status = SequenceStatus::kWaiting;
  ++seq->num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(seq);
}

ScheduledSequence Scheduler::Plan(Sequence* seq, int64_t num_tokens) {
  ScheduledSequence s;
  s.seq = seq;
  s.id = seq->id;
  s.start = seq->num_computed_tokens;
  s.num_tokens = num_tokens;
  s.is_new = !seq->on_workers;
  const size_t known = s.is_new ? 0 : seq->blocks_on_workers;
  s.new_blocks.assign(seq->block_table.begin() + static_cast<ptrdiff_t>(known),
                      seq->block_table.end());
  s.sample = s.start + num_tokens == seq->length();
  s.decode_sampled = !s.is_new && seq->workers_hold_next_input;
  s.preemptions = seq->num_preemptions;
  seq->on_workers = true;
  seq->blocks_on_workers = seq->block_table.size();
  seq->workers_hold_next_input = s.sample;
  seq->num_computed_tokens += num_tokens;
  if (s.sample) ++seq->num_pending_tokens;
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
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs;
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

  // 1. Running sequences: decodes and the next chunks of partial prefills.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int64_t remaining = seq->length() - seq->num_computed_tokens;
    if (remaining <= 0) {  // nothing to compute until the service appends a token
      ++i;
      continue;
    }
    const int64_t n = std::min(remaining, budget);
    bool scheduled = true;
    while (!blocks_.Grow(seq->block_table, seq->num_computed_tokens + n)) {
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
    add(Plan(seq, n));
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
    const int64_t total = static_cast<int64_t>(seq->tokens.size());
    if (blocks_.BlocksFor(total) > blocks_.num_blocks()) {
      waiting_.erase(next);  // can never fit, even alone
      step.unservable.push_back(seq->id);
      continue;
    }
    const int64_t cached = blocks_.CachedPrefixTokens(seq->tokens);
    const int64_t n = std::min(total - cached, budget);
    auto got = blocks_.AllocatePrompt(seq->tokens, cached + n, seq->block_table);
    if (!got) break;  // wait for blocks; later arrivals wait behind it
    seq->num_computed_tokens = *got;
    if (!seq->admitted_before) {
      seq->num_cached_tokens = *got;
      seq->admitted_before = true;
    }
    seq->status = SequenceStatus::kRunning;
    waiting_.erase(next);
    running_.push_back(seq);
    ++running_by_group[seq->group];
    add(Plan(seq, n));
    budget -= n;
  }
  for (uint64_t id : step.unservable) sequences_.erase(id);

  step.num_prefills = static_cast<int32_t>(prefills.size());
  step.sequences = std::move(prefills);
  std::move(decodes.begin(), decodes.end(), std::back_inserter(step.sequences));
  step.dropped = std::move(dropped_);
  dropped_.clear();
  return step;
}

void Scheduler::OnStepDone(const ScheduledStep& step,
                           std::span<const std::pair<uint64_t, int32_t>> sampled) {
  for (const ScheduledSequence& s : step.sequences) {
    auto it = sequences_.find(s.id);
    if (it == sequences_.end()) continue;  // finished since it was scheduled
    Sequence* seq = it->second.get();
    if (seq->num_preemptions != s.preemptions) continue;  // its blocks were freed since
    // Every input of the step is known by now: a decode's input was the
    // previous step's sample, whose result came first.
    const int64_t computed = std::min(s.start + s.num_tokens, static_cast<int64_t>(seq->tokens.size()));
    blocks_.CommitFullBlocks(seq->tokens, computed, seq->block_table, seq->hash_chain);
  }
  for (const auto& [id, token] : sampled) {
    auto it = sequences_.find(id);
    if (it == sequences_.end()) continue;
    Sequence* seq = it->second.get();
    seq->tokens.push_back(token);
    if (seq->num_pending_tokens > 0) --seq->num_pending_tokens;
  }
}

bool Scheduler::Finish(uint64_t id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return false;
  Sequence* seq = it->second.get();
  if (seq->status == SequenceStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
  }
  ReleaseBlocks(seq);
  sequences_.erase(it);
  return true;
}

}  // namespace tpserve

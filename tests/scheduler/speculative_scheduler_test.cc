// The scheduler with a Drafter (speculative decoding, scheduler.h): over
// random prompts with shared prefixes, chunked prefill and a pool small
// enough to preempt, in lock-step and with one step in flight ahead (where a
// speculating sequence is pipelined like any other: its next step, with draft
// slots, planned on the worst case of the step in flight), a run with
// proposals gives every sequence the output of a run without them; rejected
// proposals leave no trace (every table holds exactly the blocks of its
// computed tokens, and of the steps in flight at most, after each step; the
// prefix cache ends with the same blocks; every block is free at the end);
// the workers' tables, kept from the plans as StepRunner keeps them, equal
// the coordinator's for every step, and every position a step writes lies in
// a block that no other sequence held when the step was planned (nothing
// freed that a step in flight writes); and proposals were accepted, so the
// comparison is not vacuous.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <random>
#include <set>

#include "scheduler/scheduler.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {

// The model: the next token is a function of every token before it.
int32_t NextToken(std::span<const int32_t> context) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : context) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return static_cast<int32_t>(h % 7);  // a small vocabulary: outputs repeat
}

// Every third sequence never speculates; the others ask rank 0 for up to 4
// proposals whenever a step samples them, never past max_tokens.
class OracleDrafter final : public Drafter {
 public:
  explicit OracleDrafter(int64_t max_tokens) : max_tokens_(max_tokens) {}
  bool Holds(uint64_t id) const override { return id % 3 != 2; }
  int32_t Proposals(const Sequence& seq, int32_t) override {
    const int64_t room = seq.num_prompt_tokens + max_tokens_ - seq.length() - 1;
    return static_cast<int32_t>(std::clamp<int64_t>(room, 0, 4));
  }

 private:
  int64_t max_tokens_;
};

// Rank 0's proposers: after a step samples a sequence that asked, the true
// continuation with each token wrong with probability p.
struct Rank0 {
  Rank0(uint64_t seed, double p) : rng(seed), p(p) {}
  std::vector<int32_t> Propose(std::vector<int32_t> context, int32_t n) {
    std::vector<int32_t> out;
    for (int32_t i = 0; i < n; ++i) {
      int32_t t = NextToken(context);
      if (std::bernoulli_distribution(p)(rng)) t = (t + 1) % 7;
      out.push_back(t);
      context.push_back(t);
    }
    return out;
  }
  std::mt19937_64 rng;
  double p;
  std::map<uint64_t, std::vector<int32_t>> drafts;  // for each sequence's next step
  int64_t proposed = 0, accepted = 0;
};

// The workers, as StepRunner keeps them: each sequence's block table and
// the positions computed, applied from each step's plan in order.
struct Workers {
  struct Held {
    std::vector<BlockId> table;
    int64_t computed = 0;
  };
  std::map<uint64_t, Held> seqs;
};

// A step with the tables of every sequence when it was planned.
struct Planned {
  ScheduledStep step;
  std::map<uint64_t, std::vector<BlockId>> tables;
};

// Applies a step's plan to the workers' tables (drops, keep_blocks, new
// blocks, copies) and checks each equals the coordinator's when it planned
// the step.
void ApplyPlan(const Planned& p, Workers& w) {
  for (uint64_t id : p.step.dropped) w.seqs.erase(id);
  for (const ScheduledSequence& s : p.step.sequences) {
    Workers::Held& h = w.seqs[s.id];
    if (s.is_new) {
      h = Workers::Held{.table = s.new_blocks, .computed = s.start};
    } else {
      if (s.keep_blocks >= 0) {
        EXPECT_LE(s.keep_blocks, std::ssize(h.table)) << "sequence " << s.id;
        EXPECT_GE(s.keep_blocks * 4, h.computed) << "sequence " << s.id << ": keep_blocks drops computed positions";
        h.table.resize(static_cast<size_t>(s.keep_blocks));
      }
      const size_t known = h.table.size();
      h.table.insert(h.table.end(), s.new_blocks.begin(), s.new_blocks.end());
      for (const BlockCopy& c : s.copies) {
        if (static_cast<size_t>(c.index) < known) h.table[static_cast<size_t>(c.index)] = c.dst;
      }
    }
    EXPECT_EQ(h.table, p.tables.at(s.id)) << "sequence " << s.id << ": the workers' table is not the coordinator's";
  }
}

// The workers' answer to a step once its inputs are known (the steps before
// it applied, Workers): one token per sampled sequence, and for one with
// draft slots the greedy verification of the proposals rank 0 made (at most
// the slots): a + 1; then rank 0's proposals for the next step where the plan
// asked. Every position a sequence writes lies in its table, in a block no
// other sequence held when the step was planned.
std::vector<std::pair<uint64_t, int32_t>> Answer(const Scheduler& sched, const Planned& p, Workers& w, Rank0* rank0) {
  ApplyPlan(p, w);
  std::vector<std::pair<uint64_t, int32_t>> sampled;
  for (const ScheduledSequence& s : p.step.sequences) {
    Workers::Held& h = w.seqs.at(s.id);
    std::vector<int32_t> drafts;
    if (s.draft_slots > 0 && rank0 != nullptr) {
      drafts = rank0->drafts[s.id];
      drafts.resize(std::min(drafts.size(), static_cast<size_t>(s.draft_slots)));
    }
    const int64_t input = s.num_tokens - s.draft_slots, end = h.computed + input;
    const int64_t writes = input + std::ssize(drafts);
    EXPECT_LE(BlockManager::BlocksFor(h.computed + writes, 4), std::ssize(h.table)) << "sequence " << s.id;
    for (int64_t b = h.computed / 4; b < BlockManager::BlocksFor(h.computed + writes, 4); ++b) {
      const BlockId block = h.table[static_cast<size_t>(std::min<int64_t>(b, std::ssize(h.table) - 1))];
      for (const auto& [other, table] : p.tables) {
        if (other == s.id) continue;
        EXPECT_EQ(std::count(table.begin(), table.end(), block), 0)
            << "sequence " << s.id << " writes block " << block << ", which sequence " << other << " held";
      }
    }
    h.computed = end;
    const Sequence* seq = sched.Find(s.id);
    if (!s.sample || seq == nullptr) continue;  // finished since: its tokens are dropped
    std::vector<int32_t> context(seq->tokens.begin(), seq->tokens.begin() + end);
    if (rank0 != nullptr) rank0->proposed += std::ssize(drafts);
    for (size_t i = 0; i <= drafts.size(); ++i) {
      const int32_t target = NextToken(context);
      sampled.emplace_back(s.id, target);
      context.push_back(target);
      if (i == drafts.size() || target != drafts[i]) break;
      ++rank0->accepted;
      ++h.computed;
    }
    if (rank0 != nullptr) rank0->drafts[s.id] = rank0->Propose(context, s.num_proposals);
  }
  return sampled;
}

struct Outcome {
  std::map<uint64_t, std::vector<int32_t>> outputs;
  std::set<uint64_t> cached;  // the prefix cache's hashes at the end
  int64_t preemptions = 0;
  int64_t pipelined = 0;  // steps with draft slots planned while a step sampling the same sequence was in flight
};

// Generates max_tokens for every prompt; `depth` steps in flight (1: lock-step).
Outcome Generate(const std::vector<std::vector<int32_t>>& prompts, int64_t num_blocks, int depth, Drafter* drafter,
                 Rank0* rank0, int64_t max_tokens) {
  BlockManager blocks(num_blocks, 4);
  Scheduler sched(blocks, {.max_num_batched_tokens = 24, .max_num_seqs = 8, .max_queue = 1024,
                           .max_num_draft_tokens = 12});
  sched.set_drafter(drafter);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_TRUE(sched.Add(i, prompts[i]).ok());
  Outcome run;
  std::deque<Planned> in_flight;
  Workers workers;
  auto receive = [&] {
    Planned planned = std::move(in_flight.front());
    in_flight.pop_front();
    const auto sampled = Answer(sched, planned, workers, rank0);
    sched.OnStepDone(planned.step, sampled);
    for (const auto& [id, token] : sampled) {
      const Sequence* seq = sched.Find(id);
      if (seq == nullptr || seq->num_output_tokens() < max_tokens) continue;
      EXPECT_EQ(seq->num_output_tokens(), max_tokens) << "a proposal went past max_tokens";
      run.outputs[id].assign(seq->output_tokens().begin(), seq->output_tokens().end());
      sched.Finish(id);
    }
    // Rejected proposals leave no trace: a table holds the blocks of its
    // computed tokens (and, with a step in flight, of that step's at most:
    // every slot of it kept).
    for (size_t i = 0; i < prompts.size(); ++i) {
      const Sequence* seq = sched.Find(i);
      if (seq == nullptr || seq->status != SequenceStatus::kRunning) continue;
      EXPECT_EQ(std::ssize(seq->block_table), blocks.BlocksFor(seq->num_computed_tokens)) << "sequence " << i;
    }
  };
  for (int iter = 0; iter < 100000 && !(sched.idle() && in_flight.empty()); ++iter) {
    ScheduledStep step = sched.Schedule();
    EXPECT_TRUE(step.unservable.empty());
    int64_t rows = 0;
    for (const ScheduledSequence& s : step.sequences) rows += s.draft_slots;
    EXPECT_LE(rows, 12);
    EXPECT_LE(step.num_tokens, 24);
    for (const ScheduledSequence& s : step.sequences) {
      // Its step in flight samples it too: this one was planned on its worst case.
      EXPECT_EQ(s.pipelined, s.draft_slots > 0 && s.seq->num_pending_tokens > 1) << "sequence " << s.id;
      if (s.pipelined) ++run.pipelined;
    }
    const bool sent = !step.empty();
    if (sent) {
      Planned planned{.step = std::move(step), .tables = {}};
      for (size_t i = 0; i < prompts.size(); ++i) {
        if (const Sequence* seq = sched.Find(i); seq != nullptr && !seq->block_table.empty()) {
          planned.tables[i] = seq->block_table;
        }
      }
      in_flight.push_back(std::move(planned));
    }
    if (!in_flight.empty() && (std::ssize(in_flight) == depth || !sent)) receive();
  }
  EXPECT_TRUE(sched.idle());
  EXPECT_EQ(blocks.num_free_blocks(), num_blocks) << "a block was not given back";
  const std::vector<uint64_t> hashes = blocks.CachedHashes();
  run.cached.insert(hashes.begin(), hashes.end());
  run.preemptions = sched.num_preemptions();
  return run;
}

struct Case {
  int depth;           // 1: lock-step, 2: one step in flight ahead
  int64_t num_blocks;  // 12: preemptions; 1024: no eviction
  double p;            // each proposed token wrong with probability p
};

class SpeculativeSchedulerTest : public ::testing::TestWithParam<Case> {};

TEST_P(SpeculativeSchedulerTest, ProposalsChangeNoOutputAndLeaveNoTrace) {
  const Case c = GetParam();
  const uint64_t seed = testing_util::TestSeed();
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> prefix(9);
  for (int32_t& t : prefix) t = static_cast<int32_t>(rng() % 7);
  for (int i = 0; i < 40; ++i) {  // lengths 1 to 30, some sharing a prefix (prefix-cache hits)
    std::vector<int32_t> p = i % 4 == 0 ? prefix : std::vector<int32_t>();
    for (int64_t n = 1 + static_cast<int64_t>(rng() % 21); n > 0; --n) p.push_back(static_cast<int32_t>(rng() % 7));
    prompts.push_back(std::move(p));
  }
  constexpr int64_t kMaxTokens = 13;
  const Outcome plain = Generate(prompts, c.num_blocks, c.depth, nullptr, nullptr, kMaxTokens);
  OracleDrafter drafter(kMaxTokens);
  Rank0 rank0(seed, c.p);
  const Outcome spec = Generate(prompts, c.num_blocks, c.depth, &drafter, &rank0, kMaxTokens);
  ASSERT_EQ(plain.outputs.size(), prompts.size()) << "seed " << seed;
  EXPECT_EQ(spec.outputs, plain.outputs) << "seed " << seed;
  // Without evictions (a pool holding every block of the run) the prefix
  // cache ends the same: only blocks full of accepted tokens were hashed. A
  // small pool evicts in another order (a draft's block is taken a step
  // before a plain run would take it), so there only the outputs compare.
  if (c.num_blocks > 12) {
    EXPECT_EQ(spec.cached, plain.cached) << "the prefix cache differs; seed " << seed;
  }
  EXPECT_GT(rank0.accepted, 0) << "no proposal was accepted: the comparison proves nothing";
  if (c.p > 0) {
    EXPECT_LT(rank0.accepted, rank0.proposed) << "no proposal was rejected";
  }
  if (c.num_blocks <= 12) {
    EXPECT_GT(spec.preemptions, 0) << "the small pool preempted nothing";
  }
  // One step ahead, a speculating sequence is pipelined like any other: its
  // steps with draft slots are planned while the step before is in flight.
  if (c.depth == 2) {
    EXPECT_GT(spec.pipelined, 0) << "no speculating step was planned one step ahead";
  } else {
    EXPECT_EQ(spec.pipelined, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, SpeculativeSchedulerTest,
                         ::testing::Values(Case{1, 1024, 0.0}, Case{1, 1024, 0.3}, Case{2, 1024, 0.3},
                                           Case{1, 12, 0.3}, Case{2, 12, 0.3}),
                         [](const auto& info) {
                           return std::string(info.param.depth == 1 ? "LockStep" : "Overlap") +
                                  (info.param.num_blocks <= 12 ? "TinyPool" : "") +
                                  (info.param.p > 0 ? "SomeWrong" : "AllRight");
                         });

}  // namespace
}  // namespace tpserve

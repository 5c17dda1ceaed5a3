#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>

namespace tpserve {
namespace {

std::vector<int32_t> Prompt(int n, int start) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// A stand-in for the model: the next token is a function of every token before it,
// so a wrong context (lost or duplicated tokens) changes the output.
int32_t NextToken(std::span<const int32_t> context) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : context) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return static_cast<int32_t>(h % 1000);
}

// Runs one step: checks the plan against the sequences and returns sampled tokens.
std::vector<std::pair<uint64_t, int32_t>> RunStep(Scheduler& sched, const ScheduledStep& step) {
  std::vector<std::pair<uint64_t, int32_t>> sampled;
  for (size_t i = 0; i < step.sequences.size(); ++i) {
    const ScheduledSequence& s = step.sequences[i];
    const Sequence& seq = *s.seq;
    EXPECT_EQ(i < static_cast<size_t>(step.num_prefills), s.num_tokens > 1);
    // Every token computed this step has a block.
    EXPECT_EQ(seq.num_computed_tokens, s.start + s.num_tokens);  // counted when scheduled
    EXPECT_GE(static_cast<int64_t>(seq.block_table.size()) * sched.blocks().block_size(),
              s.start + s.num_tokens);
    if (s.sample) {
      auto context = std::span<const int32_t>(seq.tokens).first(static_cast<size_t>(s.start + s.num_tokens));
      sampled.emplace_back(seq.id, NextToken(context));
    }
  }
  return sampled;
}

// Generates `max_tokens` for every prompt and returns the outputs by id.
std::map<uint64_t, std::vector<int32_t>> Generate(Scheduler& sched,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  int max_tokens, int* preemptions = nullptr) {
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_TRUE(sched.Add(i, prompts[i]).ok());
  std::map<uint64_t, std::vector<int32_t>> out;
  for (int iter = 0; iter < 100000 && !sched.idle(); ++iter) {
    ScheduledStep step = sched.Schedule();
    EXPECT_TRUE(step.unservable.empty());
    auto sampled = RunStep(sched, step);
    sched.OnStepDone(step, sampled);
    for (auto& s : step.sequences) {
      if (preemptions) *preemptions = std::max(*preemptions, s.seq->num_preemptions);
    }
    for (auto& [id, token] : sampled) {
      const Sequence* seq = sched.Find(id);
      if (seq->num_output_tokens() >= max_tokens) {
        out[id].assign(seq->output_tokens().begin(), seq->output_tokens().end());
        sched.Finish(id);
      }
    }
  }
  EXPECT_TRUE(sched.idle());
  return out;
}

TEST(Scheduler, PrefillThenDecode) {
  BlockManager bm(16, 4);
  Scheduler sched(bm, {.max_num_batched_tokens = 64});
  ASSERT_TRUE(sched.Add(7, Prompt(6, 1)).ok());
  ScheduledStep s1 = sched.Schedule();
  ASSERT_EQ(s1.sequences.size(), 1u);
  EXPECT_EQ(s1.num_prefills, 1);
  EXPECT_EQ(s1.sequences[0].num_tokens, 6);
  EXPECT_TRUE(s1.sequences[0].is_new);
  EXPECT_TRUE(s1.sequences[0].sample);
  EXPECT_EQ(s1.sequences[0].new_blocks.size(), 2u);
  sched.OnStepDone(s1, std::vector<std::pair<uint64_t, int32_t>>{{7, 42}});

  ScheduledStep s2 = sched.Schedule();
  ASSERT_EQ(s2.sequences.size(), 1u);
  EXPECT_EQ(s2.num_prefills, 0);
  EXPECT_EQ(s2.sequences[0].num_tokens, 1);
  EXPECT_FALSE(s2.sequences[0].is_new);
  EXPECT_TRUE(s2.sequences[0].new_blocks.empty());  // position 6 still fits block 1
  sched.OnStepDone(s2, std::vector<std::pair<uint64_t, int32_t>>{{7, 43}});
  sched.OnStepDone(sched.Schedule(), std::vector<std::pair<uint64_t, int32_t>>{{7, 44}});
  ScheduledStep s4 = sched.Schedule();  // position 8: a new block
  EXPECT_EQ(s4.sequences[0].new_blocks.size(), 1u);
}

// A request's block hashes, computed once before routing, are the ones the
// prefix cache registers (its group hashes nothing again); a count that does
// not match the prompt's full blocks is refused naming the field.
TEST(Scheduler, TakesTheRequestsBlockHashesAndRefusesAWrongCount) {
  BlockManager bm(16, 4);
  Scheduler sched(bm, {.max_num_batched_tokens = 64});
  const std::vector<int32_t> prompt = Prompt(10, 1);  // 2 full blocks
  std::vector<uint64_t> hashes;
  BlockManager::ExtendBlockHashes(prompt, 4, hashes);
  const absl::Status wrong = sched.Add(1, prompt, 0, {}, true, std::vector<uint64_t>(hashes.begin(), hashes.end() - 1));
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("block_hashes: 1 hashes for a prompt of 2 full blocks"), std::string::npos)
      << wrong.message();
  ASSERT_TRUE(sched.Add(2, prompt, 0, {}, true, hashes).ok());
  EXPECT_EQ(sched.Find(2)->hash_chain.hashes, hashes);
  ScheduledStep s1 = sched.Schedule();
  sched.OnStepDone(s1, std::vector<std::pair<uint64_t, int32_t>>{{2, 42}});
  std::vector<uint64_t> cached = bm.CachedHashes();
  std::sort(cached.begin(), cached.end());
  std::vector<uint64_t> want = hashes;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(cached, want);
}

TEST(Scheduler, ChunkedPrefillKeepsDecodesRunning) {
  BlockManager bm(64, 4);
  Scheduler sched(bm, {.max_num_batched_tokens = 8});
  ASSERT_TRUE(sched.Add(1, Prompt(3, 1)).ok());
  auto s = sched.Schedule();
  sched.OnStepDone(s, RunStep(sched, s));
  ASSERT_TRUE(sched.Add(2, Prompt(20, 100)).ok());
  std::vector<int64_t> chunks;
  for (int i = 0; i < 3; ++i) {
    auto step = sched.Schedule();
    // The decode of sequence 1 runs every step; the long prompt fills the rest.
    ASSERT_EQ(step.sequences.size(), 2u);
    EXPECT_EQ(step.sequences[1].seq->id, 1u);
    EXPECT_EQ(step.sequences[1].num_tokens, 1);
    EXPECT_EQ(step.sequences[0].seq->id, 2u);
    chunks.push_back(step.sequences[0].num_tokens);
    EXPECT_EQ(step.sequences[0].sample, i == 2);
    EXPECT_EQ(step.sequences[0].is_new, i == 0);
    EXPECT_LE(step.num_tokens, 8);
    sched.OnStepDone(step, RunStep(sched, step));
  }
  EXPECT_EQ(chunks, (std::vector<int64_t>{7, 7, 6}));
}

TEST(Scheduler, CapsRunningSequencesAndQueue) {
  BlockManager bm(64, 4);
  Scheduler sched(bm, {.max_num_batched_tokens = 1000, .max_num_seqs = 2, .max_queue = 3});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(sched.Add(i, Prompt(5, i)).ok());
  absl::Status full = sched.Add(9, Prompt(5, 0));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("--max-queue"), std::string::npos);
  auto step = sched.Schedule();
  EXPECT_EQ(step.sequences.size(), 2u);
  EXPECT_EQ(sched.num_waiting(), 1);
  EXPECT_EQ(sched.Add(9, {}).code(), absl::StatusCode::kInvalidArgument);
}

// Admission is fair between groups (clients): a client that queued many
// requests first does not keep a later client waiting for a slot; within a
// group the order stays the arrival order.
TEST(Scheduler, AdmissionIsFairBetweenGroups) {
  BlockManager bm(64, 4);
  Scheduler sched(bm, {.max_num_batched_tokens = 1000, .max_num_seqs = 2, .max_queue = 16});
  constexpr uint64_t kBusy = 7, kQuiet = 9;
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(sched.Add(i, Prompt(5, i), kBusy).ok());
  ASSERT_TRUE(sched.Add(100, Prompt(5, 50), kQuiet).ok());
  ScheduledStep step = sched.Schedule();
  std::vector<uint64_t> ids;
  for (const ScheduledSequence& s : step.sequences) ids.push_back(s.id);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<uint64_t>{0, 100})) << "the quiet client got the second slot";
  // When a slot frees, the busy client's next request in arrival order takes it.
  sched.OnStepDone(step, RunStep(sched, step));
  ASSERT_TRUE(sched.Finish(100));
  step = sched.Schedule();
  bool admitted_1 = false;
  for (const ScheduledSequence& s : step.sequences) admitted_1 |= s.id == 1 && s.is_new;
  EXPECT_TRUE(admitted_1);
}

// With one group, admission is first come first served, as before.
TEST(Scheduler, OneGroupIsAdmittedInArrivalOrder) {
  BlockManager bm(64, 4);
  Scheduler sched(bm, {.max_num_batched_tokens = 1000, .max_num_seqs = 2, .max_queue = 16});
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(sched.Add(i, Prompt(5, i)).ok());
  ScheduledStep step = sched.Schedule();
  std::vector<uint64_t> ids;
  for (const ScheduledSequence& s : step.sequences) ids.push_back(s.id);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<uint64_t>{0, 1}));
}

TEST(Scheduler, PreemptionUnderATinyPoolKeepsOutputs) {
  std::vector<std::vector<int32_t>> prompts;
  std::mt19937 rng(5);
  for (int i = 0; i < 12; ++i) prompts.push_back(Prompt(3 + rng() % 20, 50 * i));

  BlockManager big(1024, 4);
  Scheduler roomy(big, {.max_num_batched_tokens = 64, .max_num_seqs = 16});
  auto expected = Generate(roomy, prompts, 24);

  BlockManager tiny(16, 4);  // 64 token slots for 12 sequences of up to 46 tokens
  Scheduler tight(tiny, {.max_num_batched_tokens = 64, .max_num_seqs = 16});
  int preemptions = 0;
  auto got = Generate(tight, prompts, 24, &preemptions);
  EXPECT_GT(preemptions, 0) << "the tiny pool should have forced preemption";
  EXPECT_EQ(got, expected);
  EXPECT_EQ(tiny.num_free_blocks(), 16);
  EXPECT_EQ(big.num_free_blocks(), 1024);
}

TEST(Scheduler, PreemptedSequencesAreDroppedAndResentWhole) {
  BlockManager bm(4, 2);
  Scheduler sched(bm, {.max_num_batched_tokens = 64});
  ASSERT_TRUE(sched.Add(1, Prompt(3, 0)).ok());  // 2 blocks
  ASSERT_TRUE(sched.Add(2, Prompt(3, 10)).ok()); // 2 blocks: the pool is full
  auto s1 = sched.Schedule();
  ASSERT_EQ(s1.sequences.size(), 2u);
  sched.OnStepDone(s1, RunStep(sched, s1));
  // Both need a third block at position 4... first position 3 fits; then 4 does not.
  auto s2 = sched.Schedule();
  sched.OnStepDone(s2, RunStep(sched, s2));
  auto s3 = sched.Schedule();
  ASSERT_EQ(s3.sequences.size(), 1u);
  EXPECT_EQ(s3.sequences[0].seq->id, 1u);
  EXPECT_EQ(s3.dropped, (std::vector<uint64_t>{2}));
  EXPECT_EQ(sched.Find(2)->num_preemptions, 1);
  EXPECT_EQ(sched.Find(2)->status, SequenceStatus::kWaiting);
}

TEST(Scheduler, PrefixCacheServesTheSecondIdenticalPrompt) {
  BlockManager bm(64, 4);
  Scheduler sched(bm, {.max_num_batched_tokens = 64});
  auto out1 = Generate(sched, {Prompt(13, 3)}, 4);
  ASSERT_TRUE(sched.Add(5, Prompt(13, 3)).ok());
  auto step = sched.Schedule();
  ASSERT_EQ(step.sequences.size(), 1u);
  EXPECT_EQ(step.sequences[0].seq->num_cached_tokens, 12);
  EXPECT_EQ(step.sequences[0].num_tokens, 1);
  EXPECT_TRUE(step.sequences[0].is_new);
}

// A request that wants every prompt position's logits (prompt log-probs)
// computes its whole prompt though the cache holds its prefix, and still
// leaves its own blocks in the cache for the next.
TEST(Scheduler, APromptThatDoesNotReadTheCacheComputesItWhole) {
  BlockManager bm(64, 4);
  Scheduler sched(bm, {.max_num_batched_tokens = 64});
  Generate(sched, {Prompt(13, 3)}, 4);
  ASSERT_TRUE(sched.Add(5, Prompt(13, 3), 0, {}, /*read_prefix_cache=*/false).ok());
  const auto step = sched.Schedule();
  ASSERT_EQ(step.sequences.size(), 1u);
  EXPECT_EQ(step.sequences[0].start, 0);
  EXPECT_EQ(step.sequences[0].num_tokens, 13);
  EXPECT_EQ(step.sequences[0].seq->num_cached_tokens, 0);
  sched.OnStepDone(step, RunStep(sched, step));
  sched.Finish(5);
  ASSERT_TRUE(sched.Add(6, Prompt(13, 3)).ok());
  EXPECT_EQ(sched.Schedule().sequences[0].seq->num_cached_tokens, 12) << "the cache still serves the others";
}

TEST(Scheduler, FinishFreesBlocksAndTellsTheWorkers) {
  BlockManager bm(16, 4);
  Scheduler sched(bm, {.max_num_batched_tokens = 64});
  ASSERT_TRUE(sched.Add(1, Prompt(9, 0)).ok());
  ASSERT_TRUE(sched.Add(2, Prompt(9, 100)).ok());
  auto s = sched.Schedule();
  sched.OnStepDone(s, RunStep(sched, s));
  EXPECT_EQ(bm.num_free_blocks(), 16 - 6);
  EXPECT_TRUE(sched.Finish(1));   // e.g. the client cancelled
  EXPECT_FALSE(sched.Finish(1));
  EXPECT_EQ(bm.num_free_blocks(), 16 - 3);
  auto next = sched.Schedule();
  EXPECT_EQ(next.dropped, (std::vector<uint64_t>{1}));
  ASSERT_EQ(next.sequences.size(), 1u);
  EXPECT_EQ(next.sequences[0].seq->id, 2u);
  // A waiting sequence can be finished too, and the workers never heard of it.
  ASSERT_TRUE(sched.Add(3, Prompt(4, 0)).ok());
  EXPECT_TRUE(sched.Finish(3));
  sched.OnStepDone(next, RunStep(sched, next));
  EXPECT_TRUE(sched.Schedule().dropped.empty());
}

TEST(Scheduler, APromptLargerThanTheWholeCacheIsUnservable) {
  BlockManager bm(2, 4);
  Scheduler sched(bm, {.max_num_batched_tokens = 64});
  ASSERT_TRUE(sched.Add(1, Prompt(9, 0)).ok());
  ASSERT_TRUE(sched.Add(2, Prompt(5, 0)).ok());
  auto step = sched.Schedule();
  EXPECT_EQ(step.unservable, (std::vector<uint64_t>{1}));
  ASSERT_EQ(step.sequences.size(), 1u);
  EXPECT_EQ(step.sequences[0].seq->id, 2u);
  EXPECT_EQ(sched.Find(1), nullptr);
}

// Parallel sampling: one prefill, then the other choices fork from its
// blocks in the next step, each computing only the last prompt token, with a
// copy of the partial block it writes; all blocks come back once.
TEST(Scheduler, ChoicesShareOnePrefillAndCopyThePartialBlock) {
  BlockManager bm(32, 4);
  Scheduler sched(bm, {.max_num_batched_tokens = 64});
  const std::vector<uint64_t> forks = {11, 12};
  ASSERT_TRUE(sched.Add(10, Prompt(10, 1), 0, forks).ok());
  EXPECT_EQ(sched.num_waiting(), 1);  // one request
  ScheduledStep s1 = sched.Schedule();
  ASSERT_EQ(s1.sequences.size(), 1u);
  EXPECT_EQ(s1.sequences[0].num_tokens, 10);
  EXPECT_EQ(bm.num_free_blocks(), 29);
  auto t1 = RunStep(sched, s1);
  // One step in flight ahead: the forks start before its token is back.
  ScheduledStep s2 = sched.Schedule();
  ASSERT_EQ(s2.sequences.size(), 3u);
  int64_t copies = 0;
  for (const ScheduledSequence& s : s2.sequences) {
    EXPECT_EQ(s.num_tokens, 1);
    if (s.id == 10) {
      EXPECT_TRUE(s.decode_sampled);
      EXPECT_FALSE(s.is_new);
    } else {
      EXPECT_TRUE(s.is_new);
      EXPECT_EQ(s.start, 9);  // its own last prompt token
      EXPECT_TRUE(s.sample);
      EXPECT_EQ(s.seq->block_table[0], sched.Find(10)->block_table[0]);  // full blocks shared
      EXPECT_EQ(s.seq->block_table[1], sched.Find(10)->block_table[1]);
    }
    copies += std::ssize(s.copies);
  }
  // Three holders of the partial block, three writers: two copies, the last writes in place.
  EXPECT_EQ(copies, 2);
  EXPECT_EQ(bm.ref_count(sched.Find(10)->block_table[0]), 3);
  EXPECT_EQ(bm.num_free_blocks(), 27);
  sched.OnStepDone(s1, t1);
  sched.OnStepDone(s2, RunStep(sched, s2));
  for (uint64_t id : {10, 11, 12}) EXPECT_EQ(sched.Find(id)->num_output_tokens(), id == 10 ? 2 : 1);
  for (uint64_t id : {11, 10, 12}) EXPECT_TRUE(sched.Finish(id));
  EXPECT_TRUE(sched.idle() || !sched.Schedule().dropped.empty());
  EXPECT_EQ(bm.num_free_blocks(), 32);
}

// Greedy choices (the stand-in model) are identical to each other and to a
// request of one choice, through a preemption of one of them under a tiny pool.
TEST(Scheduler, ChoicesMatchASingleRequestThroughPreemption) {
  BlockManager bm(14, 4);
  Scheduler sched(bm, {.max_num_batched_tokens = 16});
  const std::vector<uint64_t> forks = {1, 2, 3};
  ASSERT_TRUE(sched.Add(0, Prompt(13, 5), 0, forks).ok());
  std::map<uint64_t, std::vector<int32_t>> out;
  int preemptions = 0;
  for (int iter = 0; iter < 10000 && !sched.idle(); ++iter) {
    ScheduledStep step = sched.Schedule();
    auto sampled = RunStep(sched, step);
    sched.OnStepDone(step, sampled);
    for (auto& s : step.sequences) preemptions = std::max(preemptions, s.seq->num_preemptions);
    for (auto& [id, token] : sampled) {
      const Sequence* seq = sched.Find(id);
      if (seq->num_output_tokens() >= 12) {
        out[id].assign(seq->output_tokens().begin(), seq->output_tokens().end());
        sched.Finish(id);
      }
    }
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_EQ(bm.num_free_blocks(), 14);
  BlockManager bm1(14, 4);
  Scheduler one(bm1, {.max_num_batched_tokens = 16});
  const auto single = Generate(one, {Prompt(13, 5)}, 12);
  ASSERT_EQ(out.size(), 4u);
  for (auto& [id, tokens] : out) EXPECT_EQ(tokens, single.at(0)) << "choice " << id;
}

TEST(Scheduler, FinishingTheFirstChoiceBeforeItsPrefillHandsTheOthersOn) {
  BlockManager bm(32, 4);
  Scheduler sched(bm, {.max_num_batched_tokens = 4, .max_num_seqs = 3});
  const std::vector<uint64_t> forks = {21, 22};
  EXPECT_FALSE(sched.Add(1, Prompt(3, 1), 0, std::vector<uint64_t>{2, 3, 4}).ok());  // 4 > max_num_seqs
  ASSERT_TRUE(sched.Add(20, Prompt(10, 1), 0, forks).ok());
  ScheduledStep s1 = sched.Schedule();  // a first chunk of 4
  ASSERT_EQ(s1.sequences.size(), 1u);
  EXPECT_FALSE(s1.sequences[0].sample);
  sched.OnStepDone(s1, {});
  EXPECT_TRUE(sched.Finish(20));  // aborted mid-prefill
  EXPECT_TRUE(sched.Finish(22));  // a fork that never ran
  ScheduledStep s2 = sched.Schedule();
  ASSERT_EQ(s2.sequences.size(), 1u);
  EXPECT_EQ(s2.sequences[0].id, 21u);  // now the first choice: it prefills
  EXPECT_EQ(s2.dropped, (std::vector<uint64_t>{20}));
  EXPECT_TRUE(sched.Finish(21));
  EXPECT_EQ(bm.num_free_blocks(), 32);
}

// Requests of 1 to 4 choices under a tiny pool with chunked prefill, with
// random aborts of single choices and of whole requests at any point (before
// their forks start, mid-prefill, decoding): every choice that runs to the end
// gives its prompt's continuation, no block is released twice (that aborts),
// and at the end every block is free.
TEST(Scheduler, RandomChoicesAndAbortsReturnEveryBlockOnce) {
  int64_t copies = 0, preemptions = 0, aborts = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937_64 rng(seed);
    BlockManager bm(12, 4);  // the longest sequence (19 + 6 tokens) needs 7
    Scheduler sched(bm, {.max_num_batched_tokens = 11, .max_num_seqs = 6});
    std::map<uint64_t, std::vector<int32_t>> prompt_of;
    std::map<uint64_t, std::vector<uint64_t>> choices;  // by request (first id)
    uint64_t next = 0;
    for (int r = 0; r < 9; ++r) {
      const int n = 1 + static_cast<int>(rng() % 4);
      std::vector<int32_t> prompt = Prompt(1 + static_cast<int>(rng() % 19), static_cast<int>(rng() % 3) * 7);
      const uint64_t first = next;
      std::vector<uint64_t> forks;
      for (int i = 0; i < n; ++i) {
        prompt_of[next] = prompt;
        choices[first].push_back(next);
        if (i > 0) forks.push_back(next);
        ++next;
      }
      ASSERT_TRUE(sched.Add(first, prompt, r % 2, forks).ok());
    }
    std::set<uint64_t> aborted;
    std::map<uint64_t, std::vector<int32_t>> out;
    for (int iter = 0; iter < 20000 && !sched.idle(); ++iter) {
      ScheduledStep step = sched.Schedule();
      ASSERT_TRUE(step.unservable.empty());
      const auto sampled = RunStep(sched, step);
      for (const ScheduledSequence& s : step.sequences) copies += std::ssize(s.copies);
      sched.OnStepDone(step, sampled);
      for (const auto& [id, token] : sampled) {
        const Sequence* seq = sched.Find(id);
        if (seq != nullptr && seq->num_output_tokens() >= 6) {
          out[id].assign(seq->output_tokens().begin(), seq->output_tokens().end());
          sched.Finish(id);
        }
      }
      if (rng() % 7 == 0) {  // abort one choice, or a whole request
        auto it = choices.begin();
        std::advance(it, static_cast<long>(rng() % choices.size()));
        const bool whole = rng() % 2 == 0;
        for (uint64_t id : it->second) {
          if ((whole || id == it->second[rng() % it->second.size()]) && sched.Finish(id)) aborted.insert(id);
        }
      }
    }
    ASSERT_TRUE(sched.idle());
    EXPECT_EQ(bm.num_free_blocks(), 12);
    preemptions += sched.num_preemptions();
    aborts += std::ssize(aborted);
    for (uint64_t id = 0; id < next; ++id) {
      if (aborted.contains(id)) continue;
      ASSERT_TRUE(out.contains(id)) << "sequence " << id << " neither finished nor aborted";
      std::vector<int32_t> context = prompt_of[id], want;
      for (int k = 0; k < 6; ++k) {
        want.push_back(NextToken(context));
        context.push_back(want.back());
      }
      EXPECT_EQ(out[id], want) << "sequence " << id;
    }
  }
  // The seeds reach what the test is about.
  EXPECT_GT(copies, 20);
  EXPECT_GT(preemptions, 20);
  EXPECT_GT(aborts, 20);
  std::cout << "copies " << copies << ", preemptions " << preemptions << ", aborts " << aborts << "\n";
}

}  // namespace
}  // namespace tpserve

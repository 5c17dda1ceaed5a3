// The fake worker the coordinator's tests lean on: it follows a well-formed
// plan, samples the fake model's continuation, and refuses what a real worker
// could not follow.
#include "tests/testing/fake_step_worker.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tpserve::testing_util {
namespace {

NewSequencePlan New(uint64_t id, std::vector<int32_t> prompt, int64_t computed, bool sample) {
  NewSequencePlan n;
  n.seq_id = id;
  n.token_ids.assign(prompt.begin() + computed, prompt.end());
  n.prompt = std::move(prompt);
  n.num_computed_tokens = computed;
  n.block_ids = {7};
  n.sample = sample;
  return n;
}

TEST(FakeStepWorker, FollowsChunksAndDecodesAndSamplesTheFakeContinuation) {
  const std::vector<int32_t> prompt{'h', 'e', 'l', 'l', 'o'};
  FakeStepWorker w;
  StepPlan first;  // a cached prefix of 1, then a chunk of 2
  first.new_sequences.push_back(New(1, prompt, 1, false));
  first.new_sequences[0].token_ids.resize(2);
  first.order = {1};
  absl::StatusOr<std::vector<StepToken>> none = w.Run(first);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  ASSERT_NE(w.Find(1), nullptr);
  EXPECT_EQ(w.Find(1)->tokens, (std::vector<int32_t>{'h', 'e', 'l'}));

  StepPlan second;  // the rest of the prompt, sampled
  second.continuing.push_back({.seq_id = 1, .new_block_ids = {3}, .token_ids = {'l', 'o'}, .sample = true});
  second.order = {1};
  absl::StatusOr<std::vector<StepToken>> t1 = w.Run(second);
  ASSERT_TRUE(t1.ok()) << t1.status();
  ASSERT_EQ(t1->size(), 1u);
  const std::vector<int32_t> want = FakeContinuation(prompt, 2);
  EXPECT_EQ((*t1)[0].sampled.token, want[0]);
  EXPECT_EQ(w.Find(1)->block_table, (std::vector<int32_t>{7, 3}));

  StepPlan decode;
  decode.continuing.push_back({.seq_id = 1, .token_ids = {want[0]}, .sample = true});
  decode.order = {1};
  absl::StatusOr<std::vector<StepToken>> t2 = w.Run(decode);
  ASSERT_TRUE(t2.ok()) << t2.status();
  EXPECT_EQ((*t2)[0].sampled.token, want[1]);

  StepPlan drop;
  drop.finished = {1};
  ASSERT_TRUE(w.Apply(drop).ok());
  EXPECT_EQ(w.num_sequences(), 0u);
}

TEST(FakeStepWorker, RefusesWhatAWorkerCouldNotFollow) {
  auto refused = [](const StepPlan& plan, const std::string& what) {
    FakeStepWorker w;
    StepPlan known;
    known.new_sequences.push_back(New(1, {1, 2, 3}, 0, true));
    known.order = {1};
    ASSERT_TRUE(w.Apply(known).ok());
    const absl::Status s = w.Apply(plan);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << what;
    EXPECT_NE(s.message().find(what), absl::string_view::npos) << s;
  };
  StepPlan twice;
  twice.new_sequences.push_back(New(1, {1, 2}, 0, true));
  twice.order = {1};
  refused(twice, "seq 1 sent twice");
  StepPlan unknown;
  unknown.continuing.push_back({.seq_id = 9, .token_ids = {4}, .sample = true});
  unknown.order = {9};
  refused(unknown, "unknown seq 9");
  StepPlan early;
  early.new_sequences.push_back(New(2, {1, 2, 3}, 0, true));
  early.new_sequences[0].token_ids.pop_back();
  early.order = {2};
  refused(early, "seq 2 is sampled before its last token");
  StepPlan past;
  past.new_sequences.push_back(New(2, {1, 2, 3}, 2, false));
  past.new_sequences[0].token_ids = {3, 4};
  past.order = {2};
  refused(past, "seq 2 computes up to token 4 of 3");
  StepPlan unordered;
  unordered.continuing.push_back({.seq_id = 1, .token_ids = {5}, .sample = true});
  refused(unordered, "the order lists 0 sequences; the step has 1");
  StepPlan repeated;
  repeated.continuing.push_back({.seq_id = 1, .token_ids = {5}, .sample = true});
  repeated.order = {2};
  refused(repeated, "the order lists seq 2");
}

TEST(FakeStepWorker, EosAfterEndsLongSequences) {
  FakeStepWorker w;
  w.set_eos_after(3, 99);
  StepPlan plan;
  plan.new_sequences.push_back(New(1, {1, 2}, 0, true));
  plan.new_sequences.push_back(New(2, {1, 2, 3}, 0, true));
  plan.order = {2, 1};
  absl::StatusOr<std::vector<StepToken>> t = w.Run(plan);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].seq_id, 2u);  // in `order`
  EXPECT_EQ((*t)[0].sampled.token, 99);
  EXPECT_EQ((*t)[1].sampled.token, FakeNextToken(std::vector<int32_t>{1, 2}));
}

}  // namespace
}  // namespace tpserve::testing_util

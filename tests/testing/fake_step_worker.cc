#include "tests/testing/fake_step_worker.h"

#include "absl/strings/str_cat.h"

namespace tpserve::testing_util {

int32_t FakeNextToken(std::span<const int32_t> tokens) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the token ids
  for (int32_t t : tokens) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  return 'a' + static_cast<int32_t>(h % 26);
}

std::vector<int32_t> FakeContinuation(std::vector<int32_t> prompt, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(FakeNextToken(prompt));
    prompt.push_back(out.back());
  }
  return out;
}

absl::Status FakeStepWorker::Apply(const StepPlan& plan) {
  for (uint64_t id : plan.finished) seqs_.erase(id);
  sample_.clear();
  for (const NewSequencePlan& n : plan.new_sequences) {
    if (seqs_.contains(n.seq_id)) return absl::InternalError(absl::StrCat("seq ", n.seq_id, " sent twice"));
    std::vector<int32_t> all = n.prompt;
    all.insert(all.end(), n.output.begin(), n.output.end());
    const int64_t size = static_cast<int64_t>(all.size());
    const int64_t reach = n.num_computed_tokens + static_cast<int64_t>(n.token_ids.size());
    if (n.num_computed_tokens < 0 || reach > size) {
      return absl::InternalError(absl::StrCat("seq ", n.seq_id, " computes up to token ", reach, " of ", size));
    }
    if (n.sample && reach != size) {
      return absl::InternalError(absl::StrCat("seq ", n.seq_id, " is sampled before its last token"));
    }
    Sequence& s = seqs_[n.seq_id];
    s.tokens.assign(all.begin(), all.begin() + n.num_computed_tokens);
    s.tokens.insert(s.tokens.end(), n.token_ids.begin(), n.token_ids.end());
    s.block_table = n.block_ids;
    sample_[n.seq_id] = n.sample;
  }
  for (const ContinuingSequencePlan& c : plan.continuing) {
    auto it = seqs_.find(c.seq_id);
    if (it == seqs_.end()) return absl::InternalError(absl::StrCat("unknown seq ", c.seq_id));
    Sequence& s = it->second;
    if (c.decode_sampled) {
      if (s.last_sampled < 0 || !c.token_ids.empty()) {
        return absl::InternalError(absl::StrCat("seq ", c.seq_id, " is decode_sampled but ",
                                                s.last_sampled < 0 ? "its last step sampled nothing"
                                                                   : "the plan carries tokens too"));
      }
      s.tokens.push_back(s.last_sampled);
    }
    s.last_sampled = -1;
    s.tokens.insert(s.tokens.end(), c.token_ids.begin(), c.token_ids.end());
    s.block_table.insert(s.block_table.end(), c.new_block_ids.begin(), c.new_block_ids.end());
    sample_[c.seq_id] = c.sample;
  }
  if (plan.order.size() != sample_.size()) {
    return absl::InternalError(
        absl::StrCat("the order lists ", plan.order.size(), " sequences; the step has ", sample_.size()));
  }
  absl::flat_hash_map<uint64_t, bool> listed;
  for (uint64_t id : plan.order) {
    if (!sample_.contains(id) || !listed.emplace(id, true).second) {
      return absl::InternalError(absl::StrCat("the order lists seq ", id, " again or without its diff"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StepToken>> FakeStepWorker::Run(const StepPlan& plan) {
  if (absl::Status applied = Apply(plan); !applied.ok()) return applied;
  std::vector<StepToken> tokens;
  for (uint64_t id : plan.order) {
    if (!sample_.at(id)) continue;
    Sequence& seq = seqs_.at(id);
    const std::vector<int32_t>& held = seq.tokens;
    const bool eos = eos_after_ > 0 && static_cast<int64_t>(held.size()) >= eos_after_;
    const int32_t token = eos ? eos_ : FakeNextToken(held);
    seq.last_sampled = token;
    tokens.push_back(StepToken{.seq_id = id, .sampled = {.token = token, .logprob = -0.5f, .top = {{token, -0.5f}}}});
  }
  return tokens;
}

const FakeStepWorker::Sequence* FakeStepWorker::Find(uint64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? nullptr : &it->second;
}

}  // namespace tpserve::testing_util

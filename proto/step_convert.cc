#include "proto/step_convert.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace iv1 = tpserve::internal::v1;

namespace {

// Proposals per sequence and step a plan may name: far above any k
// (--num-speculative-tokens <= 16), so a counter off the wire cannot size an
// allocation; the runner checks the slots against its own limits.
constexpr uint32_t kMaxProposals = 1024;

iv1::OutputConstraint ConstraintToProto(const OutputConstraint& c) {
  iv1::OutputConstraint p;
  p.set_kind(static_cast<iv1::OutputConstraint::Kind>(c.kind));
  p.set_text(c.text);
  p.mutable_choices()->Add(c.choices.begin(), c.choices.end());
  p.set_indented(c.indented);
  p.set_tool_format(static_cast<iv1::OutputConstraint::ToolFormat>(c.tool_format));
  for (const ToolFunction& f : c.functions) {
    iv1::ToolFunction* pf = p.add_functions();
    pf->set_name(f.name);
    pf->set_parameters_json(f.parameters_json);
  }
  p.set_parallel_tool_calls(c.parallel_tool_calls);
  p.set_think_start(c.think_start);
  p.set_think_end(c.think_end);
  p.set_starts_in_reasoning(c.starts_in_reasoning);
  return p;
}

OutputConstraint ConstraintFromProto(const iv1::OutputConstraint& p) {
  OutputConstraint c;
  c.kind = static_cast<OutputConstraint::Kind>(p.kind());
  c.text = p.text();
  c.choices.assign(p.choices().begin(), p.choices().end());
  c.indented = p.indented();
  c.tool_format = static_cast<OutputConstraint::ToolFormat>(p.tool_format());
  for (const iv1::ToolFunction& f : p.functions()) c.functions.push_back({f.name(), f.parameters_json()});
  c.parallel_tool_calls = p.parallel_tool_calls();
  c.think_start = p.think_start();
  c.think_end = p.think_end();
  c.starts_in_reasoning = p.starts_in_reasoning();
  return c;
}

// The enums travel as their numbers: the two lists must stay in step.
static_assert(static_cast<int>(OutputConstraint::Kind::kToolCalls) == iv1::OutputConstraint::TOOL_CALLS);
static_assert(static_cast<int>(OutputConstraint::Kind::kChoice) == iv1::OutputConstraint::CHOICE);
static_assert(static_cast<int>(OutputConstraint::ToolFormat::kLlama3Json) == iv1::OutputConstraint::LLAMA3_JSON);

}  // namespace

iv1::SamplingParams SamplingToProto(const SamplingParams& s) {
  iv1::SamplingParams p;
  p.set_temperature(s.temperature);
  p.set_top_k(s.top_k);
  p.set_top_p(s.top_p);
  p.set_min_p(s.min_p);
  p.set_repetition_penalty(s.repetition_penalty);
  p.set_presence_penalty(s.presence_penalty);
  p.set_frequency_penalty(s.frequency_penalty);
  p.set_has_seed(s.seed.has_value());
  p.set_seed(s.seed.value_or(0));
  p.set_logprobs(s.logprobs);
  p.set_prompt_logprobs(s.prompt_logprobs);
  if (s.constraint != nullptr) *p.mutable_constraint() = ConstraintToProto(*s.constraint);
  if (s.controls != nullptr) {
    for (const auto& [token, bias] : s.controls->logit_bias) {
      iv1::LogitBias* b = p.add_logit_bias();
      b->set_token(token);
      b->set_bias(bias);
    }
    p.mutable_allowed_token_ids()->Add(s.controls->allowed_token_ids.begin(), s.controls->allowed_token_ids.end());
    for (const std::vector<int32_t>& w : s.controls->bad_words) p.add_bad_words()->mutable_ids()->Add(w.begin(), w.end());
  }
  return p;
}

SamplingParams SamplingFromProto(const iv1::SamplingParams& p) {
  SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p();
  s.min_p = p.min_p();
  s.repetition_penalty = p.repetition_penalty();
  s.presence_penalty = p.presence_penalty();
  s.frequency_penalty = p.frequency_penalty();
  if (p.has_seed()) s.seed = p.seed();
  s.logprobs = p.logprobs();
  s.prompt_logprobs = p.prompt_logprobs();
  if (p.has_constraint()) s.constraint = std::make_shared<const OutputConstraint>(ConstraintFromProto(p.constraint()));
  if (p.logit_bias_size() > 0 || p.allowed_token_ids_size() > 0 || p.bad_words_size() > 0) {
    auto c = std::make_shared<TokenControls>();
    for (const iv1::LogitBias& b : p.logit_bias()) c->logit_bias.emplace_back(b.token(), b.bias());
    c->allowed_token_ids.assign(p.allowed_token_ids().begin(), p.allowed_token_ids().end());
    for (const iv1::TokenSequence& w : p.bad_words()) c->bad_words.emplace_back(w.ids().begin(), w.ids().end());
    NormalizeTokenControls(*c);  // the samplers rely on sorted lists (ValidateSamplingParams checks the rest)
    s.controls = std::move(c);
  }
  return s;
}

iv1::Step StepPlanToProto(const StepPlan& plan, uint64_t step_id) {
  iv1::Step out;
  out.set_step_id(step_id);
  out.mutable_finished()->Add(plan.finished.begin(), plan.finished.end());
  out.mutable_preempted()->Add(plan.preempted.begin(), plan.preempted.end());
  for (const BlockCopyPlan& c : plan.block_copies) {
    iv1::BlockCopy* copy = out.add_block_copies();
    copy->set_src(c.src);
    copy->set_dst(c.dst);
  }
  for (const NewSequencePlan& s : plan.new_sequences) {
    iv1::NewSequence* n = out.add_new_sequences();
    n->set_seq_id(s.seq_id);
    n->mutable_prompt_token_ids()->Add(s.prompt.begin(), s.prompt.end());
    n->mutable_output_token_ids()->Add(s.output.begin(), s.output.end());
    n->mutable_token_ids()->Add(s.token_ids.begin(), s.token_ids.end());
    n->set_num_computed_tokens(static_cast<uint32_t>(s.num_computed_tokens));
    n->mutable_block_ids()->Add(s.block_ids.begin(), s.block_ids.end());
    *n->mutable_sampling() = SamplingToProto(s.sampling);
    n->set_sample(s.sample);
    n->set_speculate(s.speculate);
    n->set_num_proposals(static_cast<uint32_t>(s.num_proposals));
  }
  for (const ContinuingSequencePlan& s : plan.continuing) {
    iv1::ContinuingSequence* c = out.add_continuing();
    c->set_seq_id(s.seq_id);
    if (s.keep_blocks >= 0) c->set_keep_blocks(static_cast<uint32_t>(s.keep_blocks));
    c->mutable_new_block_ids()->Add(s.new_block_ids.begin(), s.new_block_ids.end());
    c->mutable_token_ids()->Add(s.token_ids.begin(), s.token_ids.end());
    c->set_sample(s.sample);
    c->set_decode_sampled(s.decode_sampled);
    c->set_num_draft_slots(static_cast<uint32_t>(s.num_draft_slots));
    c->set_num_proposals(static_cast<uint32_t>(s.num_proposals));
    for (const BlockReplacement& r : s.replaced_blocks) {
      iv1::BlockReplacement* out_r = c->add_replaced_blocks();
      out_r->set_index(static_cast<uint32_t>(r.index));
      out_r->set_block_id(r.block_id);
    }
  }
  out.mutable_order()->Add(plan.order.begin(), plan.order.end());
  return out;
}

absl::StatusOr<StepPlan> StepPlanFromProto(const iv1::Step& step) {
  StepPlan plan;
  plan.finished.assign(step.finished().begin(), step.finished().end());
  plan.preempted.assign(step.preempted().begin(), step.preempted().end());
  plan.order.assign(step.order().begin(), step.order().end());
  for (const iv1::BlockCopy& c : step.block_copies()) {
    plan.block_copies.push_back(BlockCopyPlan{.src = c.src(), .dst = c.dst()});
  }
  plan.new_sequences.reserve(static_cast<size_t>(step.new_sequences_size()));
  for (const iv1::NewSequence& s : step.new_sequences()) {
    if (!s.has_sampling()) {
      return absl::InvalidArgumentError(absl::StrCat("step ", step.step_id(), ": new sequence ", s.seq_id(),
                                                     " has no sampling parameters; set NewSequence.sampling"));
    }
    plan.new_sequences.push_back(NewSequencePlan{
        .seq_id = s.seq_id(),
        .prompt = {s.prompt_token_ids().begin(), s.prompt_token_ids().end()},
        .output = {s.output_token_ids().begin(), s.output_token_ids().end()},
        .token_ids = {s.token_ids().begin(), s.token_ids().end()},
        .num_computed_tokens = s.num_computed_tokens(),
        .block_ids = {s.block_ids().begin(), s.block_ids().end()},
        .sampling = SamplingFromProto(s.sampling()),
        .sample = s.sample(),
        .speculate = s.speculate(),
        .num_proposals = static_cast<int32_t>(std::min<uint32_t>(s.num_proposals(), kMaxProposals)),
    });
  }
  plan.continuing.reserve(static_cast<size_t>(step.continuing_size()));
  for (const iv1::ContinuingSequence& s : step.continuing()) {
    std::vector<BlockReplacement> replaced;
    for (const iv1::BlockReplacement& r : s.replaced_blocks()) {
      replaced.push_back(BlockReplacement{.index = r.index(), .block_id = r.block_id()});
    }
    plan.continuing.push_back(ContinuingSequencePlan{
        .seq_id = s.seq_id(),
        .keep_blocks = s.has_keep_blocks() ? static_cast<int64_t>(s.keep_blocks()) : -1,
        .new_block_ids = {s.new_block_ids().begin(), s.new_block_ids().end()},
        .replaced_blocks = std::move(replaced),
        .token_ids = {s.token_ids().begin(), s.token_ids().end()},
        .sample = s.sample(),
        .decode_sampled = s.decode_sampled(),
        .num_draft_slots = static_cast<int32_t>(std::min<uint32_t>(s.num_draft_slots(), kMaxProposals)),
        .num_proposals = static_cast<int32_t>(std::min<uint32_t>(s.num_proposals(), kMaxProposals)),
    });
  }
  return plan;
}

void AppendTokens(std::span<const StepToken> tokens, iv1::StepResult& result) {
  for (const StepToken& t : tokens) {
    iv1::SampledToken* out = result.add_tokens();
    out->set_seq_id(t.seq_id);
    out->set_token_id(t.sampled.token);
    out->set_logprob(t.sampled.logprob);
    out->set_num_proposed(static_cast<uint32_t>(t.num_proposed));
    if (!t.error.empty()) out->set_error(t.error);
    for (const auto& [id, logprob] : t.sampled.top) {
      out->add_top_ids(id);
      out->add_top_logprobs(logprob);
    }
  }
}

std::vector<StepToken> TokensFromProto(const iv1::StepResult& result) {
  std::vector<StepToken> tokens;
  tokens.reserve(static_cast<size_t>(result.tokens_size()));
  for (const iv1::SampledToken& t : result.tokens()) {
    StepToken token{.seq_id = t.seq_id(), .sampled = {.token = t.token_id(), .logprob = t.logprob(), .top = {}},
                    .num_proposed = static_cast<int32_t>(std::min<uint32_t>(t.num_proposed(), kMaxProposals)),
                    .error = t.error()};
    for (int k = 0; k < t.top_ids_size() && k < t.top_logprobs_size(); ++k) {
      token.sampled.top.emplace_back(t.top_ids(k), t.top_logprobs(k));
    }
    tokens.push_back(std::move(token));
  }
  return tokens;
}

void AppendPromptLogprobs(std::span<const PromptLogprobs> prompts, iv1::StepResult& result) {
  for (const PromptLogprobs& p : prompts) {
    iv1::PromptLogprobs* out = result.add_prompt_logprobs();
    out->set_seq_id(p.seq_id);
    out->set_first_position(static_cast<uint32_t>(p.first_position));
    out->set_top_n(p.tokens.empty() ? 0 : static_cast<uint32_t>(p.tokens[0].scored.top.size()));
    for (const ScoredToken& t : p.tokens) {
      out->add_token_ids(t.scored.token);
      out->add_logprobs(t.scored.logprob);
      out->add_ranks(t.rank);
      for (const auto& [id, logprob] : t.scored.top) {
        out->add_top_ids(id);
        out->add_top_logprobs(logprob);
      }
    }
  }
}

absl::StatusOr<std::vector<PromptLogprobs>> PromptLogprobsFromProto(const iv1::StepResult& result) {
  std::vector<PromptLogprobs> prompts;
  for (const iv1::PromptLogprobs& p : result.prompt_logprobs()) {
    const int n = p.token_ids_size();
    const int64_t top = p.top_n();
    if (p.logprobs_size() != n || p.ranks_size() != n || p.top_ids_size() != n * top ||
        p.top_logprobs_size() != n * top || p.first_position() < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", result.step_id(), ": prompt log-probs of sequence ", p.seq_id(), " hold ", n, " tokens, ",
          p.logprobs_size(), " log-probs, ", p.ranks_size(), " ranks and ", p.top_ids_size(), " / ",
          p.top_logprobs_size(), " alternatives for top_n ", top, " from position ", p.first_position(),
          "; they must agree, from position 1"));
    }
    PromptLogprobs out{.seq_id = p.seq_id(), .first_position = p.first_position(), .tokens = {}};
    out.tokens.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      ScoredToken t{.scored = {.token = p.token_ids(i), .logprob = p.logprobs(i), .top = {}}, .rank = p.ranks(i)};
      for (int64_t k = i * top; k < (i + 1) * top; ++k) {
        t.scored.top.emplace_back(p.top_ids(static_cast<int>(k)), p.top_logprobs(static_cast<int>(k)));
      }
      out.tokens.push_back(std::move(t));
    }
    prompts.push_back(std::move(out));
  }
  return prompts;
}

}  // namespace tpserve

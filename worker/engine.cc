#include "worker/engine.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "scheduler/step_plan.h"

namespace tpserve {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const std::filesystem::path& model_dir,
                                                       Backend& backend, Communicator& comm,
                                                       const EngineOptions& options) {
  if (options.block_size <= 0 || options.num_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat("EngineOptions: block_size (", options.block_size,
                                                   ") must be positive and num_blocks (",
                                                   options.num_blocks, ") not negative"));
  }
  std::unique_ptr<Engine> engine(new Engine(backend, comm, options));
  TPSERVE_ASSIGN_OR_RETURN(engine->model_, Model::Load(model_dir, backend, comm, options.model));
  return engine;
}

absl::Status Engine::Validate(std::span<const GenerationRequest> requests) const {
  const ModelConfig& c = model_->config();
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    const std::string where = absl::StrCat("request ", i, ": ");
    if (r.prompt.empty()) return absl::InvalidArgumentError(where + "the prompt is empty");
    for (int32_t id : r.prompt) {
      if (id < 0 || id >= c.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(where, "prompt token id ", id,
                                                       " is outside the vocabulary [0, ",
                                                       c.vocab_size, ")"));
      }
    }
    if (r.max_tokens < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "max_tokens is ", r.max_tokens, "; ask for at least 1"));
    }
    const int64_t total = std::ssize(r.prompt) + r.max_tokens;
    if (total > model_->max_position()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "prompt (", r.prompt.size(), ") + max_tokens (", r.max_tokens, ") = ", total,
          " exceeds the ", model_->max_position(), " positions of the model (max_position)"));
    }
    const int64_t blocks = BlockManager::BlocksFor(total, options_.block_size);
    if (options_.num_blocks > 0 && blocks > options_.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "needs ", blocks, " KV blocks of ", options_.block_size,
          " tokens but the engine has ", options_.num_blocks, "; raise num_blocks"));
    }
    if (r.n < 1 || r.n > model_->options().max_num_seqs) {
      return absl::InvalidArgumentError(absl::StrCat(where, "n is ", r.n, "; ask for 1 to ",
                                                     model_->options().max_num_seqs, " (max_num_seqs) choices"));
    }
    if (absl::Status s = ValidateSamplingParams(r.sampling); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::EnsureCache(std::span<const GenerationRequest> requests) {
  int64_t want = options_.num_blocks;
  if (want == 0) {
    for (const GenerationRequest& r : requests) {
      want += r.n * BlockManager::BlocksFor(std::ssize(r.prompt) + r.max_tokens, options_.block_size);
    }
  }
  if (cache_ && cache_->num_blocks() >= want) return absl::OkStatus();
  runner_.reset();  // its decode graphs hold the old cache's addresses
  blocks_.reset();
  cache_.reset();   // free the old cache first
  TPSERVE_ASSIGN_OR_RETURN(KvCache cache,
                           KvCache::Allocate(backend_, model_->kv_cache_shape(want, options_.block_size)));
  cache_ = std::make_unique<KvCache>(std::move(cache));
  blocks_ = std::make_unique<BlockManager>(cache_->num_blocks(), options_.block_size,
                                           options_.enable_prefix_caching);
  StepRunnerOptions runner;
  runner.enforce_eager = options_.enforce_eager;
  runner.sampler = options_.return_logits ? nullptr : options_.sampler;
  runner.keep_logits = options_.return_logits;
  runner_ = std::make_unique<StepRunner>(*model_, *cache_, comm_.rank(), runner);
  return runner_->WarmUp();
}

absl::StatusOr<std::vector<GenerationResult>> Engine::Generate(
    std::span<const GenerationRequest> requests) {
  TPSERVE_RETURN_IF_ERROR(Validate(requests));
  TPSERVE_RETURN_IF_ERROR(EnsureCache(requests));
  stats_ = GenerationStats{};
  runner_->Clear();
  absl::StatusOr<std::vector<GenerationResult>> results = RunAll(requests);
  if (!results.ok()) {
    // The failed call's sequences still hold blocks: start the next call over.
    blocks_ = std::make_unique<BlockManager>(cache_->num_blocks(), options_.block_size,
                                             options_.enable_prefix_caching);
  }
  return results;
}

absl::StatusOr<std::vector<GenerationResult>> Engine::RunAll(std::span<const GenerationRequest> requests) {
  const ModelOptions& limits = model_->options();
  Scheduler scheduler(*blocks_, SchedulerConfig{
                                    .max_num_batched_tokens = limits.max_num_tokens,
                                    .max_num_seqs = static_cast<int32_t>(limits.max_num_seqs),
                                    .max_queue = std::numeric_limits<int32_t>::max(),
                                });
  choices_.clear();
  for (size_t i = 0; i < requests.size(); ++i) {  // sequence id = result index
    const uint64_t first = choices_.size();
    std::vector<uint64_t> forks;
    for (int32_t c = 0; c < requests[i].n; ++c) {
      if (c > 0) forks.push_back(choices_.size());
      choices_.push_back(Choice{.request = i, .sampling = ChoiceSampling(requests[i].sampling, c)});
    }
    TPSERVE_RETURN_IF_ERROR(
        scheduler.Add(first, requests[i].prompt, 0, forks, /*read_prefix_cache=*/requests[i].sampling.prompt_logprobs < 0));
  }
  std::vector<GenerationResult> results(choices_.size());
  while (!scheduler.idle()) {
    const ScheduledStep step = scheduler.Schedule();
    if (!step.unservable.empty() || step.empty()) {  // Validate rules both out
      return absl::InternalError(absl::StrCat(
          "Engine: nothing could be scheduled (", scheduler.num_waiting(), " waiting, ",
          scheduler.num_running(), " running, ", blocks_->num_free_blocks(), " free KV blocks, ",
          step.unservable.size(), " too long for the cache)"));
    }
    TPSERVE_RETURN_IF_ERROR(RunStep(step, requests, scheduler, results));
  }
  return results;
}

absl::Status Engine::RunStep(const ScheduledStep& step, std::span<const GenerationRequest> requests,
                             Scheduler& scheduler, std::vector<GenerationResult>& results) {
  const StepPlan plan = BuildStepPlan(step, [&](uint64_t id) -> const SamplingParams& {
    return choices_[id].sampling;
  });
  const auto start = std::chrono::steady_clock::now();
  // Every rank gets the sampled ids (rank 0 broadcasts them); rank 0's carry log-probs.
  TPSERVE_ASSIGN_OR_RETURN(const std::vector<StepToken> tokens, runner_->Run(plan));
  const std::vector<const StepToken*> ordered = TokensInStepOrder(step, tokens);
  for (const PromptLogprobs& p : runner_->prompt_logprobs()) {  // a recompute repeats positions: kept once
    std::vector<ScoredToken>& got = results[p.seq_id].prompt_logprobs;
    for (size_t k = 0; k < p.tokens.size(); ++k) {  // got[i] is position i + 1
      if (p.first_position + static_cast<int64_t>(k) == std::ssize(got) + 1) got.push_back(p.tokens[k]);
    }
  }
  if (!step.sequences.empty()) {
    Account(step, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }

  std::vector<std::pair<uint64_t, int32_t>> sampled;
  for (const ScheduledSequence& s : step.sequences) {
    if (!s.sample) continue;
    const StepToken* t = ordered[sampled.size()];
    if (t == nullptr) {
      return absl::InternalError(absl::StrCat("Engine: rank ", comm_.rank(), " got no token for sequence ", s.id));
    }
    sampled.emplace_back(s.id, t->sampled.token);
  }
  scheduler.OnStepDone(step, sampled);
  for (size_t k = 0; k < sampled.size(); ++k) {
    const auto [id, token] = sampled[k];
    const Sequence& seq = *scheduler.Find(id);
    GenerationResult& result = results[id];
    const StepToken* with_logprobs = comm_.rank() == 0 ? ordered[k] : nullptr;
    if (!Append(requests[choices_[id].request], seq.num_output_tokens(), token, with_logprobs, result)) continue;
    result.cached_tokens = seq.num_cached_tokens;
    stats_.cached_tokens += seq.num_cached_tokens;
    stats_.preemptions += seq.num_preemptions;
    scheduler.Finish(id);
  }
  return absl::OkStatus();
}

bool Engine::Append(const GenerationRequest& request, int64_t num_output, int32_t token,
                    const StepToken* sampled, GenerationResult& result) const {
  result.tokens.push_back(token);
  if (sampled != nullptr && request.sampling.logprobs >= 0) result.logprobs.push_back(sampled->sampled.logprob);
  if (sampled != nullptr && !sampled->logits.empty()) result.logits.push_back(sampled->logits);
  const std::vector<int64_t>& eos = model_->config().eos_token_ids;
  const bool is_eos = !request.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end();
  if (!is_eos && num_output < request.max_tokens) return false;
  result.finish_reason = is_eos ? FinishReason::kEos : FinishReason::kLength;
  return true;
}

void Engine::Account(const ScheduledStep& step, double seconds) {
  ++stats_.steps;
  for (const ScheduledSequence& s : step.sequences) {
    const int64_t end = std::min(s.start + s.num_tokens, s.seq->num_prompt_tokens);
    stats_.prompt_tokens_computed += std::max<int64_t>(0, end - s.start);
  }
  stats_.peak_blocks_used = std::max(stats_.peak_blocks_used, blocks_->num_blocks() - blocks_->num_free_blocks());
  // A decode step: every sequence computes the token its previous step sampled.
  if (std::all_of(step.sequences.begin(), step.sequences.end(),
                  [](const ScheduledSequence& s) { return s.decode_sampled; })) {
    stats_.decode_tokens += step.num_tokens;
    stats_.decode_seconds += seconds;
  } else {
    stats_.prefill_tokens += step.num_tokens;
    stats_.prefill_seconds += seconds;
  }
}

}  // namespace tpserve

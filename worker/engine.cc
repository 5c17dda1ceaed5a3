#include "worker/engine.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "worker/block_allocator.h"

namespace tpserve {

struct Engine::Sequence {
  int64_t index = 0;  // request index
  const GenerationRequest* request = nullptr;
  std::vector<int32_t> tokens;  // prompt + output so far
  int64_t num_computed = 0;     // tokens whose K/V are in the cache
  std::vector<int32_t> blocks;  // block table
  std::unique_ptr<SequenceSamplingState> sampling;  // rank 0 only
  int64_t num_output = 0;
  bool decoding() const { return num_computed > 0 && num_computed + 1 == std::ssize(tokens); }
};

// One scheduled step: sequences in prefill first, then in decode, and the
// number of new tokens of each.
struct Engine::Batch {
  std::vector<Sequence*> seqs;   // [S]
  std::vector<int64_t> num_new;  // [S]
  int32_t num_prefill = 0;
};

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const std::filesystem::path& model_dir,
                                                       Backend& backend, Communicator& comm,
                                                       const EngineOptions& options) {
  if (options.block_size <= 0 || options.num_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat("EngineOptions: block_size (", options.block_size,
                                                   ") must be positive and num_blocks (",
                                                   options.num_blocks, ") not negative"));
  }
  std::unique_ptr<Engine> engine(new Engine(backend, comm, options));
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(model_dir, backend, comm, options.model);
  if (!model.ok()) return model.status();
  engine->model_ = *std::move(model);
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
    const int64_t blocks = BlockAllocator::BlocksFor(total, options_.block_size);
    if (options_.num_blocks > 0 && blocks > options_.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "needs ", blocks, " KV blocks of ", options_.block_size,
          " tokens but the engine has ", options_.num_blocks, "; raise num_blocks"));
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
      want += BlockAllocator::BlocksFor(std::ssize(r.prompt) + r.max_tokens, options_.block_size);
    }
  }
  if (!cache_ || cache_->num_blocks() < want) {
    graphs_.reset();  // they hold the old cache's addresses
    cache_.reset();   // free the old cache first
    absl::StatusOr<KvCache> cache =
        KvCache::Allocate(backend_, model_->kv_cache_shape(want, options_.block_size));
    if (!cache.ok()) return cache.status();
    cache_ = std::make_unique<KvCache>(*std::move(cache));
    const StepCapacity capacity = StepCapacityFor(*model_, options_.block_size);
    if (!reserved_) {
      if (absl::Status s = backend_.Reserve(capacity); !s.ok()) return s;
      reserved_ = true;
    }
    if (!options_.enforce_eager && DecodeGraphs::Supported(backend_, comm_, *model_)) {
      graphs_ = std::make_unique<DecodeGraphs>(*model_, *cache_, backend_, capacity);
      if (absl::Status s = graphs_->Capture(); !s.ok()) return s;
    }
  }
  allocator_ = std::make_unique<BlockAllocator>(cache_->num_blocks());
  return absl::OkStatus();
}

void Engine::Preempt(Sequence* seq, std::vector<Sequence*>& running,
                     std::deque<Sequence*>& waiting) {
  // Blocks of a running sequence are always allocated, so Free cannot fail.
  (void)allocator_->Free(seq->blocks);
  seq->blocks.clear();
  seq->num_computed = 0;
  running.erase(std::find(running.begin(), running.end(), seq));
  waiting.push_front(seq);
  ++stats_.preemptions;
}

void Engine::Schedule(std::vector<Sequence*>& running, std::deque<Sequence*>& waiting,
                      Batch& batch) {
  int64_t budget = options_.model.max_num_tokens;
  int64_t seq_room = options_.model.max_num_seqs;
  std::vector<std::pair<Sequence*, int64_t>> picked;
  // Grows seq's block table to hold `tokens` tokens; false when blocks ran out.
  auto grow = [&](Sequence* seq, int64_t tokens) {
    const int64_t need = BlockAllocator::BlocksFor(tokens, options_.block_size) - std::ssize(seq->blocks);
    if (need <= 0) return true;
    absl::StatusOr<std::vector<int32_t>> got = allocator_->Allocate(need);
    if (!got.ok()) return false;
    seq->blocks.insert(seq->blocks.end(), got->begin(), got->end());
    return true;
  };
  // Running sequences first (admission order); the newest is preempted when
  // blocks run out.
  for (size_t i = 0; i < running.size() && budget > 0 && seq_room > 0;) {
    Sequence* seq = running[i];
    const int64_t n = std::min<int64_t>(std::ssize(seq->tokens) - seq->num_computed, budget);
    bool preempted_self = false;
    while (!grow(seq, seq->num_computed + n)) {
      Sequence* victim = running.back();
      preempted_self = victim == seq;
      Preempt(victim, running, waiting);
      if (preempted_self) break;
    }
    if (preempted_self) break;
    picked.emplace_back(seq, n);
    budget -= n;
    --seq_room;
    ++i;
  }
  // Then waiting sequences, first come first served, while blocks last.
  while (!waiting.empty() && budget > 0 && seq_room > 0) {
    Sequence* seq = waiting.front();
    const int64_t n = std::min<int64_t>(std::ssize(seq->tokens) - seq->num_computed, budget);
    if (!grow(seq, seq->num_computed + n)) break;
    waiting.pop_front();
    running.push_back(seq);
    picked.emplace_back(seq, n);
    budget -= n;
    --seq_room;
  }
  // Prefill (anything but a one-token decode) before decode, as StepMetadata wants.
  std::stable_partition(picked.begin(), picked.end(),
                        [](const auto& p) { return !p.first->decoding(); });
  batch = Batch{};
  for (const auto& [seq, n] : picked) {
    batch.seqs.push_back(seq);
    batch.num_new.push_back(n);
    if (!seq->decoding()) ++batch.num_prefill;
  }
}

absl::StatusOr<std::vector<GenerationResult>> Engine::Generate(
    std::span<const GenerationRequest> requests) {
  if (absl::Status s = Validate(requests); !s.ok()) return s;
  if (absl::Status s = EnsureCache(requests); !s.ok()) return s;
  stats_ = GenerationStats{};
  std::vector<GenerationResult> results(requests.size());
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::deque<Sequence*> waiting;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->index = static_cast<int64_t>(i);
    seq->request = &requests[i];
    seq->tokens = requests[i].prompt;
    if (comm_.rank() == 0) {
      seq->sampling = std::make_unique<SequenceSamplingState>(requests[i].sampling, requests[i].prompt);
    }
    waiting.push_back(seq.get());
    seqs.push_back(std::move(seq));
  }
  std::vector<Sequence*> running;
  Batch batch;
  while (!waiting.empty() || !running.empty()) {
    Schedule(running, waiting, batch);
    if (batch.seqs.empty()) {
      return absl::InternalError(absl::StrCat(
          "Engine: nothing could be scheduled (", waiting.size(), " waiting, ", running.size(),
          " running, ", allocator_->num_free(), " free KV blocks)"));
    }
    if (absl::Status s = RunStep(batch, running, results); !s.ok()) return s;
  }
  return results;
}

absl::Status Engine::RunStep(const Batch& batch, std::vector<Sequence*>& running,
                             std::vector<GenerationResult>& results) {
  const int32_t bs = options_.block_size;
  const size_t s_count = batch.seqs.size();
  int32_t max_blocks = 1;
  for (const Sequence* seq : batch.seqs) max_blocks = std::max(max_blocks, static_cast<int32_t>(seq->blocks.size()));
  std::vector<int32_t> token_ids, positions, query_start{0}, seq_lens, block_tables, logits_indices;
  std::vector<int64_t> slots;
  block_tables.assign(s_count * static_cast<size_t>(max_blocks), -1);
  for (size_t s = 0; s < s_count; ++s) {
    const Sequence& seq = *batch.seqs[s];
    for (int64_t p = seq.num_computed; p < seq.num_computed + batch.num_new[s]; ++p) {
      token_ids.push_back(seq.tokens[static_cast<size_t>(p)]);
      positions.push_back(static_cast<int32_t>(p));
      slots.push_back(int64_t{seq.blocks[static_cast<size_t>(p / bs)]} * bs + p % bs);
    }
    query_start.push_back(static_cast<int32_t>(token_ids.size()));
    seq_lens.push_back(static_cast<int32_t>(seq.num_computed + batch.num_new[s]));
    std::copy(seq.blocks.begin(), seq.blocks.end(), block_tables.begin() + static_cast<std::ptrdiff_t>(s) * max_blocks);
    logits_indices.push_back(query_start.back() - 1);
  }
  StepMetadata step;
  step.num_prefill_seqs = batch.num_prefill;
  step.num_decode_seqs = static_cast<int32_t>(s_count) - batch.num_prefill;
  step.token_ids = token_ids;
  step.positions = positions;
  step.slot_mapping = slots;
  step.query_start = query_start;
  step.seq_lens = seq_lens;
  step.block_tables = block_tables;
  step.max_blocks_per_seq = max_blocks;
  step.logits_indices = logits_indices;

  const auto start = std::chrono::steady_clock::now();
  // Rank 0 samples the sequences whose prompt is now fully computed; the token
  // ids travel as floats (exact below 2^24) since collectives carry f32/bf16.
  std::vector<float> chosen(s_count, -1.0f);
  std::vector<SampledToken> sampled(s_count);
  const int64_t vocab = model_->config().vocab_size;
  auto to_sample = [&](size_t s) {
    const Sequence* seq = batch.seqs[s];
    return comm_.rank() == 0 && seq->num_computed + batch.num_new[s] == std::ssize(seq->tokens);
  };
  absl::StatusOr<std::optional<Logits>> logits = std::optional<Logits>();
  if (comm_.rank() == 0 && options_.sampler != nullptr && !options_.return_logits) {
    // On the device: the logits never leave it.
    if (absl::Status st = graphs_ ? graphs_->Run(step) : model_->Compute(step, *cache_); !st.ok()) return st;
    std::vector<SequenceSamplingState*> states(s_count, nullptr);
    for (size_t s = 0; s < s_count; ++s) {
      if (to_sample(s)) states[s] = batch.seqs[s]->sampling.get();
    }
    sampled = options_.sampler->Sample(model_->device_logits(), vocab, states);
    for (size_t s = 0; s < s_count; ++s) {
      if (states[s] != nullptr) chosen[s] = static_cast<float>(sampled[s].token);
    }
  } else {
    logits = graphs_ ? graphs_->Forward(step) : model_->Forward(step, *cache_);
    if (!logits.ok()) return logits.status();
  }
  for (size_t s = 0; s < s_count && logits->has_value(); ++s) {
    Sequence* seq = batch.seqs[s];
    if (!to_sample(s)) continue;
    SequenceSamplingState* state = seq->sampling.get();
    sampled[s] = Sample((*logits)->row(static_cast<int64_t>(s)), vocab, vocab,
                        std::span<SequenceSamplingState* const>(&state, 1))[0];
    chosen[s] = static_cast<float>(sampled[s].token);
    if (options_.return_logits) {
      const std::span<const float> row = (*logits)->row(static_cast<int64_t>(s));
      results[static_cast<size_t>(seq->index)].logits.emplace_back(row.begin(), row.end());
    }
  }
  if (absl::Status st = comm_.Broadcast(Tensor(chosen.data(), DType::kF32, Device::kCpu,
                                               {static_cast<int64_t>(s_count)}), 0);
      !st.ok()) {
    return st;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++stats_.steps;
  if (batch.num_prefill > 0) {
    stats_.prefill_tokens += std::ssize(token_ids);
    stats_.prefill_seconds += seconds;
  } else {
    stats_.decode_tokens += std::ssize(token_ids);
    stats_.decode_seconds += seconds;
  }

  const std::vector<int64_t>& eos = model_->config().eos_token_ids;
  for (size_t s = 0; s < s_count; ++s) {
    Sequence* seq = batch.seqs[s];
    seq->num_computed += batch.num_new[s];
    if (chosen[s] < 0) continue;
    const int32_t token = static_cast<int32_t>(chosen[s]);
    GenerationResult& result = results[static_cast<size_t>(seq->index)];
    seq->tokens.push_back(token);
    ++seq->num_output;
    result.tokens.push_back(token);
    if (comm_.rank() == 0 && seq->request->sampling.logprobs >= 0) result.logprobs.push_back(sampled[s].logprob);
    const bool is_eos = !seq->request->ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end();
    if (is_eos || seq->num_output >= seq->request->max_tokens) {
      result.finish_reason = is_eos ? FinishReason::kEos : FinishReason::kLength;
      (void)allocator_->Free(seq->blocks);
      seq->blocks.clear();
      running.erase(std::find(running.begin(), running.end(), seq));
    }
  }
  return absl::OkStatus();
}

}  // namespace tpserve

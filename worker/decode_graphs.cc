#include "worker/decode_graphs.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tpserve {

std::vector<int32_t> DecodeGraphBatchSizes(int64_t max_num_seqs, int64_t max_num_tokens) {
  const int64_t limit = std::min(max_num_seqs, max_num_tokens);
  std::vector<int32_t> sizes;
  for (int64_t b : {1, 2, 4, 8}) {
    if (b <= limit) sizes.push_back(static_cast<int32_t>(b));
  }
  for (int64_t b = 16; b <= limit; b += 16) sizes.push_back(static_cast<int32_t>(b));
  if (limit >= 1 && sizes.back() != limit) sizes.push_back(static_cast<int32_t>(limit));
  return sizes;
}

int32_t DecodeGraphBucket(const std::vector<int32_t>& sizes, int64_t num_seqs) {
  auto it = std::lower_bound(sizes.begin(), sizes.end(), num_seqs);
  return it == sizes.end() ? 0 : *it;
}

StepCapacity StepCapacityFor(const Model& model, int32_t block_size) {
  StepCapacity c;
  c.max_tokens = model.options().max_num_tokens;
  c.max_seqs = model.options().max_num_seqs;
  c.max_context = model.max_position();
  c.block_size = block_size;
  c.max_query_heads = model.attention_shape().num_heads;  // the split decode attention's workspace
  c.max_head_dim = model.attention_shape().head_dim;
  return c;
}

absl::Status PadDecodeStep(const StepMetadata& step, int32_t bucket, int32_t max_blocks_per_seq,
                           int32_t block_size, PaddedStep& out) {
  const int32_t S = step.num_seqs();
  if (step.num_prefill_seqs != 0 || S > bucket || bucket < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PadDecodeStep: a step of ", step.num_prefill_seqs, " prefill and ", step.num_decode_seqs,
        " decode sequences cannot be padded to ", bucket, " decode rows (only pure decodes of at most that many)"));
  }
  if (step.token_ids.size() != static_cast<size_t>(S) || step.seq_lens.size() != static_cast<size_t>(S) ||
      step.slot_mapping.size() != static_cast<size_t>(S) || step.positions.size() != static_cast<size_t>(S) ||
      step.block_tables.size() != static_cast<size_t>(S) * static_cast<size_t>(std::max(step.max_blocks_per_seq, 0))) {
    return absl::InvalidArgumentError(absl::StrCat("PadDecodeStep: a decode step of ", S,
                                                   " sequences needs one token, position, slot and seq_len each"));
  }
  const size_t B = static_cast<size_t>(bucket), M = static_cast<size_t>(max_blocks_per_seq);
  out.token_ids.assign(B, 0);          // padding: token 0
  out.positions.assign(B, 0);          //          at position 0
  out.slot_mapping.assign(B, -1);      //          not stored
  out.seq_lens.assign(B, 1);           //          attending to 1 token
  out.block_tables.assign(B * M, -1);  //          in block 0 (set below)
  out.query_start.resize(B + 1);
  out.logits_indices.resize(B);
  for (size_t s = 0; s < B; ++s) {
    out.query_start[s] = static_cast<int32_t>(s);
    out.logits_indices[s] = static_cast<int32_t>(s);
    out.block_tables[s * M] = 0;
  }
  out.query_start[B] = bucket;
  for (size_t s = 0; s < static_cast<size_t>(S); ++s) {
    const int32_t seq_len = step.seq_lens[s];
    const int64_t used = block_size > 0 ? (int64_t{seq_len} + block_size - 1) / block_size : 0;
    if (seq_len < 1 || used > max_blocks_per_seq || used > step.max_blocks_per_seq) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PadDecodeStep: sequence ", s, " has seq_len ", seq_len, ", which needs ", used, " blocks of ", block_size,
          " tokens; the step has ", step.max_blocks_per_seq, " block-table columns and the graphs ",
          max_blocks_per_seq));
    }
    out.token_ids[s] = step.token_ids[s];
    out.positions[s] = step.positions[s];
    out.slot_mapping[s] = step.slot_mapping[s];
    out.seq_lens[s] = seq_len;
    // Only the blocks the context uses; the rest stay -1.
    const int32_t* row = step.block_tables.data() + s * static_cast<size_t>(step.max_blocks_per_seq);
    std::fill_n(out.block_tables.begin() + static_cast<std::ptrdiff_t>(s * M), M, -1);
    std::copy_n(row, used, out.block_tables.begin() + static_cast<std::ptrdiff_t>(s * M));
  }
  StepMetadata& m = out.meta;
  m = StepMetadata{};
  m.num_prefill_seqs = 0;
  m.num_decode_seqs = bucket;
  m.token_ids = out.token_ids;
  m.positions = out.positions;
  m.slot_mapping = out.slot_mapping;
  m.query_start = out.query_start;
  m.seq_lens = out.seq_lens;
  m.block_tables = out.block_tables;
  m.max_blocks_per_seq = max_blocks_per_seq;
  m.logits_indices = out.logits_indices;
  return absl::OkStatus();
}

bool DecodeGraphs::Supported(const Backend& backend, const Communicator& comm, const Model& model) {
  return backend.SupportsGraphs() && comm.SupportsGraphCapture() && !model.has_intermediate_hook();
}

DecodeGraphs::DecodeGraphs(Model& model, KvCache& cache, Backend& backend, const StepCapacity& capacity)
    : model_(model),
      cache_(cache),
      backend_(backend),
      capacity_(capacity),
      sizes_(DecodeGraphBatchSizes(capacity.max_seqs, capacity.max_tokens)) {}

absl::Status DecodeGraphs::Capture() {
  graphs_.clear();
  std::vector<std::unique_ptr<BackendGraph>> graphs;
  const StepMetadata none;  // no real sequences: every row is padding
  for (int32_t bucket : sizes_) {
    if (absl::Status st =
            PadDecodeStep(none, bucket, capacity_.max_blocks_per_seq(), cache_.block_size(), padded_);
        !st.ok()) {
      return st;
    }
    auto fail = [&](const absl::Status& st) {
      return absl::Status(st.code(), absl::StrCat("capturing the decode graph for batch size ", bucket, ": ",
                                                  st.message()));
    };
    // Once eagerly: anything initialised lazily (cuBLAS heuristics, module
    // loading) happens outside the capture.
    if (absl::Status st = model_.BeginStep(padded_.meta, cache_); !st.ok()) return fail(st);
    if (absl::Status st = model_.Enqueue(); !st.ok()) return fail(st);
    if (absl::StatusOr<std::optional<Logits>> warm = model_.ReadLogits(0); !warm.ok()) return fail(warm.status());
    // The step is still current: capture its ops.
    if (absl::Status st = backend_.BeginCapture(); !st.ok()) return fail(st);
    const absl::Status enqueued = model_.Enqueue();
    absl::StatusOr<std::unique_ptr<BackendGraph>> graph = backend_.EndCapture();
    if (!enqueued.ok()) return fail(enqueued);
    if (!graph.ok()) return fail(graph.status());
    graphs.push_back(*std::move(graph));
  }
  graphs_ = std::move(graphs);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Logits>> DecodeGraphs::Forward(const StepMetadata& step) {
  if (absl::Status st = Run(step); !st.ok()) return st;
  return model_.ReadLogits(step.num_seqs());
}

absl::Status DecodeGraphs::Run(const StepMetadata& step) {
  const int32_t bucket = DecodeGraphBucket(sizes_, step.num_seqs());
  if (graphs_.empty() || step.num_prefill_seqs != 0 || step.num_seqs() < 1 || bucket == 0 ||
      !PadDecodeStep(step, bucket, capacity_.max_blocks_per_seq(), cache_.block_size(), padded_).ok()) {
    return model_.Compute(step, cache_);
  }
  // The padded step is validated by BeginStep like any other (bad block ids,
  // slots or positions of the real rows are INVALID_ARGUMENT as in eager mode).
  if (absl::Status st = model_.BeginStep(padded_.meta, cache_); !st.ok()) return st;
  const size_t index = static_cast<size_t>(std::lower_bound(sizes_.begin(), sizes_.end(), bucket) - sizes_.begin());
  graphs_[index]->Replay();
  ++replays_;
  return absl::OkStatus();
}

}  // namespace tpserve

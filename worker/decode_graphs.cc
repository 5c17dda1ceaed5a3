#include "worker/decode_graphs.h"

#include <algorithm>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

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

StepCapacity ReservedCapacityFor(const Model& model, int32_t block_size) {
  StepCapacity c = StepCapacityFor(model, block_size);
  c.max_seqs = std::max(c.max_seqs, model.max_logits_rows());
  return c;
}

int32_t VerifyGraphProposals(const Model& model, int32_t max_per_sequence) {
  const int64_t extra = model.max_logits_rows() - model.options().max_num_seqs;
  int64_t k = std::min<int64_t>(
      {extra, kMaxVerifyGraphProposals, model.options().max_num_tokens - 1, model.max_position() - 1});
  if (max_per_sequence > 0) k = std::min<int64_t>(k, max_per_sequence);
  return static_cast<int32_t>(std::max<int64_t>(k, 0));
}

std::vector<VerifyGraphShape> VerifyGraphShapes(int64_t max_seqs, int32_t max_proposals, int64_t max_extra_rows,
                                                int64_t max_tokens) {
  std::vector<VerifyGraphShape> shapes;
  const int64_t seqs = std::min<int64_t>(max_seqs, kMaxVerifyGraphSeqs);
  for (int64_t s = 1; max_proposals >= 1 && s <= seqs; ++s) {
    const int64_t last = std::min({s + s * max_proposals, s + max_extra_rows, max_tokens});
    for (int64_t t = s + 1; t <= last; ++t) {
      shapes.push_back({static_cast<int32_t>(s), static_cast<int32_t>(t)});
    }
  }
  return shapes;
}

bool DecodeGraphs::Supported(const Backend& backend, const Communicator& comm, const Model& model) {
  return backend.SupportsGraphs() && comm.SupportsGraphCapture() && !model.has_intermediate_hook();
}

DecodeGraphs::DecodeGraphs(Model& model, KvCache& cache, Backend& backend, const StepCapacity& capacity,
                           int32_t max_proposals)
    : model_(model),
      cache_(cache),
      backend_(backend),
      capacity_(capacity),
      sizes_(DecodeGraphBatchSizes(capacity.max_seqs, capacity.max_tokens)) {
  for (int32_t k = 1; k <= max_proposals; ++k) proposals_.push_back(k);
  shapes_ = VerifyGraphShapes(capacity.max_seqs, max_proposals,
                              model.max_logits_rows() - model.options().max_num_seqs, capacity.max_tokens);
}

absl::StatusOr<std::unique_ptr<BackendGraph>> DecodeGraphs::CaptureCurrent(absl::string_view what) {
  auto fail = [&](const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat("capturing the ", what, ": ", st.message()));
  };
  // Once eagerly: anything initialised lazily (cuBLAS heuristics, module
  // loading) happens outside the capture.
  if (absl::Status st = model_.Enqueue(); !st.ok()) return fail(st);
  if (absl::StatusOr<std::optional<Logits>> warm = model_.ReadLogits(0); !warm.ok()) return fail(warm.status());
  // The step is still current: capture its ops.
  if (absl::Status st = backend_.BeginCapture(); !st.ok()) return fail(st);
  const absl::Status enqueued = model_.Enqueue();
  absl::StatusOr<std::unique_ptr<BackendGraph>> graph = backend_.EndCapture();
  if (!enqueued.ok()) return fail(enqueued);
  if (!graph.ok()) return fail(graph.status());
  return graph;
}

absl::Status DecodeGraphs::Capture(DeviceSampler* sampler) {
  graphs_.clear();
  verify_graphs_.clear();
  std::vector<std::unique_ptr<BackendGraph>> graphs, verify_graphs;
  const StepBatch none;  // no real sequences: every row is padding
  for (int32_t bucket : sizes_) {
    const std::string what = absl::StrCat("decode graph for batch size ", bucket);
    TPSERVE_RETURN_IF_ERROR(
        padded_.AssignPaddedDecode(none.view(), bucket, capacity_.max_blocks_per_seq(), cache_.block_size()));
    if (absl::Status st = model_.BeginStep(padded_.view(), cache_); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("capturing the ", what, ": ", st.message()));
    }
    TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<BackendGraph> graph, CaptureCurrent(what));
    graphs.push_back(std::move(graph));
    if (sampler != nullptr && model_.device_logits().data != nullptr) {
      if (absl::Status st = sampler->PrepareBatch(model_.device_logits(), model_.config().vocab_size); !st.ok()) {
        return absl::Status(st.code(), absl::StrCat("capturing the ", what, ": ", st.message()));
      }
    }
  }
  // All-padding sequences sharing T tokens: nothing stored, every key read
  // from block 0 (in range, finite: the cache is zero-filled at allocation).
  const std::vector<int32_t> zeros(static_cast<size_t>(std::max(capacity_.max_blocks_per_seq(), 1)), 0);
  for (const VerifyGraphShape& shape : shapes_) {
    const std::string what =
        absl::StrCat("verification graph for ", shape.seqs, " sequences of ", shape.tokens, " tokens");
    const std::vector<int32_t> tokens(static_cast<size_t>(shape.tokens), 0);
    std::vector<StepSequence> seqs;
    for (int32_t s = 0, at = 0; s < shape.seqs; ++s) {
      // The later sequences take the remainder, so the last has 2 or more
      // tokens and every sequence is in the prefill group.
      const int32_t n = shape.tokens / shape.seqs + (s >= shape.seqs - shape.tokens % shape.seqs ? 1 : 0);
      seqs.push_back({std::span<const int32_t>(tokens).subspan(static_cast<size_t>(at), static_cast<size_t>(n)), 0,
                      zeros, n});
      at += n;
    }
    absl::Status st = padded_.Assign(seqs, cache_.block_size(), StepBatch::StoreKv::kNo);
    if (st.ok()) st = model_.BeginStep(padded_.view(), cache_);
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat("capturing the ", what, ": ", st.message()));
    TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<BackendGraph> graph, CaptureCurrent(what));
    verify_graphs.push_back(std::move(graph));
  }
  graphs_ = std::move(graphs);
  verify_graphs_ = std::move(verify_graphs);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Logits>> DecodeGraphs::Forward(const StepMetadata& step) {
  if (absl::Status st = Run(step); !st.ok()) return st;
  return model_.ReadLogits(step.num_logits_rows());
}

int64_t DecodeGraphs::VerifyGraphFor(const StepMetadata& step) const {
  const int32_t S = step.num_seqs(), T = step.num_tokens();
  if (verify_graphs_.empty() || step.num_decode_seqs != 0 || S < 1 || T <= S ||
      step.num_logits_rows() != T || std::ssize(step.query_start) != S + 1) {
    return -1;
  }
  for (int32_t s = 0; s < S; ++s) {  // at most K proposals each (one prefill tile each on the CUDA backend)
    if (step.query_start[static_cast<size_t>(s) + 1] - step.query_start[static_cast<size_t>(s)] - 1 >
        proposals_.back()) {
      return -1;
    }
  }
  const VerifyGraphShape shape{S, T};
  auto it = std::lower_bound(shapes_.begin(), shapes_.end(), shape);
  return it != shapes_.end() && *it == shape ? it - shapes_.begin() : -1;
}

absl::Status DecodeGraphs::Run(const StepMetadata& step) {
  if (const int64_t index = VerifyGraphFor(step); index >= 0) {
    if (!padded_.AssignWithColumns(step, capacity_.max_blocks_per_seq(), cache_.block_size()).ok()) {
      return model_.Compute(step, cache_);
    }
    TPSERVE_RETURN_IF_ERROR(model_.BeginStep(padded_.view(), cache_));
    verify_graphs_[static_cast<size_t>(index)]->Replay();
    ++replays_;
    ++verify_replays_;
    return absl::OkStatus();
  }
  const int32_t bucket = DecodeGraphBucket(sizes_, step.num_seqs());
  if (graphs_.empty() || step.num_prefill_seqs != 0 || step.num_seqs() < 1 || bucket == 0 ||
      !padded_.AssignPaddedDecode(step, bucket, capacity_.max_blocks_per_seq(), cache_.block_size()).ok()) {
    return model_.Compute(step, cache_);
  }
  // The padded step is validated by BeginStep like any other (bad block ids,
  // slots or positions of the real rows are INVALID_ARGUMENT as in eager mode).
  TPSERVE_RETURN_IF_ERROR(model_.BeginStep(padded_.view(), cache_));
  const size_t index = static_cast<size_t>(std::lower_bound(sizes_.begin(), sizes_.end(), bucket) - sizes_.begin());
  graphs_[index]->Replay();
  ++replays_;
  return absl::OkStatus();
}

}  // namespace tpserve

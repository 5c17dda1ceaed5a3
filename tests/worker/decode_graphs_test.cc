// Decode graphs on the CPU: the bucket sizes, the padding of a decode step,
// and (the property graphs rely on) that a step padded to its bucket and to
// the capacity's block-table columns gives the real sequences the same logits
// as the unpadded step while its padding rows write nothing to the KV cache.
// Then the whole DecodeGraphs flow (warm-up, capture, BeginStep + Replay, copy
// of the real rows) through a CPU backend that records ops instead of running
// them while "capturing" and replays them later, for decode steps and for
// verification steps (1 to 8 sequences with their own k speculative
// proposals, keyed by the step's sequences and tokens).
#include "worker/decode_graphs.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/step_batch.h"
#include "worker/step_runner.h"
#include "gtest/gtest.h"
#include "tests/worker/worker_test_util.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {

using testing_util::TempDir;

TEST(DecodeGraphBatchSizes, PowersOfTwoToEightThenMultiplesOfSixteen) {
  const std::vector<int32_t> s256 = DecodeGraphBatchSizes(256, 2048);
  std::vector<int32_t> want{1, 2, 4, 8};
  for (int32_t b = 16; b <= 256; b += 16) want.push_back(b);
  EXPECT_EQ(s256, want);
  EXPECT_EQ(DecodeGraphBatchSizes(20, 2048), (std::vector<int32_t>{1, 2, 4, 8, 16, 20}));
  EXPECT_EQ(DecodeGraphBatchSizes(48, 2048), (std::vector<int32_t>{1, 2, 4, 8, 16, 32, 48}));
  EXPECT_EQ(DecodeGraphBatchSizes(3, 2048), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(DecodeGraphBatchSizes(1, 2048), (std::vector<int32_t>{1}));
  EXPECT_EQ(DecodeGraphBatchSizes(256, 10), (std::vector<int32_t>{1, 2, 4, 8, 10}));  // B rows are B tokens
  EXPECT_TRUE(DecodeGraphBatchSizes(0, 2048).empty());
  EXPECT_TRUE(DecodeGraphBatchSizes(8, 0).empty());
}

TEST(DecodeGraphBucket, SmallestBucketThatHoldsTheBatch) {
  const std::vector<int32_t> sizes = DecodeGraphBatchSizes(256, 2048);
  EXPECT_EQ(DecodeGraphBucket(sizes, 1), 1);
  EXPECT_EQ(DecodeGraphBucket(sizes, 3), 4);
  EXPECT_EQ(DecodeGraphBucket(sizes, 7), 8);
  EXPECT_EQ(DecodeGraphBucket(sizes, 9), 16);
  EXPECT_EQ(DecodeGraphBucket(sizes, 19), 32);
  EXPECT_EQ(DecodeGraphBucket(sizes, 255), 256);
  EXPECT_EQ(DecodeGraphBucket(sizes, 257), 0);
  EXPECT_EQ(DecodeGraphBucket(DecodeGraphBatchSizes(20, 2048), 17), 20);
}

// A decode step of sequences with the given context lengths (after this step)
// and block tables, one new token each.
StepBatch DecodeStep(const std::vector<int32_t>& tokens, const std::vector<int32_t>& lens,
                     const std::vector<std::vector<int32_t>>& blocks, int32_t block_size) {
  std::vector<StepSequence> seqs;
  for (size_t s = 0; s < tokens.size(); ++s) seqs.push_back({{&tokens[s], 1}, lens[s] - 1, blocks[s]});
  absl::StatusOr<StepBatch> batch = StepBatch::Build(seqs, block_size);
  EXPECT_TRUE(batch.ok()) << batch.status();
  return batch.ok() ? *std::move(batch) : StepBatch();
}

TEST(PaddedDecodeStep, RealRowsFirstThenHarmlessPadding) {
  const StepBatch step = DecodeStep({7, 9}, {5, 2}, {{3, 1}, {4}}, 4);
  StepBatch padded;
  ASSERT_TRUE(padded.AssignPaddedDecode(step.view(), 4, 6, 4).ok());
  const StepMetadata m = padded.view();
  const StepBatch::Arrays& a = padded.arrays();
  EXPECT_EQ(m.num_prefill_seqs, 0);
  EXPECT_EQ(m.num_decode_seqs, 4);
  EXPECT_EQ(m.max_blocks_per_seq, 6);
  EXPECT_EQ(a.token_ids, (std::vector<int32_t>{7, 9, 0, 0}));
  EXPECT_EQ(a.positions, (std::vector<int32_t>{4, 1, 0, 0}));
  EXPECT_EQ(a.slot_mapping, (std::vector<int64_t>{4 * 1 + 0, 4 * 4 + 1, -1, -1}));
  EXPECT_EQ(a.seq_lens, (std::vector<int32_t>{5, 2, 1, 1}));
  EXPECT_EQ(a.query_start, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(a.logits_indices, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(a.block_tables, (std::vector<int32_t>{3, 1, -1, -1, -1, -1,  //
                                                  4, -1, -1, -1, -1, -1,  //
                                                  0, -1, -1, -1, -1, -1,  //
                                                  0, -1, -1, -1, -1, -1}));

  // Errors: a prefill, more sequences than the bucket, a context beyond the columns.
  StepMetadata prefill = step.view();
  prefill.num_prefill_seqs = 1;
  prefill.num_decode_seqs = 1;
  EXPECT_EQ(padded.AssignPaddedDecode(prefill, 4, 6, 4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(padded.AssignPaddedDecode(step.view(), 1, 6, 4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(padded.AssignPaddedDecode(step.view(), 4, 1, 4).code(), absl::StatusCode::kInvalidArgument);
  // All padding (the warm-up step).
  ASSERT_TRUE(padded.AssignPaddedDecode(StepMetadata{}, 2, 3, 4).ok());
  EXPECT_EQ(padded.arrays().slot_mapping, (std::vector<int64_t>{-1, -1}));
}

// Copies every layer's K and V of a CPU cache.
std::vector<float> Snapshot(const KvCache& cache) {
  std::vector<float> out;
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    const KvCacheLayer layer = cache.layer(l);
    for (const Tensor* t : {&layer.k, &layer.v}) {
      const float* p = t->ptr<float>();
      out.insert(out.end(), p, p + t->numel());
    }
  }
  return out;
}

// Row width of a slot in a cache snapshot: [layers][K, V][num_blocks · block_size, width].
int64_t SlotWidth(const KvCache& cache) { return cache.shape().num_kv_heads * cache.shape().head_dim; }

void Restore(const std::vector<float>& snapshot, KvCache& cache) {
  size_t at = 0;
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    const KvCacheLayer layer = cache.layer(l);
    for (const Tensor* t : {&layer.k, &layer.v}) {
      std::memcpy(t->data, snapshot.data() + at, t->nbytes());
      at += static_cast<size_t>(t->numel());
    }
  }
}

class DecodeGraphsModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    testing_util::MakeModel(dir_->path() / "qwen3",
                            "--arch qwen3 --hidden 64 --intermediate 96 --layers 2 --heads 4 --kv-heads 2 "
                            "--head-dim 32 --vocab 301 --dtype f32 --tie 0 --seed 21");
    testing_util::MakeModel(dir_->path() / "llama",
                            "--arch llama --hidden 96 --intermediate 160 --layers 2 --heads 6 --kv-heads 2 "
                            "--vocab 263 --dtype bf16 --tie 1 --seed 22 --rope-scaling llama3");
  }
  static void TearDownTestSuite() { delete dir_; }

  // extra_logits_rows: the rows speculative proposals may add to a step.
  std::unique_ptr<Model> Load(Backend& backend, const std::string& name, int64_t extra_logits_rows = 0) {
    ModelOptions options;
    options.max_num_tokens = 512;
    options.max_num_seqs = 32;
    options.max_position = 96;  // 24 block-table columns of 4 tokens
    options.max_num_logits_rows = options.max_num_seqs + extra_logits_rows;
    absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(dir_->path() / name, backend, *comm_, options);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *std::move(m) : nullptr;
  }

  // S sequences with random prompts of 1..20 tokens in blocks handed out in a
  // shuffled order (so block 0, which padding rows read, belongs to one of
  // them), prefilled in one step. Returns their lengths; fills tables / last.
  std::vector<int32_t> Prefill(Model& m, KvCache& cache, int S, std::mt19937& rng,
                               std::vector<std::vector<int32_t>>& tables, std::vector<int32_t>& last) {
    std::vector<int32_t> free_blocks(static_cast<size_t>(cache.num_blocks()));
    for (size_t i = 0; i < free_blocks.size(); ++i) free_blocks[i] = static_cast<int32_t>(i);
    std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(S));
    std::vector<int32_t> lens;
    tables.assign(static_cast<size_t>(S), {});
    for (size_t s = 0; s < static_cast<size_t>(S); ++s) {
      for (int b = 0; b < kBlocksPerSeq; ++b) {
        tables[s].push_back(free_blocks.back());
        free_blocks.pop_back();
      }
      const int32_t n = 1 + static_cast<int32_t>(rng() % 20);
      for (int32_t p = 0; p < n; ++p) prompts[s].push_back(static_cast<int32_t>(rng() % 250));
      lens.push_back(n);
    }
    std::vector<StepSequence> seqs;
    for (size_t s = 0; s < static_cast<size_t>(S); ++s) seqs.push_back({prompts[s], 0, tables[s]});
    absl::StatusOr<StepBatch> step = StepBatch::Build(seqs, cache.block_size());
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) return lens;
    absl::StatusOr<std::optional<Logits>> out = m.Forward(step->view(), cache);
    EXPECT_TRUE(out.ok()) << out.status();
    last.clear();
    for (int s = 0; s < S; ++s) last.push_back(static_cast<int32_t>(rng() % 250));
    return lens;
  }

  static constexpr int32_t kBlockSize = 4;
  static constexpr int32_t kBlocksPerSeq = 8;  // 32 tokens: prompt (<= 20) + decode steps
  static constexpr int kDecodeSteps = 4;
  static TempDir* dir_;
  std::unique_ptr<Communicator> comm_ = MakeSoloCommunicator();
};
TempDir* DecodeGraphsModelTest::dir_ = nullptr;

// The property CUDA graphs rely on, run eagerly on the CPU backend: the padded
// step's real rows equal the unpadded step's, and the padded step writes only
// the real tokens' slots (every other slot of every layer, block 0 included,
// is bit-identical to before the step). Exactly: the CPU backend is
// batch-invariant (docs/architecture.md, "The CPU backend's numerics"), so the
// padding rows change no bit of the real ones.
TEST_F(DecodeGraphsModelTest, PaddedDecodeStepMatchesUnpaddedAndLeavesTheCacheAlone) {
  const uint32_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::unique_ptr<Backend> backend = MakeCpuBackend();
  for (const std::string name : {"qwen3", "llama"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Model> m = Load(*backend, name);
    ASSERT_NE(m, nullptr);
    const StepCapacity capacity = StepCapacityFor(*m, kBlockSize);
    const std::vector<int32_t> sizes = DecodeGraphBatchSizes(capacity.max_seqs, capacity.max_tokens);
    for (int S : {1, 3, 7, 19}) {
      SCOPED_TRACE(testing::Message() << "batch " << S);
      const int32_t bucket = DecodeGraphBucket(sizes, S);
      ASSERT_EQ(bucket, S == 1 ? 1 : S == 3 ? 4 : S == 7 ? 8 : 32);
      absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend, m->kv_cache_shape(S * kBlocksPerSeq, kBlockSize));
      ASSERT_TRUE(cache.ok()) << cache.status();
      std::vector<std::vector<int32_t>> tables;
      std::vector<int32_t> tokens;
      std::vector<int32_t> lens = Prefill(*m, *cache, S, rng, tables, tokens);
      for (int step = 0; step < kDecodeSteps; ++step) {
        for (int32_t& len : lens) ++len;
        const StepBatch decode = DecodeStep(tokens, lens, tables, kBlockSize);
        const std::vector<float> before = Snapshot(*cache);
        absl::StatusOr<std::optional<Logits>> plain = m->Forward(decode.view(), *cache);
        ASSERT_TRUE(plain.ok()) << plain.status();
        const std::vector<float> after_plain = Snapshot(*cache);
        Restore(before, *cache);

        StepBatch padded;
        ASSERT_TRUE(padded.AssignPaddedDecode(decode.view(), bucket, capacity.max_blocks_per_seq(), kBlockSize).ok());
        absl::StatusOr<std::optional<Logits>> pad = m->Forward(padded.view(), *cache);
        ASSERT_TRUE(pad.ok()) << pad.status();
        ASSERT_EQ((*pad)->num_seqs, bucket);
        const Logits& a = **plain;
        const Logits& b = **pad;
        for (int s = 0; s < S; ++s) {
          const auto ra = a.row(s), rb = b.row(s);
          ASSERT_EQ(ra.size(), rb.size());
          EXPECT_EQ(0, std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float)))
              << "step " << step << " sequence " << s << ": the padded step's logits differ in their bits";
        }
        const std::vector<float> after_pad = Snapshot(*cache);
        ASSERT_EQ(after_pad.size(), before.size());
        const size_t width = static_cast<size_t>(SlotWidth(*cache));
        std::vector<bool> real(after_pad.size() / width, false);  // per slot row of the snapshot
        const size_t slots_per_tensor = static_cast<size_t>(cache->num_blocks() * kBlockSize);
        for (size_t t = 0; t < real.size() / slots_per_tensor; ++t) {
          for (int64_t slot : decode.arrays().slot_mapping) real[t * slots_per_tensor + static_cast<size_t>(slot)] = true;
        }
        int64_t untouched_changed = 0, real_changed = 0;
        for (size_t row = 0; row < real.size(); ++row) {
          for (size_t j = row * width; j < (row + 1) * width; ++j) {
            if (real[row]) {
              real_changed += std::memcmp(&after_pad[j], &after_plain[j], sizeof(float)) != 0;
            } else if (std::memcmp(&after_pad[j], &before[j], sizeof(float)) != 0) {
              ++untouched_changed;
            }
          }
        }
        EXPECT_EQ(untouched_changed, 0) << "step " << step << ": padding rows wrote the KV cache";
        EXPECT_EQ(real_changed, 0) << "step " << step << ": the real tokens' K/V differ in their bits";
        for (int s = 0; s < S; ++s) tokens[static_cast<size_t>(s)] = static_cast<int32_t>(testing_util::Argmax(a.row(s)));
      }
    }
  }
}

// A CPU backend that "captures": between BeginCapture and EndCapture the ops
// are recorded (with their arguments) instead of run, and Replay runs them on
// whatever step is current, as a CUDA graph reads the static step buffers.
// Anything that cannot be captured on a GPU fails the test when called then.
class RecordingBackend final : public Backend {
 public:
  std::string name() const override { return "recording-cpu"; }
  Device device() const override { return Device::kCpu; }
  DType compute_dtype() const override { return DType::kF32; }
  using Backend::TryAllocate;
  absl::StatusOr<Buffer> TryAllocate(DType dtype, std::span<const int64_t> shape) override {
    NotCapturing("Allocate");
    return cpu_->TryAllocate(dtype, shape);
  }
  void CopyFromHost(const void* src, DType src_dtype, Tensor dst) override {
    NotCapturing("CopyFromHost");
    cpu_->CopyFromHost(src, src_dtype, dst);
  }
  void CopyToHostF32(const Tensor& src, float* dst) override {
    NotCapturing("CopyToHostF32");
    cpu_->CopyToHostF32(src, dst);
  }
  void Copy(const Tensor& src, Tensor dst) override {
    Do([=, this] { cpu_->Copy(src, dst); });
  }
  void Synchronize() override { NotCapturing("Synchronize"); }
  absl::Status Reserve(const StepCapacity& capacity) override {
    NotCapturing("Reserve");
    reserved_ = capacity.max_seqs > 0;
    return absl::OkStatus();
  }
  absl::Status BeginStep(const StepMetadata& step, int64_t num_blocks, int32_t block_size,
                         int64_t max_position) override {
    NotCapturing("BeginStep");
    ++begin_steps_;
    return cpu_->BeginStep(step, num_blocks, block_size, max_position);
  }
  bool SupportsGraphs() const override { return true; }
  absl::Status BeginCapture() override {
    if (!reserved_) return absl::FailedPreconditionError("Reserve first");
    capturing_ = true;
    recorded_.clear();
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<BackendGraph>> EndCapture() override {
    capturing_ = false;
    auto g = std::make_unique<Graph>();
    g->ops = std::move(recorded_);
    g->replays = &replays_;
    return std::unique_ptr<BackendGraph>(std::move(g));
  }

  void Embedding(const Tensor& table, int64_t vocab_start, Tensor out) override {
    Do([=, this] { cpu_->Embedding(table, vocab_start, out); });
  }
  void Linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor y) override {
    Do([=, this] { cpu_->Linear(x, w, bias, y); });
  }
  void RmsNorm(const Tensor& x, const Tensor& w, float eps, Tensor out) override {
    Do([=, this] { cpu_->RmsNorm(x, w, eps, out); });
  }
  void AddRmsNorm(Tensor x, Tensor residual, const Tensor& w, float eps) override {
    Do([=, this] { cpu_->AddRmsNorm(x, residual, w, eps); });
  }
  void QkNormRope(Tensor qkv, const AttentionShape& shape, const Tensor* q_norm, const Tensor* k_norm,
                  float eps, const Tensor& rope) override {
    Do([=, this] { cpu_->QkNormRope(qkv, shape, q_norm, k_norm, eps, rope); });
  }
  void SiluMul(const Tensor& gate_up, Tensor out) override {
    Do([=, this] { cpu_->SiluMul(gate_up, out); });
  }
  void StoreKv(const Tensor& qkv, const AttentionShape& shape, KvCacheLayer cache) override {
    Do([=, this] { cpu_->StoreKv(qkv, shape, cache); });
  }
  void Attention(const Tensor& qkv, const AttentionShape& shape, KvCacheLayer cache, float scale,
                 Tensor out) override {
    Do([=, this] { cpu_->Attention(qkv, shape, cache, scale, out); });
  }
  void GatherRows(const Tensor& x, Tensor out) override {
    Do([=, this] { cpu_->GatherRows(x, out); });
  }

  int64_t replays() const { return replays_; }

 private:
  struct Graph final : BackendGraph {
    std::vector<std::function<void()>> ops;
    int64_t* replays = nullptr;
    void Replay() override {
      ++*replays;
      for (auto& op : ops) op();
    }
  };
  void Do(std::function<void()> op) {
    if (capturing_) {
      recorded_.push_back(std::move(op));
    } else {
      op();
    }
  }
  void NotCapturing(const char* what) const {
    if (capturing_) ADD_FAILURE() << what << " called while capturing: it could not be captured on a GPU";
  }

  std::unique_ptr<Backend> cpu_ = MakeCpuBackend();
  bool reserved_ = false, capturing_ = false;
  std::vector<std::function<void()>> recorded_;
  int64_t replays_ = 0;
  int64_t begin_steps_ = 0;
};

// The graph path end to end: decode steps of 1, 3, 7 and 19 sequences replay
// the captured bucket and give the same logits as plain eager steps; a step
// with a prefill runs eagerly.
TEST_F(DecodeGraphsModelTest, ReplayedDecodeStepsMatchEagerSteps) {
  const uint32_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  RecordingBackend recording;
  std::unique_ptr<Backend> cpu = MakeCpuBackend();
  std::unique_ptr<Model> graph_model = Load(recording, "qwen3");
  std::unique_ptr<Model> eager_model = Load(*cpu, "qwen3");
  ASSERT_NE(graph_model, nullptr);
  ASSERT_NE(eager_model, nullptr);
  ASSERT_TRUE(DecodeGraphs::Supported(recording, *comm_, *graph_model));
  ASSERT_FALSE(DecodeGraphs::Supported(*cpu, *comm_, *eager_model));
  for (int S : {1, 3, 7, 19}) {
    SCOPED_TRACE(testing::Message() << "batch " << S);
    absl::StatusOr<KvCache> gcache = KvCache::Allocate(recording, graph_model->kv_cache_shape(S * kBlocksPerSeq, kBlockSize));
    absl::StatusOr<KvCache> ecache = KvCache::Allocate(*cpu, eager_model->kv_cache_shape(S * kBlocksPerSeq, kBlockSize));
    ASSERT_TRUE(gcache.ok() && ecache.ok());
    const StepCapacity capacity = StepCapacityFor(*graph_model, kBlockSize);
    ASSERT_TRUE(recording.Reserve(capacity).ok());
    DecodeGraphs graphs(*graph_model, *gcache, recording, capacity);
    ASSERT_TRUE(graphs.Capture().ok());
    ASSERT_TRUE(graphs.captured());
    const int64_t replays_before = recording.replays();

    std::mt19937 rng_copy = rng;
    std::vector<std::vector<int32_t>> tables, etables;
    std::vector<int32_t> tokens, etokens;
    std::vector<int32_t> lens = Prefill(*graph_model, *gcache, S, rng, tables, tokens);
    Prefill(*eager_model, *ecache, S, rng_copy, etables, etokens);
    ASSERT_EQ(tables, etables);
    for (int step = 0; step < kDecodeSteps; ++step) {
      for (int32_t& len : lens) ++len;
      const StepBatch decode = DecodeStep(tokens, lens, tables, kBlockSize);
      absl::StatusOr<std::optional<Logits>> g = graphs.Forward(decode.view());
      absl::StatusOr<std::optional<Logits>> e = eager_model->Forward(decode.view(), *ecache);
      ASSERT_TRUE(g.ok()) << g.status();
      ASSERT_TRUE(e.ok()) << e.status();
      ASSERT_EQ((*g)->num_seqs, S);  // only the real rows come back
      // Exactly, although the replayed step's GEMMs have the bucket's rows (see above).
      ASSERT_EQ((*g)->values.size(), (*e)->values.size());
      EXPECT_EQ(0, std::memcmp((*g)->values.data(), (*e)->values.data(), (*g)->values.size() * sizeof(float)))
          << "step " << step << ": the replayed graph's logits differ in their bits";
      for (int s = 0; s < S; ++s) tokens[static_cast<size_t>(s)] = static_cast<int32_t>(testing_util::Argmax((*e)->row(s)));
    }
    EXPECT_EQ(recording.replays() - replays_before, kDecodeSteps);
    EXPECT_EQ(graphs.replays(), kDecodeSteps);
  }
}

TEST(VerifyGraphProposals, TheModelsExtraLogitsRowsUpToEight) {
  TempDir dir;
  testing_util::MakeModel(dir.path() / "m", "--arch qwen3 --hidden 32 --intermediate 48 --layers 1 --heads 2 "
                                            "--kv-heads 1 --head-dim 16 --vocab 263 --dtype f32 --seed 3");
  std::unique_ptr<Backend> cpu = MakeCpuBackend();
  std::unique_ptr<Communicator> comm = MakeSoloCommunicator();
  auto proposals = [&](int64_t max_tokens, int64_t max_seqs, int64_t logits_rows, int64_t max_position = 64,
                       int32_t max_per_sequence = 0) {
    ModelOptions o{.max_num_tokens = max_tokens, .max_num_seqs = max_seqs, .max_position = max_position,
                   .max_num_logits_rows = logits_rows};
    absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(dir.path() / "m", *cpu, *comm, o);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? VerifyGraphProposals(**m, max_per_sequence) : -1;
  };
  EXPECT_EQ(proposals(64, 8, 0), 0);        // no speculation: no verification graphs
  EXPECT_EQ(proposals(64, 8, 8 + 3), 3);    // the extra rows
  EXPECT_EQ(proposals(64, 8, 8 + 32), 8);   // at most kMaxVerifyGraphProposals
  EXPECT_EQ(proposals(5, 8, 8 + 32), 4);    // 1 + k tokens fit the step
  EXPECT_EQ(proposals(64, 8, 8 + 32, 6), 5);  // and the sequence
  // Load.num_speculative_tokens: no sequence carries more, so no graph past it.
  EXPECT_EQ(proposals(64, 8, 8 + 32, 64, 3), 3);
  EXPECT_EQ(proposals(64, 8, 8 + 32, 64, 12), 8);
  EXPECT_EQ(proposals(64, 8, 8 + 2, 64, 5), 2);
  EXPECT_EQ(proposals(64, 8, 0, 64, 4), 0);
}

// The worker's path: Load.num_speculative_tokens reaches the StepRunner,
// whose WarmUp captures verification graphs up to it and no further, while
// the extra logits rows (Load.max_num_draft_tokens: 8 k) would allow 8.
TEST_F(DecodeGraphsModelTest, StepRunnerCapturesVerificationGraphsUpToItsK) {
  RecordingBackend recording;
  std::unique_ptr<Model> model = Load(recording, "qwen3", 8 * 3);
  ASSERT_NE(model, nullptr);
  absl::StatusOr<KvCache> cache = KvCache::Allocate(recording, model->kv_cache_shape(kBlocksPerSeq, kBlockSize));
  ASSERT_TRUE(cache.ok()) << cache.status();
  const std::vector<std::pair<int32_t, std::vector<int32_t>>> cases = {
      {3, {1, 2, 3}}, {1, {1}}, {0, {1, 2, 3, 4, 5, 6, 7, 8}}, {16, {1, 2, 3, 4, 5, 6, 7, 8}}};
  for (const auto& [k, want] : cases) {
    SCOPED_TRACE(testing::Message() << "num_speculative_tokens " << k);
    StepRunner runner(*model, *cache, 0, StepRunnerOptions{.num_speculative_tokens = k});
    const absl::Status warm = runner.WarmUp();
    ASSERT_TRUE(warm.ok()) << warm;
    ASSERT_TRUE(runner.uses_graphs());
    EXPECT_EQ(runner.verify_graph_proposals(), want);
  }
  StepRunner eager(*model, *cache, 0, StepRunnerOptions{.enforce_eager = true, .num_speculative_tokens = 3});
  ASSERT_TRUE(eager.WarmUp().ok());
  EXPECT_TRUE(eager.verify_graph_proposals().empty());
}

TEST(AssignWithColumns, RelaysTheBlockTableAndKeepsTheRest) {
  const std::vector<int32_t> tokens{4, 5, 6};
  const std::vector<int32_t> table{7, 2, 9};
  const StepSequence seq{tokens, 5, table, 3};  // positions 5..7: blocks 7 and 2 of 4 tokens
  absl::StatusOr<StepBatch> step = StepBatch::Build({&seq, 1}, 4);
  ASSERT_TRUE(step.ok()) << step.status();
  StepBatch wide;
  ASSERT_TRUE(wide.AssignWithColumns(step->view(), 5, 4).ok());
  EXPECT_EQ(wide.arrays().max_blocks_per_seq, 5);
  EXPECT_EQ(wide.arrays().block_tables, (std::vector<int32_t>{7, 2, -1, -1, -1}));
  EXPECT_EQ(wide.arrays().token_ids, step->arrays().token_ids);
  EXPECT_EQ(wide.arrays().positions, step->arrays().positions);
  EXPECT_EQ(wide.arrays().slot_mapping, step->arrays().slot_mapping);
  EXPECT_EQ(wide.arrays().logits_indices, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(wide.arrays().num_prefill_seqs, 1);
  EXPECT_EQ(wide.AssignWithColumns(step->view(), 1, 4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wide.num_seqs(), 0);  // emptied
  EXPECT_EQ(wide.AssignWithColumns(step->view(), 5, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(VerifyGraphShapes, EveryTokenCountOfUpToEightSequences) {
  const std::vector<VerifyGraphShape> shapes = VerifyGraphShapes(32, 4, 8 * 4, 512);
  EXPECT_EQ(shapes.size(), 144u);  // 4 + 8 + ... + 32: the default k for 8 sequences
  ASSERT_FALSE(shapes.empty());
  EXPECT_EQ(shapes.front(), (VerifyGraphShape{1, 2}));
  EXPECT_EQ(shapes.back(), (VerifyGraphShape{8, 40}));
  EXPECT_TRUE(std::is_sorted(shapes.begin(), shapes.end()));
  for (int32_t s = 1; s <= 8; ++s) {  // every T from S + 1 to S + 4 S
    for (int32_t t = s; t <= 5 * s + 1; ++t) {
      const bool want = t > s && t <= 5 * s;
      EXPECT_EQ(std::binary_search(shapes.begin(), shapes.end(), VerifyGraphShape{s, t}), want)
          << s << " sequences of " << t << " tokens";
    }
  }
  // The extra logits rows bound a step's proposals: 4 rows, T <= S + 4.
  EXPECT_EQ(VerifyGraphShapes(4, 4, 4, 512).size(), 16u);
  EXPECT_EQ(VerifyGraphShapes(4, 4, 4, 512).back(), (VerifyGraphShape{4, 8}));
  // max_tokens bounds T; fewer than 8 sequences bound S; no k, no graphs.
  for (const VerifyGraphShape& shape : VerifyGraphShapes(32, 2, 64, 10)) EXPECT_LE(shape.tokens, 10);
  EXPECT_EQ(VerifyGraphShapes(32, 2, 64, 10).back(), (VerifyGraphShape{8, 10}));
  EXPECT_EQ(VerifyGraphShapes(3, 2, 64, 512).back(), (VerifyGraphShape{3, 9}));
  EXPECT_TRUE(VerifyGraphShapes(8, 0, 64, 512).empty());
}

// Verification steps through the graph path: steps of 1 to 8 sequences, each
// with its own k = 0..4 proposals (the last of the order at least 1), replay
// the captured (S, T) graph and give every one of their T logits rows the
// eager step's bits, however the rows are shared. Steps without a graph run
// eagerly with the same bits: a sequence with k = 5 (past the graphs' K), 9
// sequences (past 8), a one-token sequence after the last verifying one (a
// decode group), every k = 0 (a plain decode: the decode graph). The caches
// stay equal bit for bit (the all-padding warm-ups store nothing).
TEST_F(DecodeGraphsModelTest, ReplayedVerificationStepsMatchEagerSteps) {
  const uint32_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  constexpr int kProposals = 4;
  constexpr int kSeqs = 9;
  RecordingBackend recording;
  std::unique_ptr<Backend> cpu = MakeCpuBackend();
  std::unique_ptr<Model> graph_model = Load(recording, "qwen3", kSeqs * (kProposals + 1));
  std::unique_ptr<Model> eager_model = Load(*cpu, "qwen3", kSeqs * (kProposals + 1));
  ASSERT_NE(graph_model, nullptr);
  ASSERT_NE(eager_model, nullptr);
  absl::StatusOr<KvCache> gcache = KvCache::Allocate(recording, graph_model->kv_cache_shape(kSeqs * kBlocksPerSeq, kBlockSize));
  absl::StatusOr<KvCache> ecache = KvCache::Allocate(*cpu, eager_model->kv_cache_shape(kSeqs * kBlocksPerSeq, kBlockSize));
  ASSERT_TRUE(gcache.ok() && ecache.ok());
  const StepCapacity capacity = StepCapacityFor(*graph_model, kBlockSize);
  ASSERT_TRUE(recording.Reserve(ReservedCapacityFor(*graph_model, kBlockSize)).ok());
  DecodeGraphs graphs(*graph_model, *gcache, recording, capacity, kProposals);
  ASSERT_TRUE(graphs.Capture().ok());
  EXPECT_EQ(graphs.verify_proposals(), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(graphs.verify_shapes().size(), 144u);

  std::mt19937 rng_copy = rng;
  std::vector<std::vector<int32_t>> tables, etables;
  std::vector<int32_t> last, elast;
  std::vector<int32_t> lens = Prefill(*graph_model, *gcache, kSeqs, rng, tables, last);
  Prefill(*eager_model, *ecache, kSeqs, rng_copy, etables, elast);
  ASSERT_EQ(tables, etables);
  // Each step's k per sequence: for S = 1..8 one step with the last verifying
  // and one drawn freely, then the eager cases.
  auto draw = [&](int n, bool last_verifies) {
    std::vector<int> ks;
    for (int s = 0; s < n; ++s) ks.push_back(static_cast<int>(rng() % (kProposals + 1)));
    if (last_verifies) ks.back() = 1 + static_cast<int>(rng() % kProposals);
    return ks;
  };
  std::vector<std::vector<int>> steps;
  for (int n = 1; n <= 8; ++n) {
    steps.push_back(draw(n, true));
    steps.push_back(draw(n, false));
  }
  for (const std::vector<int>& ks : std::vector<std::vector<int>>{
           {kProposals + 1}, {2, kProposals + 1, 1}, draw(kSeqs, true), {3, 1, 0}, {0, 0, 0}, {2, 0, 3}}) {
    steps.push_back(ks);
  }
  int64_t verified = 0, decoded = 0;
  for (size_t step = 0; step < steps.size(); ++step) {
    const std::vector<int>& ks = steps[step];
    SCOPED_TRACE(testing::Message() << "step " << step << ": " << ks.size() << " sequences");
    std::vector<std::vector<int32_t>> tokens(ks.size());
    std::vector<StepSequence> seqs;
    for (size_t s = 0; s < ks.size(); ++s) {
      const int k = ks[s];
      if (lens[s] + k + 1 > kBlocksPerSeq * kBlockSize) lens[s] = kBlocksPerSeq * kBlockSize - k - 1;  // rewind: stay in the table
      tokens[s].push_back(last[s]);
      for (int i = 0; i < k; ++i) tokens[s].push_back(static_cast<int32_t>(rng() % 250));
      seqs.push_back({tokens[s], lens[s], tables[s], k + 1});
    }
    absl::StatusOr<StepBatch> batch = StepBatch::Build(seqs, kBlockSize);
    ASSERT_TRUE(batch.ok()) << batch.status();
    const int64_t verify_before = graphs.verify_replays(), replays_before = graphs.replays();
    absl::StatusOr<std::optional<Logits>> g = graphs.Forward(batch->view());
    absl::StatusOr<std::optional<Logits>> e = eager_model->Forward(batch->view(), *ecache);
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_EQ((*g)->num_seqs, batch->num_tokens());  // every verification row comes back
    ASSERT_EQ((*g)->values.size(), (*e)->values.size());
    EXPECT_EQ(0, std::memcmp((*g)->values.data(), (*e)->values.data(), (*g)->values.size() * sizeof(float)))
        << "the verification step's logits differ in their bits";
    const bool all_decode = std::all_of(ks.begin(), ks.end(), [](int k) { return k == 0; });
    const bool graph = ks.size() <= 8 && ks.back() >= 1 && *std::max_element(ks.begin(), ks.end()) <= kProposals;
    EXPECT_EQ(graphs.verify_replays() - verify_before, graph ? 1 : 0);
    EXPECT_EQ(graphs.replays() - replays_before, graph || all_decode ? 1 : 0);
    verified += graph ? 1 : 0;
    decoded += all_decode ? 1 : 0;
    // Accept a random prefix, as the sampler would: the rejected K/V stay in
    // their slots, unread, until a later step writes them anew.
    int64_t row = 0;  // sequence s's first logits row
    for (size_t s = 0; s < ks.size(); ++s) {
      const int accepted = static_cast<int>(rng() % static_cast<uint32_t>(ks[s] + 1));
      lens[s] += 1 + accepted;
      last[s] = static_cast<int32_t>(testing_util::Argmax((*e)->row(row + accepted)));
      row += ks[s] + 1;
    }
  }
  EXPECT_GE(verified, 9);  // the 8 steps whose last sequence verifies, and {2, 0, 3}
  EXPECT_EQ(graphs.replays(), verified + decoded);
  EXPECT_EQ(Snapshot(*gcache), Snapshot(*ecache));
}

}  // namespace
}  // namespace tpserve

#include "tests/testing/rank_engines.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "backend/cpu_backend.h"
#if defined(TPSERVE_WITH_GLOO)
#include "comm/gloo_communicator.h"
#include "comm/store.h"
#endif

namespace tpserve::testing_util {

std::unique_ptr<CpuRankGroup> CpuRankGroup::Make(int tp, const std::filesystem::path& store_dir) {
  auto g = std::unique_ptr<CpuRankGroup>(new CpuRankGroup);
  if (tp == 1) {
    g->backends_.push_back(MakeCpuBackend(2));
    g->comms_.push_back(MakeSoloCommunicator());
    return g;
  }
#if defined(TPSERVE_WITH_GLOO)
  g->backends_.resize(static_cast<size_t>(tp));
  g->comms_.resize(static_cast<size_t>(tp));
  std::vector<absl::Status> status(static_cast<size_t>(tp));
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r) {
    threads.emplace_back([&, r] {
      g->backends_[r] = MakeCpuBackend(1);
      absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(store_dir.string());
      if (!store.ok()) {
        status[r] = store.status();
        return;
      }
      GlooOptions gloo;
      gloo.timeout = std::chrono::seconds(60);
      absl::StatusOr<std::unique_ptr<Communicator>> comm = MakeGlooCommunicator(**store, r, tp, gloo);
      if (comm.ok()) g->comms_[r] = *std::move(comm);
      status[r] = comm.status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < tp; ++r) {
    EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    if (!status[r].ok()) return nullptr;
  }
  return g;
#else
  (void)store_dir;
  ADD_FAILURE() << "tp " << tp << " needs gloo, which this build lacks";
  return nullptr;
#endif
}

RankEngines CpuRankGroup::Create(const std::filesystem::path& model, const EngineOptions& options) {
  std::vector<RankParts> parts;
  for (int r = 0; r < size(); ++r) parts.push_back({backends_[r].get(), comms_[r].get()});
  return RankEngines::Create(model, parts, options);
}

RankEngines RankEngines::Create(const std::filesystem::path& model, const std::vector<RankParts>& ranks,
                                EngineOptions options) {
  RankEngines e;
  for (size_t r = 0; r < ranks.size(); ++r) {
    options.sampler = ranks[r].sampler;
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(model, *ranks[r].backend, *ranks[r].comm, options);
    EXPECT_TRUE(engine.ok()) << "rank " << r << ": " << engine.status();
    e.ranks_.push_back(engine.ok() ? *std::move(engine) : nullptr);
  }
  return e;
}

std::vector<GenerationResult> RankEngines::Generate(const std::vector<GenerationRequest>& requests,
                                                    GenerationStats* stats) {
  const size_t size = ranks_.size();
  std::vector<absl::StatusOr<std::vector<GenerationResult>>> out(size, absl::UnknownError("not run"));
  for (const std::unique_ptr<Engine>& engine : ranks_) {
    if (engine == nullptr) return {};
  }
  std::vector<std::thread> threads;
  for (size_t r = 0; r < size; ++r) threads.emplace_back([&, r] { out[r] = ranks_[r]->Generate(requests); });
  for (std::thread& t : threads) t.join();
  for (size_t r = 0; r < size; ++r) {
    EXPECT_TRUE(out[r].ok()) << "rank " << r << ": " << out[r].status();
    if (!out[r].ok()) return {};
  }
  for (size_t r = 1; r < size; ++r) {
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ((*out[r])[i].tokens, (*out[0])[i].tokens) << "rank " << r << ", request " << i;
    }
  }
  if (stats != nullptr && !ranks_.empty()) *stats = ranks_[0]->last_stats();
  return *std::move(out[0]);
}

std::string BitDifference(const GenerationResult& got, const GenerationResult& want) {
  if (got.tokens != want.tokens) return "the token ids differ";
  for (size_t i = 0; i < std::min(got.logprobs.size(), want.logprobs.size()); ++i) {
    if (std::memcmp(&got.logprobs[i], &want.logprobs[i], sizeof(float)) != 0) {
      return absl::StrCat("token ", i, "'s log-prob: ", got.logprobs[i], " vs ", want.logprobs[i], " alone");
    }
  }
  if (got.logprobs.size() != want.logprobs.size()) return "the log-probs differ in number";
  if (got.logits.size() != want.logits.size()) return "the logits differ in rows";
  for (size_t i = 0; i < got.logits.size(); ++i) {
    if (got.logits[i].size() != want.logits[i].size() ||
        std::memcmp(got.logits[i].data(), want.logits[i].data(), got.logits[i].size() * sizeof(float)) != 0) {
      return absl::StrCat("token ", i, "'s logits row differs in its bits");
    }
  }
  return "";
}

}  // namespace tpserve::testing_util

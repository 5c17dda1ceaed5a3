// A rank at tp = 4 keeps about a quarter of the weights resident: four real
// rank processes (tpserve-generate --tp 4) load a ~224 MB f32 model (4 wide
// layers) and run a step; each reports its peak RSS (VmHWM: resident anonymous
// memory plus the mmapped checkpoint pages it has mapped).
//
// Bound per rank:  peak <= model / 4 + fixed allowance, the allowance being
//   * the same rank's peak RSS on a tiny model through the same code path
//     (binary, libraries, gloo, BLAS), measured in this test (~11 MB);
//   * one decoder layer's bytes (52 MB here): checkpoint pages a rank touches
//     while reading its slices. The kernel maps pages around each fault
//     (fault-around) and a column slice (o_proj, down_proj) touches every row,
//     so reading a quarter maps more than a quarter; Model::Load releases the
//     mapping after each layer, so at most about one layer's pages are mapped;
//   * the loader's staging buffer, one shard of gate_up (8 MB here).
// A rank holding the whole model (224 MB) or keeping every touched page of all
// layers mapped (estimated ~150 MB) exceeds the bound (~125 MB).
#include <fstream>

#include "base/sanitizers.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/worker/worker_test_util.h"

namespace tpserve {
namespace {

using testing_util::RunCommand;
using testing_util::TempDir;

std::vector<double> PeakRssKb(const std::filesystem::path& model, int tp, const std::filesystem::path& out) {
  const std::string cmd = testing_util::GenerateTool() + " --model " + model.string() + " --tp " +
                          std::to_string(tp) + " --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 1 --max-num-tokens 16 "
                          "--max-num-seqs 1 --max-position 64 --output-json " + out.string() + " >/dev/null";
  EXPECT_EQ(RunCommand(cmd), 0) << cmd;
  nlohmann::json j;
  std::ifstream f(out);
  if (!f) return {};
  f >> j;
  return j["peak_rss_kb"].get<std::vector<double>>();
}

uint64_t FolderBytes(const std::filesystem::path& dir, const std::string& ext) {
  uint64_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ext) n += e.file_size();
  }
  return n;
}

// AddressSanitizer keeps freed blocks in quarantine and pads every allocation, so
// the peak RSS of a sanitized build (scripts/test-sanitized.sh) says nothing about
// the bound; the normal build checks it.
TEST(MemoryTest, EachRankAtTp4HoldsAboutAQuarterOfTheWeights) {
  if (kAddressSanitizer) GTEST_SKIP() << "peak RSS under AddressSanitizer includes its quarantine and redzones";
  TempDir dir;
  const std::filesystem::path tiny = dir.path() / "tiny", big = dir.path() / "big";
  testing_util::MakeModel(tiny, "--arch qwen3 --hidden 64 --intermediate 128 --layers 2 --heads 8 --kv-heads 4 "
                                "--head-dim 64 --vocab 4096 --dtype f32 --tie 0 --seed 1");
  testing_util::MakeModel(big, "--arch qwen3 --hidden 512 --intermediate 8192 --layers 4 --heads 8 --kv-heads 4 "
                               "--head-dim 64 --vocab 4096 --dtype f32 --tie 0 --seed 2");
  // One layer: q/k/v/o (512 + 256 + 256 + 512) x 512 + gate/up/down 3 x 8192 x 512 floats (+ norms).
  const double layer_kb = (1536.0 * 512 + 3 * 8192.0 * 512) * 4 / 1024;
  const double staging_kb = 2 * (8192.0 / 4) * 512 * 4 / 1024;
  const double model_kb = static_cast<double>(FolderBytes(big, ".safetensors")) / 1024.0;
  ASSERT_GE(model_kb, 200.0 * 1024) << "the model must be at least 200 MB";

  const std::vector<double> base = PeakRssKb(tiny, 4, dir.path() / "tiny.json");
  const std::vector<double> peak = PeakRssKb(big, 4, dir.path() / "big.json");
  ASSERT_EQ(base.size(), 4u);
  ASSERT_EQ(peak.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    const double bound = model_kb / 4 + base[r] + layer_kb + staging_kb;
    std::printf("rank %d: peak RSS %.1f MB (tiny model %.1f MB; model %.1f MB, quarter %.1f MB, bound %.1f MB)\n",
                r, peak[r] / 1024, base[r] / 1024, model_kb / 1024, model_kb / 4 / 1024, bound / 1024);
    EXPECT_LE(peak[r], bound) << "rank " << r;
    EXPECT_GT(peak[r], base[r] + model_kb / 4 * 0.9) << "rank " << r << " should hold its quarter";
  }
}

}  // namespace
}  // namespace tpserve

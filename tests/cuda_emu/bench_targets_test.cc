// bench/gpu/targets.cc: gpu_bench's table of issue 12's targets keeps the
// worst value recorded for each and judges it against the goals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "bench/gpu/bench_util.h"

namespace tpserve::gpu_bench {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The table's row for the target whose description starts with `what`.
std::string Row(const std::string& table, const std::string& what) {
  const size_t at = table.find("| " + what);
  return at == std::string::npos ? "" : table.substr(at, table.find('\n', at) - at);
}

TEST(BenchTargetsTest, KeepsTheWorstValueAndJudgesItAgainstTheGoals) {
  EXPECT_THAT(Row(TargetsTable(false), "batch-1 decode"), HasSubstr("| not measured | - |"));
  RecordTarget(Target::kBatch1Decode, 0.30);
  RecordTarget(Target::kBatch1Decode, 0.40);  // the worst of two batch-1 rows: the slower
  RecordTarget(Target::kDecodeAttention, 91);
  RecordTarget(Target::kDecodeAttention, 84);  // the worst context: the smaller share
  RecordTarget(Target::kThroughput, 20500);
  RecordTarget(Target::kSampler, 16);
  const std::string table = TargetsTable(false);
  EXPECT_THAT(Row(table, "batch-1 decode"), HasSubstr("| 0.4 ms | first goal only |"));
  EXPECT_THAT(Row(table, "decode attention"), HasSubstr("| 84 % | no |"));
  EXPECT_THAT(Row(table, "offline workload"), HasSubstr("| 20500 tok/s | yes |"));
  EXPECT_THAT(Row(table, "sampler"), HasSubstr("| 16 us | no |"));
  const std::string smoke = TargetsTable(true);
  EXPECT_THAT(smoke, HasSubstr("nothing below is judged"));
  EXPECT_THAT(smoke, Not(HasSubstr("| yes |")));
  EXPECT_THAT(Row(smoke, "sampler"), HasSubstr("| 16 us | - |"));
}

}  // namespace
}  // namespace tpserve::gpu_bench

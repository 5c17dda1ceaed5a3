// The sharding rules as a pure function: every tensor kind, GQA with kv heads
// below tp, vocab padding, and the errors for splits that do not divide.
#include "parallel/sharding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tpserve {
namespace {

using ::testing::HasSubstr;

// Odd sizes: D 24, F 36, 8 query heads of hd 6, 2 KV heads, V 37 (prime).
ModelConfig SmallConfig() {
  ModelConfig c;
  c.hidden_size = 24;
  c.intermediate_size = 36;
  c.num_layers = 1;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 6;
  c.vocab_size = 37;
  return c;
}

ShardSpec Shard(const std::string& name, int rank, int tp, const ModelConfig& c = SmallConfig()) {
  absl::StatusOr<std::vector<int64_t>> shape = ExpectedShape(name, c);
  EXPECT_TRUE(shape.ok()) << shape.status();
  absl::StatusOr<ShardSpec> spec = ShardFor(name, *shape, rank, tp, c);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ShardSpec{};
}

absl::Status ShardError(const std::string& name, int rank, int tp, const ModelConfig& c) {
  absl::StatusOr<std::vector<int64_t>> shape = ExpectedShape(name, c);
  if (!shape.ok()) return shape.status();
  return ShardFor(name, *shape, rank, tp, c).status();
}

TEST(ShardingTest, ExpectedShapes) {
  const ModelConfig c = SmallConfig();
  EXPECT_EQ(*ExpectedShape("model.embed_tokens.weight", c), (std::vector<int64_t>{37, 24}));
  EXPECT_EQ(*ExpectedShape("lm_head.weight", c), (std::vector<int64_t>{37, 24}));
  EXPECT_EQ(*ExpectedShape("model.layers.0.self_attn.q_proj.weight", c), (std::vector<int64_t>{48, 24}));
  EXPECT_EQ(*ExpectedShape("model.layers.0.self_attn.q_proj.bias", c), (std::vector<int64_t>{48}));
  EXPECT_EQ(*ExpectedShape("model.layers.0.self_attn.k_proj.weight", c), (std::vector<int64_t>{12, 24}));
  EXPECT_EQ(*ExpectedShape("model.layers.0.self_attn.v_proj.bias", c), (std::vector<int64_t>{12}));
  EXPECT_EQ(*ExpectedShape("model.layers.0.self_attn.o_proj.weight", c), (std::vector<int64_t>{24, 48}));
  EXPECT_EQ(*ExpectedShape("model.layers.0.mlp.gate_proj.weight", c), (std::vector<int64_t>{36, 24}));
  EXPECT_EQ(*ExpectedShape("model.layers.0.mlp.up_proj.weight", c), (std::vector<int64_t>{36, 24}));
  EXPECT_EQ(*ExpectedShape("model.layers.0.mlp.down_proj.weight", c), (std::vector<int64_t>{24, 36}));
  EXPECT_EQ(*ExpectedShape("model.layers.0.input_layernorm.weight", c), (std::vector<int64_t>{24}));
  EXPECT_EQ(*ExpectedShape("model.layers.0.post_attention_layernorm.weight", c), (std::vector<int64_t>{24}));
  EXPECT_EQ(*ExpectedShape("model.layers.0.self_attn.q_norm.weight", c), (std::vector<int64_t>{6}));
  EXPECT_EQ(*ExpectedShape("model.layers.0.self_attn.k_norm.weight", c), (std::vector<int64_t>{6}));
  EXPECT_EQ(*ExpectedShape("model.norm.weight", c), (std::vector<int64_t>{24}));
}

TEST(ShardingTest, UnknownNamesAreErrorsNamingTheTensor) {
  const ModelConfig c = SmallConfig();
  for (const char* name : {"model.layers.0.self_attn.rotary_emb.inv_freq", "weird", "model.norm.bias",
                           "model.embed_tokens.bias", "model.layers.0.mlp.up_proj.scale"}) {
    absl::StatusOr<std::vector<int64_t>> s = ExpectedShape(name, c);
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr(name));
  }
}

TEST(ShardingTest, QueryRowsByHeads) {
  for (int tp : {1, 2, 4, 8}) {
    for (int r = 0; r < tp; ++r) {
      const ShardSpec s = Shard("model.layers.3.self_attn.q_proj.weight", r, tp);
      EXPECT_EQ(s.kind, ShardKind::kRows);
      EXPECT_EQ(s.begin, r * (8 / tp) * 6);
      EXPECT_EQ(s.count, (8 / tp) * 6);
      EXPECT_EQ(s.local_shape, (std::vector<int64_t>{(8 / tp) * 6, 24}));
      const ShardSpec b = Shard("model.layers.3.self_attn.q_proj.bias", r, tp);
      EXPECT_EQ(b.kind, ShardKind::kRows);
      EXPECT_EQ(b.begin, s.begin);
      EXPECT_EQ(b.local_shape, (std::vector<int64_t>{(8 / tp) * 6}));
    }
  }
}

TEST(ShardingTest, KvRowsByHeadsWhenTpAtMostKvHeads) {
  for (int tp : {1, 2}) {
    for (int r = 0; r < tp; ++r) {
      for (const char* name :
           {"model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight"}) {
        const ShardSpec s = Shard(name, r, tp);
        EXPECT_EQ(s.kind, ShardKind::kRows);
        EXPECT_EQ(s.begin, r * (2 / tp) * 6);
        EXPECT_EQ(s.count, (2 / tp) * 6);
      }
    }
  }
}

TEST(ShardingTest, KvHeadsReplicatedInGroupsWhenTpAboveKvHeads) {
  // 2 KV heads: tp 4 -> ranks {0,1} hold head 0, {2,3} head 1; tp 8 -> groups of 4.
  for (int tp : {4, 8}) {
    for (int r = 0; r < tp; ++r) {
      const int head = r / (tp / 2);
      const ShardSpec k = Shard("model.layers.1.self_attn.k_proj.weight", r, tp);
      const ShardSpec vb = Shard("model.layers.1.self_attn.v_proj.bias", r, tp);
      EXPECT_EQ(k.kind, ShardKind::kRows);
      EXPECT_EQ(k.begin, head * 6) << "tp " << tp << " rank " << r;
      EXPECT_EQ(k.count, 6);
      EXPECT_EQ(k.local_shape, (std::vector<int64_t>{6, 24}));
      EXPECT_EQ(vb.begin, head * 6);
      EXPECT_EQ(vb.local_shape, (std::vector<int64_t>{6}));
      // The rank's query heads all read that KV head (GQA group of 4 query heads).
      const ShardSpec q = Shard("model.layers.1.self_attn.q_proj.weight", r, tp);
      const int64_t first_q = q.begin / 6, last_q = (q.begin + q.count) / 6 - 1;
      EXPECT_EQ(first_q / 4, head);
      EXPECT_EQ(last_q / 4, head);
    }
  }
  ModelConfig mqa = SmallConfig();
  mqa.num_kv_heads = 1;  // multi-query: every rank holds the one head
  for (int r = 0; r < 8; ++r) EXPECT_EQ(Shard("model.layers.0.self_attn.k_proj.weight", r, 8, mqa).begin, 0);
}

TEST(ShardingTest, OutputProjectionColumnsByHeads) {
  for (int tp : {1, 2, 4, 8}) {
    for (int r = 0; r < tp; ++r) {
      const ShardSpec s = Shard("model.layers.0.self_attn.o_proj.weight", r, tp);
      EXPECT_EQ(s.kind, ShardKind::kCols);
      EXPECT_EQ(s.begin, r * 48 / tp);
      EXPECT_EQ(s.count, 48 / tp);
      EXPECT_EQ(s.local_shape, (std::vector<int64_t>{24, 48 / tp}));
      // A bias of a row-parallel layer is replicated (added once, on rank 0).
      const ShardSpec b = Shard("model.layers.0.self_attn.o_proj.bias", r, tp);
      EXPECT_EQ(b.kind, ShardKind::kReplicated);
      EXPECT_EQ(b.local_shape, (std::vector<int64_t>{24}));
    }
  }
}

TEST(ShardingTest, MlpGateUpRowsDownColumns) {
  ModelConfig c = SmallConfig();
  c.intermediate_size = 40;  // divisible by 8
  for (int tp : {1, 2, 4, 8}) {
    for (int r = 0; r < tp; ++r) {
      for (const char* name : {"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"}) {
        const ShardSpec s = Shard(name, r, tp, c);
        EXPECT_EQ(s.kind, ShardKind::kRows);
        EXPECT_EQ(s.begin, r * 40 / tp);
        EXPECT_EQ(s.local_shape, (std::vector<int64_t>{40 / tp, 24}));
      }
      const ShardSpec d = Shard("model.layers.0.mlp.down_proj.weight", r, tp, c);
      EXPECT_EQ(d.kind, ShardKind::kCols);
      EXPECT_EQ(d.begin, r * 40 / tp);
      EXPECT_EQ(d.local_shape, (std::vector<int64_t>{24, 40 / tp}));
    }
  }
}

TEST(ShardingTest, NormsReplicated) {
  for (const char* name :
       {"model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
        "model.norm.weight", "model.layers.0.self_attn.q_norm.weight",
        "model.layers.0.self_attn.k_norm.weight"}) {
    const ShardSpec s = Shard(name, 3, 4);
    EXPECT_EQ(s.kind, ShardKind::kReplicated) << name;
    EXPECT_EQ(s.begin, 0);
    EXPECT_EQ(s.count, s.local_shape[0]);
  }
}

TEST(ShardingTest, VocabRowsPaddedToAMultipleOfTp) {
  // V = 37: tp 4 -> 10 rows each, the last rank reads 7 and pads 3.
  for (int tp : {1, 2, 4, 8}) {
    const int64_t vs = (37 + tp - 1) / tp;
    int64_t covered = 0;
    for (int r = 0; r < tp; ++r) {
      for (const char* name : {"model.embed_tokens.weight", "lm_head.weight"}) {
        const ShardSpec s = Shard(name, r, tp);
        EXPECT_EQ(s.kind, ShardKind::kRows);
        EXPECT_EQ(s.vocab_start, r * vs);
        EXPECT_EQ(s.begin, r * vs);
        EXPECT_EQ(s.local_shape, (std::vector<int64_t>{vs, 24}));
        EXPECT_EQ(s.count, std::min<int64_t>(vs, 37 - r * vs));
      }
      covered += Shard("lm_head.weight", r, tp).count;
    }
    EXPECT_EQ(covered, 37) << "tp " << tp;
  }
  // A vocab smaller than tp: trailing ranks read nothing, only padding.
  ModelConfig tiny = SmallConfig();
  tiny.vocab_size = 5;
  const ShardSpec last = Shard("model.embed_tokens.weight", 7, 8, tiny);
  EXPECT_EQ(last.count, 0);
  EXPECT_EQ(last.local_shape, (std::vector<int64_t>{1, 24}));
}

TEST(ShardingTest, NonDivisibleSplitsNameTensorAndTp) {
  ModelConfig c = SmallConfig();
  c.num_heads = 6;  // 6 heads over tp 4
  c.num_kv_heads = 2;
  absl::Status s = ShardError("model.layers.2.self_attn.q_proj.weight", 0, 4, c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model.layers.2.self_attn.q_proj.weight"));
  EXPECT_THAT(s.message(), HasSubstr("tp = 4"));
  EXPECT_THAT(s.message(), HasSubstr("num_attention_heads = 6"));
  s = ShardError("model.layers.2.self_attn.o_proj.weight", 1, 4, c);
  EXPECT_THAT(s.message(), HasSubstr("o_proj.weight"));
  EXPECT_THAT(s.message(), HasSubstr("tp = 4"));

  ModelConfig f = SmallConfig();  // F = 36 over tp 8
  for (const char* name : {"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.down_proj.weight"}) {
    s = ShardError(name, 5, 8, f);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(name));
    EXPECT_THAT(s.message(), HasSubstr("intermediate_size = 36"));
    EXPECT_THAT(s.message(), HasSubstr("tp = 8"));
  }

  ModelConfig kv = SmallConfig();  // 12 query heads over 3 KV heads
  kv.num_heads = 12;
  kv.num_kv_heads = 3;
  s = ShardError("model.layers.0.self_attn.k_proj.weight", 0, 2, kv);  // 3 over 2
  EXPECT_THAT(s.message(), HasSubstr("num_key_value_heads = 3"));
  EXPECT_THAT(s.message(), HasSubstr("tp = 2"));
  s = ShardError("model.layers.0.self_attn.v_proj.weight", 0, 4, kv);  // 4 > 3, not a multiple
  EXPECT_THAT(s.message(), HasSubstr("v_proj.weight"));
  EXPECT_THAT(s.message(), HasSubstr("tp = 4"));
  EXPECT_THAT(s.message(), HasSubstr("num_key_value_heads = 3"));
}

TEST(ShardingTest, ShapeMismatchNamesExpectedAndActual) {
  const ModelConfig c = SmallConfig();
  const std::vector<int64_t> wrong = {48, 25};
  absl::Status s = ShardFor("model.layers.0.self_attn.q_proj.weight", wrong, 0, 2, c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("q_proj.weight"));
  EXPECT_THAT(s.message(), HasSubstr("[48, 25]"));
  EXPECT_THAT(s.message(), HasSubstr("[48, 24]"));
  const std::vector<int64_t> one_d = {37 * 24};
  EXPECT_FALSE(ShardFor("model.embed_tokens.weight", one_d, 0, 1, c).ok());
}

TEST(ShardingTest, BadRankOrWorld) {
  const ModelConfig c = SmallConfig();
  const std::vector<int64_t> shape = {24};
  EXPECT_FALSE(ShardFor("model.norm.weight", shape, 2, 2, c).ok());
  EXPECT_FALSE(ShardFor("model.norm.weight", shape, -1, 2, c).ok());
  EXPECT_FALSE(ShardFor("model.norm.weight", shape, 0, 0, c).ok());
}

TEST(ShardingTest, LocalShape) {
  const ModelConfig c = SmallConfig();
  absl::StatusOr<LocalShape> l = LocalShapeFor(c, 3, 4);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->num_heads, 2);
  EXPECT_EQ(l->num_kv_heads, 1);
  EXPECT_EQ(l->intermediate, 9);
  EXPECT_EQ(l->vocab_rows, 10);
  EXPECT_EQ(l->vocab_start, 30);
  absl::Status s = LocalShapeFor(c, 0, 8).status();  // F = 36 over 8
  EXPECT_THAT(s.message(), HasSubstr("intermediate_size"));
  EXPECT_THAT(s.message(), HasSubstr("tp = 8"));
}

}  // namespace
}  // namespace tpserve

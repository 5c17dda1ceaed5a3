// Model::Load on broken checkpoints: every error names what is wrong.
#include <fstream>

#include "backend/cpu_backend.h"
#include "gtest/gtest.h"
#include "model/safetensors.h"
#include "nlohmann/json.hpp"
#include "tests/worker/worker_test_util.h"
#include "worker/model.h"

namespace tpserve {
namespace {

using testing_util::TempDir;

// A communicator of `world_size` ranks that never gets to talk: Load must fail
// before its first collective.
class UnconnectedCommunicator : public Communicator {
 public:
  explicit UnconnectedCommunicator(int world_size) : world_size_(world_size) {}
  int rank() const override { return 0; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduceSum(Tensor) override { return Fail(); }
  absl::Status Gather(const Tensor&, Tensor) override { return Fail(); }
  absl::Status AllGather(const Tensor&, Tensor) override { return Fail(); }
  absl::Status Broadcast(Tensor, int) override { return Fail(); }
  absl::Status Barrier() override { return Fail(); }

 private:
  static absl::Status Fail() { return absl::UnavailableError("no peers in this test"); }
  int world_size_;
};

class LoadErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing_util::MakeModel(model_, "--arch qwen2 --hidden 48 --intermediate 80 --layers 2 --heads 4 "
                                    "--kv-heads 2 --vocab 277 --dtype f32 --tie 0 --seed 5");
  }
  // Rewrites model.safetensors, letting `edit` drop (return false) or change tensors.
  void Rewrite(const std::function<bool(const std::string&, std::vector<int64_t>&, std::vector<float>&)>& edit) {
    std::vector<std::tuple<std::string, std::vector<int64_t>, std::vector<float>>> tensors;
    {
      absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(model_);
      ASSERT_TRUE(ckpt.ok()) << ckpt.status();
      for (const std::string& name : (*ckpt)->TensorNames()) {
        std::vector<int64_t> shape = (*(*ckpt)->Info(name))->shape;
        std::vector<float> values = *(*ckpt)->ReadF32(name);
        if (edit(name, shape, values)) tensors.emplace_back(name, shape, values);
      }
    }
    SafetensorsWriter writer;
    for (auto& [name, shape, values] : tensors) writer.AddF32(name, DType::kF32, shape, values);
    ASSERT_TRUE(writer.Write(model_ / "model.safetensors").ok());
  }
  absl::Status Load(int world_size = 1) {
    UnconnectedCommunicator comm(world_size);
    std::unique_ptr<Communicator> solo = MakeSoloCommunicator();
    Communicator& c = world_size == 1 ? *solo : comm;
    return Model::Load(model_, *backend_, c).status();
  }

  TempDir dir_;
  std::filesystem::path model_ = dir_.path() / "m";
  std::unique_ptr<Backend> backend_ = MakeCpuBackend();
};

void ExpectMentions(const absl::Status& s, std::initializer_list<std::string_view> words) {
  EXPECT_FALSE(s.ok());
  const std::string message(s.message());
  for (std::string_view w : words) {
    EXPECT_NE(message.find(w), std::string::npos) << "'" << w << "' not in: " << s;
  }
}

TEST_F(LoadErrorsTest, TheGeneratedModelLoads) { EXPECT_TRUE(Load().ok()) << Load(); }

TEST_F(LoadErrorsTest, MissingTensorIsNotFoundNamingIt) {
  Rewrite([](const std::string& name, auto&, auto&) { return name != "model.layers.1.mlp.down_proj.weight"; });
  const absl::Status s = Load();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  ExpectMentions(s, {"model.layers.1.mlp.down_proj.weight"});
}

TEST_F(LoadErrorsTest, MissingQwen2BiasIsAnError) {
  Rewrite([](const std::string& name, auto&, auto&) { return name != "model.layers.0.self_attn.k_proj.bias"; });
  ExpectMentions(Load(), {"model.layers.0.self_attn.k_proj.bias"});
}

TEST_F(LoadErrorsTest, MismatchedShapeIsInvalidArgumentNamingTheTensor) {
  Rewrite([](const std::string& name, std::vector<int64_t>& shape, std::vector<float>& values) {
    if (name == "model.layers.0.self_attn.o_proj.weight") {
      shape[1] -= 1;  // [48, 47]
      values.resize(static_cast<size_t>(shape[0] * shape[1]));
    }
    return true;
  });
  const absl::Status s = Load();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  ExpectMentions(s, {"model.layers.0.self_attn.o_proj.weight", "47"});
}

TEST_F(LoadErrorsTest, TpThatDoesNotDivideTheHeadsIsInvalidArgument) {
  const absl::Status s = Load(3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  ExpectMentions(s, {"3"});
  EXPECT_NE(std::string(s.message()).find("head"), std::string::npos) << s;
}

TEST_F(LoadErrorsTest, UnsupportedArchitectureIsInvalidArgumentNamingIt) {
  nlohmann::json config;
  std::ifstream(model_ / "config.json") >> config;
  config["architectures"] = {"GPT2LMHeadModel"};
  config["model_type"] = "gpt2";
  std::ofstream(model_ / "config.json") << config.dump(2);
  const absl::Status s = Load();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  ExpectMentions(s, {"GPT2LMHeadModel"});
}

TEST_F(LoadErrorsTest, MissingFolderIsAnErrorNamingIt) {
  std::filesystem::remove_all(model_);
  ExpectMentions(Load(), {model_.string()});
}

}  // namespace
}  // namespace tpserve

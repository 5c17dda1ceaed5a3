// Constrained output through rank 0's StepRunner on a random-weight model:
// generations under many regexes, JSON Schemas, choices, GBNF grammars and
// tool-call grammars are valid (every output that ended, checked by Python's
// `re` and python-jsonschema in validate_outputs.py; every output cut by
// max_tokens a prefix the matcher still accepts), and the same tokens come
// out with preemption and recompute mid-output, in lock-step as overlapped
// (decode_sampled), through the device-sampler path (MaskRows), and with
// jump-forward as with every token sampled.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "constrained/constraint_compiler.h"
#include "constrained/sequence_constraint.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sampling/token_mask.h"
#include "tests/testing/constrained_steps.h"
#include "tests/testing/seed.h"
#include "tests/worker/device_logits_sampler.h"
#include "tests/worker/worker_test_util.h"
#include "tools/grammar/model_vocabulary.h"
#include "worker/step_runner.h"

namespace tpserve {
namespace {

using nlohmann::json;
using testing_util::TempDir;
using K = OutputConstraint::Kind;

constexpr int32_t kBlockSize = 16;
constexpr int32_t kMaxSeqs = 8;
constexpr int32_t kMaxTokens = 40;

// One constrained request, and what its output is checked against.
struct Case {
  OutputConstraint constraint;
  std::string kind;  // validate_outputs.py's kind
  json spec;         // validate_outputs.py's spec
};

Case Regex(std::string re) {
  Case c{.constraint = {.kind = K::kRegex, .text = re}, .kind = "regex", .spec = re};
  return c;
}
Case Schema(const json& schema) {
  return Case{.constraint = {.kind = K::kJsonSchema, .text = schema.dump()}, .kind = "json_schema", .spec = schema};
}
// A GBNF grammar, checked against an equivalent Python regex.
Case Gbnf(std::string grammar, std::string python_regex) {
  return Case{.constraint = {.kind = K::kEbnf, .text = std::move(grammar)}, .kind = "regex", .spec = python_regex};
}
Case Tools(OutputConstraint::ToolFormat format, bool parallel) {
  const json weather = {{"type", "object"},
                        {"properties", {{"city", {{"type", "string"}, {"maxLength", 8}}},
                                        {"unit", {{"enum", {"c", "f"}}}}}},
                        {"required", {"city", "unit"}},
                        {"additionalProperties", false}};
  const json add = {{"type", "object"},
                    {"properties", {{"a", {{"type", "integer"}, {"minimum", 0}, {"maximum", 99}}},
                                    {"b", {{"type", "integer"}, {"minimum", 0}, {"maximum", 99}}}}},
                    {"required", {"a", "b"}},
                    {"additionalProperties", false}};
  OutputConstraint c{.kind = K::kToolCalls, .tool_format = format,
                     .functions = {{"get_weather", weather.dump()}, {"add", add.dump()}},
                     .parallel_tool_calls = parallel};
  const bool hermes = format == OutputConstraint::ToolFormat::kHermes;
  json spec = {{"parallel", parallel},
               {"functions", json::array({{{"name", "get_weather"}, {"parameters", weather}},
                                          {{"name", "add"}, {"parameters", add}}})}};
  return Case{.constraint = c, .kind = hermes ? "tool_calls_hermes" : "tool_calls_llama3", .spec = spec};
}

std::vector<Case> Cases() {
  std::vector<Case> cases = {
      Regex("[a-z]{1,8}"), Regex("(yes|no)"), Regex("\\d{3}-\\d{4}"), Regex("[A-Z][a-z]{1,6}( [A-Z][a-z]{1,6})?"),
      Regex("(0|[1-9][0-9]{0,3})(\\.[0-9]{1,2})?"), Regex("[a-f0-9]{8}"), Regex("(ab|cd){0,4}x"),
      Regex("[^\\n\"]{0,10}!"), Regex("\\w+@\\w+\\.(com|org)"), Regex("(true|false|null)"),
      Schema({{"type", "boolean"}}),
      Schema({{"type", "integer"}, {"minimum", -50}, {"maximum", 50}}),
      Schema({{"type", "number"}, {"minimum", 0}, {"maximum", 1}}),
      Schema({{"type", "string"}, {"maxLength", 6}}),
      Schema({{"enum", {"red", "green", "blue", 3, nullptr}}}),
      Schema({{"type", "string"}, {"pattern", "^[a-z]{2,5}$"}}),
      Schema({{"type", "array"}, {"items", {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}}, {"maxItems", 4}}),
      Schema({{"type", "object"},
              {"properties", {{"name", {{"type", "string"}, {"maxLength", 6}}},
                              {"age", {{"type", "integer"}, {"minimum", 0}, {"maximum", 120}}}}},
              {"required", {"name", "age"}},
              {"additionalProperties", false}}),
      Schema({{"type", "object"},
              {"properties", {{"ok", {{"type", "boolean"}}}, {"tags", {{"type", "array"}, {"items", {{"enum", {"a", "b"}}}},
                                                                       {"maxItems", 3}}}}},
              {"additionalProperties", false}}),
      Schema({{"anyOf", {{{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}, {{"const", "none"}}}}}),
      Schema({{"type", "object"},
              {"properties", {{"point", {{"type", "object"},
                                         {"properties", {{"x", {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}},
                                                         {"y", {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}}}},
                                         {"required", {"x", "y"}},
                                         {"additionalProperties", false}}}}},
              {"required", {"point"}},
              {"additionalProperties", false}}),
      Schema({{"$defs", {{"leaf", {{"enum", {1, 2}}}}}},
              {"type", "array"}, {"items", {{"$ref", "#/$defs/leaf"}}}, {"minItems", 1}, {"maxItems", 3}}),
      Schema({{"type", "string"}, {"format", "date"}}),
      Case{.constraint = {.kind = K::kJsonObject}, .kind = "json_object", .spec = nullptr},
      Case{.constraint = {.kind = K::kChoice, .choices = {"red", "green", "blue"}}, .kind = "choice",
           .spec = {"red", "green", "blue"}},
      Case{.constraint = {.kind = K::kChoice, .choices = {"A", "B", "AB"}}, .kind = "choice", .spec = {"A", "B", "AB"}},
      Gbnf("root ::= num (\"+\" num)*\nnum ::= [0-9]{1,3}\n", "[0-9]{1,3}(\\+[0-9]{1,3})*"),
      Gbnf("root ::= \"(\" root \")\" | \"x\"\n", "\\(*x\\)*"),  // balance checked by the matcher replay
      Gbnf("root ::= item (\", \" item){0,2}\nitem ::= \"cat\" | \"dog\" | [a-c]+\n",
           "(cat|dog|[a-c]+)(, (cat|dog|[a-c]+)){0,2}"),
      Tools(OutputConstraint::ToolFormat::kHermes, /*parallel=*/true),
      Tools(OutputConstraint::ToolFormat::kHermes, /*parallel=*/false),
      Tools(OutputConstraint::ToolFormat::kLlama3Json, /*parallel=*/true),
  };
  return cases;
}

using testing_util::ConstrainedJob;
using testing_util::ConstrainedOutput;
using testing_util::StepMode;

struct Job {
  const Case* c = nullptr;
  uint64_t seed = 0;
  float temperature = 1.0f;
};

class ConstrainedGenerationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    ASSERT_TRUE(testing_util::MakeModel(dir_->path() / "m",
                                        "--arch qwen3 --hidden 64 --intermediate 96 --layers 2 --heads 4 "
                                        "--kv-heads 2 --head-dim 32 --dtype f32 --seed 7"));
    absl::StatusOr<ModelVocabulary> v = LoadModelVocabulary(dir_->path() / "m");
    ASSERT_TRUE(v.ok()) << v.status();
    vocab_ = new ModelVocabulary(*std::move(v));
  }
  static void TearDownTestSuite() {
    delete vocab_;
    delete dir_;
  }

  void SetUp() override {
    backend_ = MakeCpuBackend();
    comm_ = MakeSoloCommunicator();
    ModelOptions options;
    options.max_num_tokens = 512;
    options.max_num_seqs = kMaxSeqs;
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir_->path() / "m", *backend_, *comm_, options);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend_, model_->kv_cache_shape(kMaxSeqs * 8, kBlockSize));
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::make_unique<KvCache>(*std::move(cache));
    compiler_ = std::make_unique<ConstraintCompiler>(
        []() -> absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> { return vocab_->vocabulary; });
    prompt_ = vocab_->tokenizer->Encode("Answer with what is asked:", false);
  }


  // Runs `jobs` (at most kMaxSeqs) to a stop id or kMaxTokens
  // (testing_util::RunConstrained).
  std::vector<ConstrainedOutput> Generate(std::span<const Job> jobs, StepMode mode, int preempt_every = 0,
                                          DeviceSampler* sampler = nullptr, int mask_threads = 1,
                                          bool jump_forward = true, int64_t* forced_tokens = nullptr) {
    std::vector<ConstrainedJob> constrained;
    for (const Job& j : jobs) {
      constrained.push_back({std::make_shared<const OutputConstraint>(j.c->constraint), j.seed, j.temperature});
    }
    testing_util::ConstrainedRun run{.prompt = prompt_, .stop_ids = vocab_->stop_ids, .max_tokens = kMaxTokens,
                                     .block_size = kBlockSize, .mode = mode, .preempt_every = preempt_every,
                                     .forced_tokens = forced_tokens};
    return testing_util::RunConstrained(*model_, *cache_,
                                        StepRunnerOptions{.sampler = sampler, .constraints = compiler_.get(),
                                                          .mask_threads = mask_threads, .jump_forward = jump_forward},
                                        constrained, run);
  }

  // Every output is a prefix the matcher accepts (complete where it stopped);
  // the complete ones go to validate_outputs.py.
  void CheckOutputs(std::span<const Job> jobs, std::span<const ConstrainedOutput> outs, json& cases) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      const ConstrainedOutput& o = outs[i];
      absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> g = compiler_->Compile(jobs[i].c->constraint);
      ASSERT_TRUE(g.ok()) << g.status();
      absl::StatusOr<std::unique_ptr<SequenceConstraint>> replay =
          SequenceConstraint::Create(*g, vocab_->vocabulary, jobs[i].c->constraint, o.tokens);
      EXPECT_TRUE(replay.ok()) << jobs[i].c->constraint.text << ": " << replay.status();
      std::vector<int32_t> text_ids = o.tokens;
      if (o.stopped) text_ids.pop_back();
      absl::StatusOr<std::string> text = vocab_->tokenizer->Decode(text_ids, /*skip_special_tokens=*/false);
      ASSERT_TRUE(text.ok()) << text.status();
      cases.push_back({{"kind", jobs[i].c->kind}, {"spec", jobs[i].c->spec}, {"text", *text}, {"complete", o.stopped}});
    }
  }

  static TempDir* dir_;
  static ModelVocabulary* vocab_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<ConstraintCompiler> compiler_;
  std::vector<int32_t> prompt_;
};

TempDir* ConstrainedGenerationTest::dir_ = nullptr;
ModelVocabulary* ConstrainedGenerationTest::vocab_ = nullptr;

// Every case compiles, and a few seeds of each generate valid output.
TEST_F(ConstrainedGenerationTest, OutputsAreValid) {
  const uint64_t seed = testing_util::TestSeed();
  const std::vector<Case> cases = Cases();
  std::vector<Job> jobs;
  for (const Case& c : cases) {
    ASSERT_TRUE(compiler_->Compile(c.constraint).ok()) << c.constraint.text << ": " << compiler_->Compile(c.constraint).status();
    for (uint64_t k = 0; k < 4; ++k) jobs.push_back(Job{.c = &c, .seed = seed * 1000 + k, .temperature = k == 3 ? 0.0f : 1.0f});
  }
  json checked = json::array();
  int stopped = 0;
  for (size_t first = 0; first < jobs.size(); first += kMaxSeqs) {
    const std::span<const Job> batch(jobs.data() + first, std::min<size_t>(kMaxSeqs, jobs.size() - first));
    const std::vector<ConstrainedOutput> outs = Generate(batch, StepMode::kOverlap);
    CheckOutputs(batch, outs, checked);
    for (const ConstrainedOutput& o : outs) stopped += o.stopped ? 1 : 0;
  }
  // The model is random: many outputs end, some are cut; both kinds must be there.
  EXPECT_GT(stopped, static_cast<int>(jobs.size()) / 3) << "seed " << seed;
  TempDir tmp;
  const auto file = tmp.path() / "cases.json";
  std::ofstream(file) << checked.dump();
  if (std::getenv("TPSERVE_DUMP_OUTPUTS") != nullptr) std::printf("%s\n", checked.dump(1).c_str());
  std::string report;
  const int rc = testing_util::RunCommand(
      "python3 " + std::string(TPSERVE_SOURCE_DIR) + "/tests/constrained/validate_outputs.py " + file.string(), &report);
  EXPECT_EQ(rc, 0) << report << "seed " << seed;
  std::printf("%s", report.c_str());
}

std::vector<Job> MixedJobs(const std::vector<Case>& cases, uint64_t seed) {
  std::vector<Job> jobs;
  for (size_t k = 0; k < kMaxSeqs; ++k) {
    jobs.push_back(Job{.c = &cases[(seed + k * 5) % cases.size()], .seed = seed + k, .temperature = 1.0f});
  }
  return jobs;
}

// Preemption and recompute (every 5th and 7th step) rebuild each matcher from
// the output so far: the same tokens as an uninterrupted run.
TEST_F(ConstrainedGenerationTest, PreemptionGivesTheSameOutput) {
  const uint64_t seed = testing_util::TestSeed();
  const std::vector<Case> cases = Cases();
  const std::vector<Job> jobs = MixedJobs(cases, seed);
  const std::vector<ConstrainedOutput> whole = Generate(jobs, StepMode::kOverlap);
  for (int every : {5, 7}) {
    const std::vector<ConstrainedOutput> preempted = Generate(jobs, StepMode::kOverlap, every);
    for (size_t i = 0; i < jobs.size(); ++i) {
      EXPECT_EQ(preempted[i].tokens, whole[i].tokens) << "sequence " << i << ", preempted every " << every
                                                      << " steps, seed " << seed;
    }
  }
}

// The overlapped pipeline (decode_sampled: the plan goes before the token is
// known) and lock-step (the plan carries the token) give the same tokens.
TEST_F(ConstrainedGenerationTest, OverlapAndLockStepAgree) {
  const uint64_t seed = testing_util::TestSeed();
  const std::vector<Case> cases = Cases();
  const std::vector<Job> jobs = MixedJobs(cases, seed + 1);
  const std::vector<ConstrainedOutput> overlap = Generate(jobs, StepMode::kOverlap);
  const std::vector<ConstrainedOutput> lock_step = Generate(jobs, StepMode::kLockStep);
  for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(overlap[i].tokens, lock_step[i].tokens) << i << " seed " << seed;
}

// Masks filled by several threads (each its own stride of the step's
// sequences, the compiled grammars and their mask caches shared) give the
// one thread's tokens, with preemption too.
TEST_F(ConstrainedGenerationTest, MaskThreadsGiveTheSameOutput) {
  const uint64_t seed = testing_util::TestSeed();
  const std::vector<Case> cases = Cases();
  const std::vector<Job> jobs = MixedJobs(cases, seed + 3);
  const std::vector<ConstrainedOutput> one = Generate(jobs, StepMode::kOverlap);
  for (int threads : {2, 3}) {
    const std::vector<ConstrainedOutput> many = Generate(jobs, StepMode::kOverlap, threads == 3 ? 5 : 0, nullptr, threads);
    for (size_t i = 0; i < jobs.size(); ++i) {
      EXPECT_EQ(many[i].tokens, one[i].tokens) << "sequence " << i << ", " << threads << " mask threads, seed " << seed;
    }
  }
}

// The device-sampler path (DeviceSampler::MaskRows on the logits in place,
// then Sample) gives the host path's tokens.
TEST_F(ConstrainedGenerationTest, DeviceSamplerPathAgreesWithHost) {
  const uint64_t seed = testing_util::TestSeed();
  const std::vector<Case> cases = Cases();
  const std::vector<Job> jobs = MixedJobs(cases, seed + 2);
  testing_util::DeviceLogitsSampler sampler;
  const std::vector<ConstrainedOutput> host = Generate(jobs, StepMode::kOverlap);
  const std::vector<ConstrainedOutput> device = Generate(jobs, StepMode::kOverlap, 0, &sampler);
  EXPECT_GT(sampler.masked_rows, 0);
  for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(device[i].tokens, host[i].tokens) << i << " seed " << seed;
}

// Jump-forward (a mask that allows one token gives it without the sampler)
// yields the tokens of sampling every one, greedy and seeded, for every case
// (regexes, schemas, choices, GBNF, tool calls) and every schema of the
// grammar corpus, on the host and the
// device-sampler path, overlapped and preempted; and it does skip sampler
// passes (the count is printed: the steps whose sampling it saved).
// The schemas of tests/grammar/data/json_schema_corpus.jsonl (156, in the
// shapes OpenAI strict mode, Pydantic, zod/MCP and LangChain send).
std::vector<Case> CorpusSchemas() {
  std::ifstream in(std::string(TPSERVE_SOURCE_DIR) + "/tests/grammar/data/json_schema_corpus.jsonl");
  EXPECT_TRUE(in) << "tests/grammar/data/json_schema_corpus.jsonl";
  std::vector<Case> cases;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::ordered_json entry = nlohmann::ordered_json::parse(line);  // keeps property order
    cases.push_back(Case{.constraint = {.kind = K::kJsonSchema, .text = entry["schema"].dump()}, .kind = "json_schema",
                         .spec = nullptr});
  }
  return cases;
}

TEST_F(ConstrainedGenerationTest, JumpForwardGivesTheTokensOfSampling) {
  const uint64_t seed = testing_util::TestSeed();
  std::vector<Case> cases = Cases();
  for (Case& c : CorpusSchemas()) cases.push_back(std::move(c));
  ASSERT_GT(cases.size(), 180u);
  std::vector<Job> jobs;
  for (size_t c = 0; c < cases.size(); ++c) {
    for (uint64_t k = 0; k < 2; ++k) jobs.push_back(Job{.c = &cases[c], .seed = seed * 100 + c, .temperature = k == 0 ? 0.0f : 1.0f});
  }
  int64_t forced_all = 0, tokens_all = 0;
  for (size_t first = 0; first < jobs.size(); first += kMaxSeqs) {
    const std::span<const Job> batch(jobs.data() + first, std::min<size_t>(kMaxSeqs, jobs.size() - first));
    const int round = static_cast<int>(first / kMaxSeqs);
    testing_util::DeviceLogitsSampler sampler;
    DeviceSampler* device = round % 2 == 1 ? &sampler : nullptr;  // every other batch on the device path
    const int preempt = round % 3 == 2 ? 5 : 0;
    int64_t forced = 0, unforced = 0;
    const std::vector<ConstrainedOutput> sampled =
        Generate(batch, StepMode::kOverlap, preempt, device, 1, /*jump_forward=*/false, &unforced);
    const std::vector<ConstrainedOutput> jumped = Generate(batch, StepMode::kOverlap, preempt, device, 1, true, &forced);
    EXPECT_EQ(unforced, 0);
    for (size_t i = 0; i < batch.size(); ++i) {
      EXPECT_EQ(jumped[i].tokens, sampled[i].tokens)
          << batch[i].c->constraint.text << ", temperature " << batch[i].temperature << ", round " << round << ", seed "
          << seed;
      tokens_all += std::ssize(jumped[i].tokens);
    }
    forced_all += forced;
  }
  EXPECT_GT(forced_all, 0) << "no mask allowed exactly one token: jump-forward untested, seed " << seed;
  std::printf("jump-forward: %lld of %lld tokens given without the sampler\n", static_cast<long long>(forced_all),
              static_cast<long long>(tokens_all));
}

// A grammar whose mask passes CompileLimits::max_mask_items (here 50; the
// grammar makes a parser set at every letter of every word token) ends its
// own sequence with the grammar's error at its first mask; the other
// sequences of the same steps keep their masks and give valid output, in
// both step modes.
TEST_F(ConstrainedGenerationTest, AGrammarThatGivesUpEndsOnlyItsSequence) {
  grammar::CompileLimits limits;
  limits.max_mask_items = 50;
  compiler_ = std::make_unique<ConstraintCompiler>(
      []() -> absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> { return vocab_->vocabulary; }, limits);
  const Case hostile = Gbnf("root ::= (w \" \"?)*+\nw ::= [a-z]+ | \"|\" root \")\"\n", "");
  const Case fine = Regex("[a-z]{1,8}");
  const Job jobs[] = {{&hostile, 1}, {&fine, 2}, {&hostile, 3}, {&fine, 4, 0.0f}};
  for (const StepMode mode : {StepMode::kOverlap, StepMode::kLockStep}) {
    const std::vector<ConstrainedOutput> outs = Generate(jobs, mode);
    for (size_t i = 0; i < std::size(jobs); ++i) {
      SCOPED_TRACE(::testing::Message() << "job " << i << ", overlap " << (mode == StepMode::kOverlap));
      if (jobs[i].c == &hostile) {
        EXPECT_NE(outs[i].error.find("more than 50 parser items (CompileLimits::max_mask_items"), std::string::npos)
            << outs[i].error;
        EXPECT_TRUE(outs[i].tokens.empty()) << "the token sampled without the mask is not output";
        continue;
      }
      EXPECT_EQ(outs[i].error, "");
      EXPECT_FALSE(outs[i].tokens.empty());
      absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> g = compiler_->Compile(fine.constraint);
      ASSERT_TRUE(g.ok()) << g.status();
      EXPECT_TRUE(SequenceConstraint::Create(*g, vocab_->vocabulary, fine.constraint, outs[i].tokens).ok());
    }
  }
}

// A constraint the engine refuses is INVALID_ARGUMENT for the plan, naming
// the sequence, and leaves the runner serving.
TEST_F(ConstrainedGenerationTest, RefusedConstraintIsInvalidArgument) {
  StepRunner runner(*model_, *cache_, 0, StepRunnerOptions{.constraints = compiler_.get()});
  StepPlan plan;
  NewSequencePlan n{.seq_id = 9, .prompt = prompt_, .token_ids = prompt_, .block_ids = {0, 1}};
  n.sampling.constraint = std::make_shared<const OutputConstraint>(OutputConstraint{.kind = K::kRegex, .text = "(a"});
  n.sample = true;
  plan.new_sequences.push_back(n);
  plan.order = {9};
  absl::StatusOr<std::vector<StepToken>> got = runner.Run(plan);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("sequence 9"), std::string::npos) << got.status();
  EXPECT_EQ(runner.num_sequences(), 0);
  plan.new_sequences[0].sampling.constraint.reset();
  EXPECT_TRUE(runner.Run(plan).ok());
}

}  // namespace
}  // namespace tpserve

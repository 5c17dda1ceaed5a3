// tpserve-generate: offline generation with the tensor-parallel engine.
//
//   tpserve-generate --model DIR [--tp N] --prompt-ids 1,2,3[;4,5] --max-tokens 16
//   tpserve-generate --model DIR --prompt "Hello" (needs DIR/tokenizer.json)
//   mpirun -np 2 tpserve-generate --model DIR --store-dir /shared/dir ...
//   tpserve-generate --model DIR --backend cuda --tp 2 ... (a GPU per rank: NCCL)
//
// With --tp N > 1 and no launcher around it, it starts N rank processes of
// itself through launcher/ (rendezvous through a temporary FileStore
// directory); under mpirun or torchrun each process is one rank. Each rank
// starts through rank/rank_start.h, as tpserve-worker's do. Rank 0 prints one
// line per prompt with the generated ids (and the text when a tokenizer was
// loaded) and writes --output-json when given.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/flag_spelling.h"
#include "base/tool_usage.h"
#include "base/proc_status.h"
#include "base/status_macros.h"
#include "comm/rank_env.h"
#include "comm/store.h"
#include "launcher/process_group.h"
#include "launcher/temp_dir.h"
#include "model/config.h"
#include "nlohmann/json.hpp"
#include "rank/rank_start.h"
#include "tokenizer/tokenizer.h"
#include "worker/engine.h"

ABSL_FLAG(std::string, model, "", "Hugging Face checkpoint folder (config.json + safetensors)");
ABSL_FLAG(int, tp, 1, "tensor-parallel ranks to start (ignored under mpirun/torchrun: their world size counts)");
ABSL_FLAG(std::string, prompt_ids, "", "prompt token ids, comma separated; ';' separates prompts");
ABSL_FLAG(std::string, prompt, "", "prompt text (tokenized with <model>/tokenizer.json)");
ABSL_FLAG(int, batch, 1, "repeat the prompts this many times (one sequence each)");
ABSL_FLAG(int64_t, max_tokens, 16, "tokens to generate per prompt");
ABSL_FLAG(double, temperature, 0.0, "0 = greedy");
ABSL_FLAG(int, top_k, -1, "-1 = off");
ABSL_FLAG(double, top_p, 1.0, "1 = off");
ABSL_FLAG(double, min_p, 0.0, "0 = off");
ABSL_FLAG(int64_t, seed, -1, "per-request seed; -1 = random");
ABSL_FLAG(bool, ignore_eos, false, "do not stop at the model's end-of-sequence tokens");
ABSL_FLAG(int, block_size, 16, "KV cache block size in tokens");
ABSL_FLAG(int64_t, num_blocks, 0, "KV cache blocks; 0 = enough for every prompt at once");
ABSL_FLAG(int64_t, max_num_tokens, 2048, "token budget of one step (longer prompts are chunked)");
ABSL_FLAG(int64_t, max_num_seqs, 256, "most sequences running at once (and so in one step)");
ABSL_FLAG(int64_t, max_position, 0, "RoPE table rows; 0 = config.json's max_position_embeddings");
ABSL_FLAG(int, threads, 1, "CPU backend GEMM threads per rank");
ABSL_FLAG(bool, enable_prefix_caching, true,
          "reuse the KV blocks of identical prompt prefixes (--noenable-prefix-caching or "
          "--enable-prefix-caching=false: off)");
ABSL_FLAG(bool, enforce_eager, false, "run every step eagerly: no CUDA graphs for decode steps");
ABSL_FLAG(bool, deterministic, false,
          "--backend cuda: batch-invariant kernels, sampler and all-reduce, so a sequence's tokens and logits "
          "do not depend on the rest of the batch (also TPSERVE_DETERMINISTIC=1; the CPU backend always is)");
ABSL_FLAG(std::string, backend, "cpu",
          "cpu, or cuda (the GPU of each rank's local rank; NCCL between ranks with a GPU each, "
          "gloo through host memory when ranks share one)");
ABSL_FLAG(std::string, output_json, "", "write tokens, stats and peak RSS per rank to this file (rank 0)");
ABSL_FLAG(bool, logits, false, "include every sampled step's logits in --output-json");
ABSL_FLAG(std::string, store_dir, "", "rendezvous directory shared by the ranks (needed under mpirun)");
ABSL_FLAG(std::string, dump_dir, "",
          "write every named intermediate of the first step to DIR/rank<r>.<layer>.<name>.f32 (raw float32)");
ABSL_FLAG(int, timeout_s, 120, "rendezvous and collective timeout");

namespace tpserve {
namespace {

absl::StatusOr<std::vector<std::vector<int32_t>>> ParsePromptIds(const std::string& text) {
  std::vector<std::vector<int32_t>> prompts;
  for (absl::string_view part : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    std::vector<int32_t> ids;
    for (absl::string_view tok : absl::StrSplit(part, ',', absl::SkipWhitespace())) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(tok, &id)) {
        return absl::InvalidArgumentError(absl::StrCat("--prompt-ids: '", tok, "' is not a token id"));
      }
      ids.push_back(id);
    }
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

// The prompts of --prompt (tokenized; the tokenizer is kept to print the text)
// or --prompt-ids.
struct Prompts {
  std::unique_ptr<Tokenizer> tokenizer;  // null with --prompt-ids
  std::vector<std::vector<int32_t>> ids;
};

absl::StatusOr<Prompts> ReadPrompts(const std::string& model_dir) {
  Prompts prompts;
  if (!absl::GetFlag(FLAGS_prompt).empty()) {
    TPSERVE_ASSIGN_OR_RETURN(prompts.tokenizer, Tokenizer::Load(model_dir));
    prompts.ids.push_back(prompts.tokenizer->Encode(absl::GetFlag(FLAGS_prompt), true));
  } else {
    TPSERVE_ASSIGN_OR_RETURN(prompts.ids, ParsePromptIds(absl::GetFlag(FLAGS_prompt_ids)));
  }
  if (prompts.ids.empty()) return absl::InvalidArgumentError("give --prompt-ids 1,2,3 or --prompt TEXT");
  return prompts;
}

// The rendezvous directory of --store-dir; null for a single rank.
absl::StatusOr<std::unique_ptr<FileStore>> OpenStore(const RankEnv& env) {
  if (env.world_size == 1) return std::unique_ptr<FileStore>();
  const std::string dir = absl::GetFlag(FLAGS_store_dir);
  if (dir.empty()) {
    return absl::InvalidArgumentError(
        "several ranks need a rendezvous directory: pass --store-dir DIR (shared by all ranks, "
        "empty or new) or use --tp N without mpirun");
  }
  return FileStore::Open(dir);
}

absl::StatusOr<RankResources> StartThisRank(const RankEnv& env, const std::string& model_dir, Store* store) {
  TPSERVE_ASSIGN_OR_RETURN(const ModelConfig config, LoadModelConfig(model_dir));
  RankStartOptions start;
  start.backend = absl::GetFlag(FLAGS_backend);
  start.cpu_threads = absl::GetFlag(FLAGS_threads);
  start.timeout = std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s));
  start.store = store;
  start.vocab_size = config.vocab_size;
  start.max_seqs = static_cast<int32_t>(absl::GetFlag(FLAGS_max_num_seqs));
  start.deterministic = absl::GetFlag(FLAGS_deterministic);
  start.max_all_reduce_elements = absl::GetFlag(FLAGS_max_num_tokens) * config.hidden_size;
  return StartRank(env, start);
}

EngineOptions EngineOptionsFromFlags(DeviceSampler* sampler) {
  EngineOptions options;
  options.model.max_num_tokens = absl::GetFlag(FLAGS_max_num_tokens);
  options.model.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  options.model.max_position = absl::GetFlag(FLAGS_max_position);
  options.block_size = absl::GetFlag(FLAGS_block_size);
  options.num_blocks = absl::GetFlag(FLAGS_num_blocks);
  options.enable_prefix_caching = absl::GetFlag(FLAGS_enable_prefix_caching);
  options.return_logits = absl::GetFlag(FLAGS_logits);
  options.enforce_eager = absl::GetFlag(FLAGS_enforce_eager);
  options.sampler = sampler;  // rank 0 on the CUDA backend samples on its GPU
  return options;
}

// --dump-dir: every named intermediate of the first step, one raw float32 file
// each (later steps overwrite nothing).
void DumpFirstStep(const std::string& dir, int rank, Backend& backend, Model& model) {
  auto dumped = std::make_shared<absl::flat_hash_set<std::string>>();
  model.set_intermediate_hook([dir, dumped, &backend, rank](std::string_view name, int layer, const Tensor& t) {
    const std::string path = absl::StrCat(dir, "/rank", rank, ".", layer, ".", std::string(name), ".f32");
    if (!dumped->insert(path).second) return;
    std::vector<float> host(static_cast<size_t>(t.numel()));
    backend.CopyToHostF32(t, host.data());
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(host.data()), static_cast<std::streamsize>(host.size() * 4));
  });
}

// --batch copies of every prompt, with the sampling flags.
std::vector<GenerationRequest> RequestsFromFlags(const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<GenerationRequest> requests;
  for (int b = 0; b < absl::GetFlag(FLAGS_batch); ++b) {
    for (const auto& p : prompts) {
      GenerationRequest r;
      r.prompt = p;
      r.max_tokens = absl::GetFlag(FLAGS_max_tokens);
      r.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
      r.sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
      r.sampling.top_k = absl::GetFlag(FLAGS_top_k);
      r.sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
      r.sampling.min_p = static_cast<float>(absl::GetFlag(FLAGS_min_p));
      if (absl::GetFlag(FLAGS_seed) >= 0) r.sampling.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
      requests.push_back(std::move(r));
    }
  }
  return requests;
}

// Peak RSS of every rank (kB; exact as f32 up to 16 GB), gathered to rank 0
// through the backend's memory (NCCL takes device buffers only). [world_size]
// on rank 0, zeros elsewhere.
absl::StatusOr<std::vector<float>> GatherPeakRssKb(const RankEnv& env, Backend& backend, Communicator& comm) {
  const float rss = static_cast<float>(ProcStatusKb("VmHWM"));
  std::vector<float> all_rss(static_cast<size_t>(env.world_size), 0.0f);
  Buffer one = backend.Allocate(DType::kF32, {1});
  Buffer all = backend.Allocate(DType::kF32, {env.world_size, 1});
  backend.CopyFromHost(&rss, DType::kF32, one.tensor());
  TPSERVE_RETURN_IF_ERROR(comm.Gather(one.tensor(), all.tensor()));
  if (env.rank == 0) backend.CopyToHostF32(all.tensor(), all_rss.data());
  return all_rss;
}

// Rank 0's report: a line per prompt on stdout, the speeds on stderr.
void PrintResults(const RankEnv& env, const Prompts& prompts, const std::vector<GenerationResult>& results,
                  const GenerationStats& st, float rank0_rss_kb) {
  for (size_t i = 0; i < results.size(); ++i) {
    const GenerationResult& r = results[i];
    std::string line = absl::StrCat("prompt ", i, ": ", absl::StrJoin(r.tokens, " "));
    if (prompts.tokenizer) {
      absl::StatusOr<std::string> text = prompts.tokenizer->Decode(r.tokens, true);
      if (text.ok()) absl::StrAppend(&line, "\n  ", *text);
    }
    std::printf("%s\n", line.c_str());
  }
  std::fprintf(stderr,
               "tp %d: prefill %lld tokens in %.3f s (%.1f tok/s), decode %lld tokens in %.3f s "
               "(%.1f tok/s), %lld steps, peak RSS rank 0 %.0f MB\n",
               env.world_size, static_cast<long long>(st.prefill_tokens), st.prefill_seconds,
               st.prefill_seconds > 0 ? st.prefill_tokens / st.prefill_seconds : 0.0,
               static_cast<long long>(st.decode_tokens), st.decode_seconds,
               st.decode_seconds > 0 ? st.decode_tokens / st.decode_seconds : 0.0,
               static_cast<long long>(st.steps), rank0_rss_kb / 1024.0);
}

// --output-json: tokens, stats and every rank's peak RSS.
absl::Status WriteOutputJson(const std::string& path, const RankEnv& env,
                             const std::vector<GenerationResult>& results, const GenerationStats& st,
                             const std::vector<float>& rss_kb) {
  nlohmann::json out;
  out["world_size"] = env.world_size;
  out["peak_rss_kb"] = rss_kb;
  out["stats"] = {{"steps", st.steps},
                  {"prefill_tokens", st.prefill_tokens},
                  {"prefill_seconds", st.prefill_seconds},
                  {"decode_tokens", st.decode_tokens},
                  {"decode_seconds", st.decode_seconds},
                  {"preemptions", st.preemptions}};
  nlohmann::json seqs = nlohmann::json::array();
  for (const GenerationResult& r : results) {
    nlohmann::json j;
    j["tokens"] = r.tokens;
    j["finish_reason"] = r.finish_reason == FinishReason::kEos ? "eos" : "length";
    if (absl::GetFlag(FLAGS_logits)) j["logits"] = r.logits;
    seqs.push_back(std::move(j));
  }
  out["sequences"] = std::move(seqs);
  std::ofstream f(path);
  f << out.dump() << "\n";
  if (!f) return absl::InternalError(absl::StrCat("could not write --output-json ", path));
  return absl::OkStatus();
}

absl::Status RunRank(const RankEnv& env) {
  const std::string model_dir = absl::GetFlag(FLAGS_model);
  TPSERVE_ASSIGN_OR_RETURN(const Prompts prompts, ReadPrompts(model_dir));
  TPSERVE_ASSIGN_OR_RETURN(const std::unique_ptr<FileStore> store, OpenStore(env));
  TPSERVE_ASSIGN_OR_RETURN(RankResources rank, StartThisRank(env, model_dir, store.get()));
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           Engine::Create(model_dir, *rank.backend, *rank.comm,
                                          EngineOptionsFromFlags(rank.sampler.get())));
  if (const std::string dump = absl::GetFlag(FLAGS_dump_dir); !dump.empty()) {
    DumpFirstStep(dump, env.rank, *rank.backend, engine->model());
  }
  const std::vector<GenerationRequest> requests = RequestsFromFlags(prompts.ids);
  TPSERVE_ASSIGN_OR_RETURN(const std::vector<GenerationResult> results, engine->Generate(requests));
  TPSERVE_ASSIGN_OR_RETURN(const std::vector<float> rss_kb, GatherPeakRssKb(env, *rank.backend, *rank.comm));
  if (env.rank != 0) return absl::OkStatus();
  PrintResults(env, prompts, results, engine->last_stats(), rss_kb[0]);
  const std::string out_path = absl::GetFlag(FLAGS_output_json);
  if (out_path.empty()) return absl::OkStatus();
  return WriteOutputJson(out_path, env, results, engine->last_stats(), rss_kb);
}

// Starts `tp` ranks of this program through launcher/ around a fresh
// rendezvous directory and waits for them; a failed rank stops the others.
absl::Status RunLocalRanks(int tp, const std::vector<std::string>& args) {
  TPSERVE_ASSIGN_OR_RETURN(const std::string dir, MakeTempDir("tpserve-generate-"));
  LaunchOptions launch;
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  launch.argv = {error ? std::string("/proc/self/exe") : exe.string()};
  launch.argv.insert(launch.argv.end(), args.begin(), args.end());
  launch.argv.push_back("--store_dir=" + dir);
  launch.nproc_per_node = tp;
  launch.output = OutputMode::kInherit;  // rank 0 prints the results as a single rank would
  absl::StatusOr<ProcessGroup> group = LaunchLocal(std::move(launch));
  const absl::Status outcome = group.ok() ? group->Wait() : group.status();
  RemoveTempDir(dir);
  return outcome;
}

int Fail(int code, const absl::Status& status) {
  std::fprintf(stderr, "tpserve-generate: %s\n", std::string(status.message()).c_str());
  return code;
}

int Main(int argc, char** argv) {
  InitToolUsage(argc, argv,
      "tpserve-generate --model DIR [--tp N] (--prompt-ids 1,2,3[;4,5] | --prompt TEXT) [flags]:\n"
      "offline generation with the tensor-parallel engine (no coordinator).\n"
      "\n"
      "Examples:\n"
      "  tpserve-generate --model /tmp/m --tp 2 --prompt-ids \"1,2,3;4,5\" --max-tokens 16\n"
      "  tpserve-generate --model /tmp/m --prompt \"Hello\" --max-tokens 32 --output-json out.json\n"
      "  mpirun -np 2 tpserve-generate --model DIR --store-dir /shared/dir --prompt-ids 1,2,3\n",
      {__FILE__});
  const std::vector<std::string> positional = ParseFlagsWithDashes(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "tpserve-generate: unexpected argument '%s' (see --help)\n", positional[1].c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_model).empty()) {
    std::fprintf(stderr, "tpserve-generate: --model DIR is required (see --help)\n");
    return 2;
  }
  if (const std::string backend = absl::GetFlag(FLAGS_backend); backend != "cpu" && backend != "cuda") {
    // Checked before any rank starts: one message, not one per rank.
    std::fprintf(stderr, "tpserve-generate: --backend must be cpu or cuda, got \"%s\"\n", backend.c_str());
    return 2;
  }
  absl::StatusOr<RankEnv> env = ReadRankEnv();
  if (!env.ok()) return Fail(2, env.status());
  const int tp = absl::GetFlag(FLAGS_tp);
  if (env->source == "default" && tp > 1) {
    const absl::Status s = RunLocalRanks(tp, std::vector<std::string>(argv + 1, argv + argc));
    return s.ok() ? 0 : Fail(1, s);
  }
  if (tp < 1 || (env->source != "default" && tp != 1 && tp != env->world_size)) {
    std::fprintf(stderr, "tpserve-generate: --tp %d does not match the launcher's world size %d\n", tp,
                 env->world_size);
    return 2;
  }
  if (const absl::Status s = RunRank(*env); !s.ok()) {
    std::fprintf(stderr, "tpserve-generate rank %d/%d: %s\n", env->rank, env->world_size,
                 std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) { return tpserve::Main(argc, argv); }

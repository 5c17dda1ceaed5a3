// tpserve-generate: offline generation with the tensor-parallel engine.
//
//   tpserve-generate --model DIR [--tp N] --prompt-ids 1,2,3[;4,5] --max-tokens 16
//   tpserve-generate --model DIR --prompt "Hello" (needs DIR/tokenizer.json)
//   mpirun -np 2 tpserve-generate --model DIR --store-dir /shared/dir ...
//   tpserve-generate --model DIR --backend cuda --tp 2 ... (a GPU per rank: NCCL)
//
// With --tp N > 1 and no launcher around it, it starts N rank processes of
// itself (rendezvous through a temporary FileStore directory); under mpirun or
// torchrun each process is one rank. Rank 0 prints one line per prompt with the
// generated ids (and the text when a tokenizer was loaded) and writes
// --output-json when given.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "backend/cpu_backend.h"
#include "comm/gloo_communicator.h"
#include "comm/gpu_placement.h"
#include "comm/rank_env.h"
#include "comm/store.h"
#include "model/config.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"
#include "tools/engine_cli/launch.h"
#include "worker/engine.h"
#ifdef TPSERVE_WITH_CUDA
#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_sampler.h"
#endif
#ifdef TPSERVE_WITH_NCCL
#include "comm/nccl_communicator.h"
#endif

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
ABSL_FLAG(int64_t, max_num_seqs, 256, "most sequences in one step");
ABSL_FLAG(int64_t, max_position, 0, "RoPE table rows; 0 = config.json's max_position_embeddings");
ABSL_FLAG(int, threads, 1, "BLAS threads per rank");
ABSL_FLAG(bool, enforce_eager, false, "run every step eagerly: no CUDA graphs for decode steps");
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

int64_t PeakRssKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

absl::Status RunRank(const RankEnv& env) {
  const std::string model_dir = absl::GetFlag(FLAGS_model);
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<std::vector<int32_t>> prompts;
  if (!absl::GetFlag(FLAGS_prompt).empty()) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::Load(model_dir);
    if (!tok.ok()) return tok.status();
    tokenizer = *std::move(tok);
    prompts.push_back(tokenizer->Encode(absl::GetFlag(FLAGS_prompt), true));
  } else {
    absl::StatusOr<std::vector<std::vector<int32_t>>> ids = ParsePromptIds(absl::GetFlag(FLAGS_prompt_ids));
    if (!ids.ok()) return ids.status();
    prompts = *std::move(ids);
  }
  if (prompts.empty()) return absl::InvalidArgumentError("give --prompt-ids 1,2,3 or --prompt TEXT");

  // The backend first: NCCL runs on its stream.
  const std::string backend_name = absl::GetFlag(FLAGS_backend);
  std::unique_ptr<Backend> backend;
  CommKind comm_kind = env.world_size == 1 ? CommKind::kSolo : CommKind::kGloo;
  int device = 0;
  if (backend_name == "cpu") {
    backend = MakeCpuBackend(absl::GetFlag(FLAGS_threads));
  } else if (backend_name == "cuda") {
#ifdef TPSERVE_WITH_CUDA
#ifdef TPSERVE_WITH_NCCL
    constexpr bool kHaveNccl = true;
#else
    constexpr bool kHaveNccl = false;
#endif
    absl::StatusOr<GpuPlacement> place = PlaceOnGpu(env, cuda::DeviceCount(), kHaveNccl, /*have_gloo=*/true);
    if (!place.ok()) return place.status();
    comm_kind = place->comm;
    device = place->device;
    backend = MakeCudaBackend(device);
#else
    return absl::FailedPreconditionError(
        "--backend cuda: this tpserve-generate was built without CUDA (no nvcc at build time)");
#endif
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--backend must be cpu or cuda, got \"", backend_name, "\""));
  }

  std::unique_ptr<Communicator> comm;
  std::unique_ptr<FileStore> store;
  if (comm_kind == CommKind::kSolo) {
    comm = MakeSoloCommunicator();
  } else {
    const std::string dir = absl::GetFlag(FLAGS_store_dir);
    if (dir.empty()) {
      return absl::InvalidArgumentError(
          "several ranks need a rendezvous directory: pass --store-dir DIR (shared by all ranks, "
          "empty or new) or use --tp N without mpirun");
    }
    absl::StatusOr<std::unique_ptr<FileStore>> opened = FileStore::Open(dir);
    if (!opened.ok()) return opened.status();
    store = *std::move(opened);
    absl::StatusOr<std::unique_ptr<Communicator>> made;
    if (comm_kind == CommKind::kNccl) {
#ifdef TPSERVE_WITH_NCCL
      NcclOptions nccl;
      nccl.device = device;
      nccl.stream = static_cast<cudaStream_t>(backend->stream());
      nccl.timeout = std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s));
      absl::StatusOr<std::unique_ptr<NcclCommunicator>> n =
          NcclCommunicator::Create(*store, env.rank, env.world_size, nccl);
      if (!n.ok()) return n.status();
      made = std::unique_ptr<Communicator>(*std::move(n));
#endif
    } else {
      GlooOptions gloo;
      gloo.timeout = std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s));
      made = MakeGlooCommunicator(*store, env.rank, env.world_size, gloo);
    }
    if (!made.ok()) return made.status();
    comm = *std::move(made);
  }

  EngineOptions options;
  options.model.max_num_tokens = absl::GetFlag(FLAGS_max_num_tokens);
  options.model.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  options.model.max_position = absl::GetFlag(FLAGS_max_position);
  options.block_size = absl::GetFlag(FLAGS_block_size);
  options.num_blocks = absl::GetFlag(FLAGS_num_blocks);
  options.return_logits = absl::GetFlag(FLAGS_logits);
#ifdef TPSERVE_WITH_CUDA
  std::unique_ptr<cuda::CudaSampler> sampler;  // rank 0 samples on its GPU
  if (backend_name == "cuda" && env.rank == 0) {
    absl::StatusOr<ModelConfig> config = LoadModelConfig(model_dir);
    if (!config.ok()) return config.status();
    cuda::CudaSampler::Options sampling;
    sampling.max_seqs = static_cast<int32_t>(options.model.max_num_seqs);
    sampling.vocab_size = config->vocab_size;
    absl::StatusOr<std::unique_ptr<cuda::CudaSampler>> made =
        cuda::CudaSampler::Create(sampling, static_cast<cudaStream_t>(backend->stream()));
    if (!made.ok()) return made.status();
    sampler = *std::move(made);
    options.sampler = sampler.get();
  }
#endif
  options.enforce_eager = absl::GetFlag(FLAGS_enforce_eager);
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(model_dir, *backend, *comm, options);
  if (!engine.ok()) return engine.status();

  if (const std::string dump = absl::GetFlag(FLAGS_dump_dir); !dump.empty()) {
    // Only the first step: later steps overwrite nothing.
    auto dumped = std::make_shared<absl::flat_hash_set<std::string>>();
    Backend* b = backend.get();
    (*engine)->model().set_intermediate_hook([dump, dumped, b, rank = env.rank](std::string_view name, int layer,
                                                                                 const Tensor& t) {
      const std::string path = absl::StrCat(dump, "/rank", rank, ".", layer, ".", std::string(name), ".f32");
      if (!dumped->insert(path).second) return;
      std::vector<float> host(static_cast<size_t>(t.numel()));
      b->CopyToHostF32(t, host.data());
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(host.data()), static_cast<std::streamsize>(host.size() * 4));
    });
  }
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
  absl::StatusOr<std::vector<GenerationResult>> results = (*engine)->Generate(requests);
  if (!results.ok()) return results.status();

  // Peak RSS of every rank (kB; exact as f32 up to 16 GB), gathered to rank 0
  // through the backend's memory (NCCL takes device buffers only).
  const float rss = static_cast<float>(PeakRssKb());
  std::vector<float> all_rss(static_cast<size_t>(env.world_size), 0.0f);
  {
    Buffer one = backend->Allocate(DType::kF32, {1});
    Buffer all = backend->Allocate(DType::kF32, {env.world_size, 1});
    backend->CopyFromHost(&rss, DType::kF32, one.tensor());
    if (absl::Status s = comm->Gather(one.tensor(), all.tensor()); !s.ok()) return s;
    if (env.rank == 0) backend->CopyToHostF32(all.tensor(), all_rss.data());
  }
  if (env.rank != 0) return absl::OkStatus();

  const GenerationStats& st = (*engine)->last_stats();
  for (size_t i = 0; i < results->size(); ++i) {
    const GenerationResult& r = (*results)[i];
    std::string line = absl::StrCat("prompt ", i, ": ", absl::StrJoin(r.tokens, " "));
    if (tokenizer) {
      absl::StatusOr<std::string> text = tokenizer->Decode(r.tokens, true);
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
               static_cast<long long>(st.steps), all_rss[0] / 1024.0);
  const std::string out_path = absl::GetFlag(FLAGS_output_json);
  if (out_path.empty()) return absl::OkStatus();
  nlohmann::json out;
  out["world_size"] = env.world_size;
  out["peak_rss_kb"] = all_rss;
  out["stats"] = {{"steps", st.steps},
                  {"prefill_tokens", st.prefill_tokens},
                  {"prefill_seconds", st.prefill_seconds},
                  {"decode_tokens", st.decode_tokens},
                  {"decode_seconds", st.decode_seconds},
                  {"preemptions", st.preemptions}};
  nlohmann::json seqs = nlohmann::json::array();
  for (const GenerationResult& r : *results) {
    nlohmann::json j;
    j["tokens"] = r.tokens;
    j["finish_reason"] = r.finish_reason == FinishReason::kEos ? "eos" : "length";
    if (options.return_logits) j["logits"] = r.logits;
    seqs.push_back(std::move(j));
  }
  out["sequences"] = std::move(seqs);
  std::ofstream f(out_path);
  f << out.dump() << "\n";
  if (!f) return absl::InternalError(absl::StrCat("could not write --output-json ", out_path));
  return absl::OkStatus();
}

// "--prompt-ids=1" -> "--prompt_ids=1": flags are spelled with dashes on the
// command line and with underscores in absl.
std::vector<std::string> NormalizeFlagNames(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a.rfind("--", 0) != 0) continue;
    const size_t end = std::min(a.find('='), a.size());
    for (size_t c = 2; c < end; ++c) {
      if (a[c] == '-') a[c] = '_';
    }
  }
  return args;
}

int Main(int argc_in, char** argv_in) {
  absl::SetProgramUsageMessage(
      "tpserve-generate --model DIR [--tp N] --prompt-ids 1,2,3 | --prompt TEXT --max-tokens N");
  std::vector<std::string> normalized = NormalizeFlagNames(argc_in, argv_in);
  std::vector<char*> argv_vec;
  for (std::string& a : normalized) argv_vec.push_back(a.data());
  argv_vec.push_back(nullptr);
  const int argc = argc_in;
  char** argv = argv_vec.data();
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "tpserve-generate: unexpected argument '%s' (see --help)\n", positional[1]);
    return 2;
  }
  if (absl::GetFlag(FLAGS_model).empty()) {
    std::fprintf(stderr, "tpserve-generate: --model DIR is required (see --help)\n");
    return 2;
  }
  absl::StatusOr<RankEnv> env = ReadRankEnv();
  if (!env.ok()) {
    std::fprintf(stderr, "tpserve-generate: %s\n", std::string(env.status().message()).c_str());
    return 2;
  }
  const int tp = absl::GetFlag(FLAGS_tp);
  if (env->source == "default" && tp > 1) {
    // Launcher: start tp ranks of ourselves around a fresh rendezvous directory.
    absl::StatusOr<std::string> dir = engine_cli::MakeTempDir("tpserve-generate-");
    if (!dir.ok()) {
      std::fprintf(stderr, "tpserve-generate: %s\n", std::string(dir.status().message()).c_str());
      return 1;
    }
    std::vector<std::string> args(argv + 1, argv + argc);
    args.push_back("--store_dir=" + *dir);
    const absl::Status s = engine_cli::RunLocalRanks(tp, args);
    engine_cli::RemoveTempDir(*dir);
    if (!s.ok()) {
      std::fprintf(stderr, "tpserve-generate: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    return 0;
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

#include "tools/bench/runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "tpserve/v1/generation.grpc.pb.h"

namespace tpserve::bench {
namespace {

namespace v1 = tpserve::v1;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Counts requests in flight; Acquire blocks while `limit` are.
class Slots {
 public:
  explicit Slots(int64_t limit) : limit_(limit) {}
  void Acquire() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](Slots* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->in_flight_ < s->limit_; }, this));
    ++in_flight_;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }

 private:
  const int64_t limit_;
  absl::Mutex mu_;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

// Done requests and streamed tokens, read by the progress bar.
struct Counters {
  std::atomic<int64_t> done{0}, tokens{0};
};

v1::GenerateRequest MakeRequest(const BenchPrompt& prompt, const RunOptions& options) {
  v1::GenerateRequest request;
  if (!prompt.token_ids.empty()) {
    request.mutable_prompt_token_ids()->mutable_ids()->Add(prompt.token_ids.begin(), prompt.token_ids.end());
  } else {
    request.set_prompt(prompt.text);
  }
  request.mutable_sampling()->set_temperature(options.temperature);
  request.mutable_stopping()->set_max_tokens(static_cast<uint32_t>(prompt.output_len));
  request.mutable_stopping()->set_ignore_eos(options.ignore_eos);
  if (options.structured_output) *request.mutable_structured_output() = *options.structured_output;
  return request;
}

// Sends one request and records its timeline; `start` is its send time.
RequestRecord RunOne(const ClientConnection& connection, const BenchPrompt& prompt, const RunOptions& options,
                     Clock::time_point run_start, Clock::time_point deadline, Counters& counters) {
  v1::Generation::Stub stub(connection.channel);
  grpc::ClientContext context;
  AddApiKey(connection, context);
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(deadline - Clock::now()));
  RequestRecord r;
  const Clock::time_point sent = Clock::now();
  r.start = Seconds(sent - run_start);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub.Generate(&context, MakeRequest(prompt, options));
  v1::GenerateResponse response;
  Clock::time_point last = sent;
  bool completed = false;
  while (reader->Read(&response)) {
    const Clock::time_point now = Clock::now();
    if (response.has_chunk()) {
      if (r.chunk_tokens.empty()) {
        r.ttft = Seconds(now - sent);
      } else {
        r.itl.push_back(Seconds(now - last));
      }
      last = now;
      r.chunk_tokens.push_back(response.chunk().token_ids_size());
      counters.tokens += response.chunk().token_ids_size();
    } else if (response.has_complete()) {
      completed = true;
      r.prompt_tokens = response.complete().usage().prompt_tokens();
      r.output_tokens = response.complete().usage().completion_tokens();
      r.cached_tokens = response.complete().usage().cached_tokens();
    }
  }
  const grpc::Status status = reader->Finish();
  r.latency = Seconds(last - sent);
  if (!status.ok()) {
    r.error = absl::StrCat(GrpcCodeName(status.error_code()), ": ", status.error_message());
  } else if (!completed || r.chunk_tokens.empty()) {
    r.error = "the stream ended without tokens or without its Complete message";
  } else {
    r.success = true;
  }
  ++counters.done;
  return r;
}

// "\r[#####.....] 12/256 requests  345.6 tok/s  elapsed 12 s  remaining ~30 s" on stderr.
void DrawProgress(const Counters& c, int64_t total, double elapsed) {
  const int64_t done = c.done.load();
  constexpr int kWidth = 30;
  const int filled = total > 0 ? static_cast<int>(kWidth * done / total) : kWidth;
  const double rate = elapsed > 0 ? static_cast<double>(c.tokens.load()) / elapsed : 0;
  const std::string remaining =
      done > 0 ? absl::StrFormat("~%.0f s", elapsed * static_cast<double>(total - done) / static_cast<double>(done))
               : std::string("?");
  std::fprintf(stderr, "\r[%s%s] %lld/%lld requests  %.1f tok/s  elapsed %.0f s  remaining %s   ",
               std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
               static_cast<long long>(done), static_cast<long long>(total), rate, elapsed, remaining.c_str());
  std::fflush(stderr);
}

}  // namespace

RunResult RunBenchmark(const ClientConnection& connection, const std::vector<BenchPrompt>& prompts,
                       const RunOptions& options) {
  const std::vector<double> arrivals =
      ArrivalTimes(static_cast<int64_t>(prompts.size()), options.request_rate, options.burstiness, options.seed);
  RunResult result;
  result.records.resize(prompts.size());
  Counters counters;
  Slots slots(options.max_concurrency > 0 ? std::min(options.max_concurrency, kMaxInFlight) : kMaxInFlight);
  std::atomic<bool> finished{false};
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.max_seconds));
  std::thread progress;
  if (options.progress) {
    progress = std::thread([&] {
      while (!finished.load()) {
        DrawProgress(counters, static_cast<int64_t>(prompts.size()), Seconds(Clock::now() - start));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    });
  }
  std::vector<std::thread> threads;
  threads.reserve(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::this_thread::sleep_until(
        std::min(deadline, start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i]))));
    slots.Acquire();
    const Clock::time_point request_deadline = std::min(
        deadline, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(options.request_timeout_s)));
    threads.emplace_back([&, i, request_deadline] {
      result.records[i] = RunOne(connection, prompts[i], options, start, request_deadline, counters);
      slots.Release();
    });
  }
  for (std::thread& t : threads) t.join();
  result.duration_s = Seconds(Clock::now() - start);
  finished = true;
  if (progress.joinable()) {
    progress.join();
    DrawProgress(counters, static_cast<int64_t>(prompts.size()), result.duration_s);
    std::fprintf(stderr, "\n");
  }
  return result;
}

}  // namespace tpserve::bench

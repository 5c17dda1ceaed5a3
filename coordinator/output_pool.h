// The output threads: what becomes of a sampled token after the engine loop
// (docs/architecture.md, "Threads and locks" and "The step pipeline").
//
// The engine thread schedules, sends steps and hands results on; the
// per-token work a stream needs runs here, on a small pool of threads that
// each own a shard of the requests (sequence id modulo the pool's size), so a
// request's tokens are handled in order, by one thread, without a lock:
//   * its OutputProcessor: incremental detokenization, stop strings, the
//     reasoning and tool calls of a chat (chat_output), the token-level stops
//     (TokenStops, the same verdicts the engine reached on its side);
//   * the log-probs and the Chunk appended to its ResponseQueue (PushChunk:
//     a stream that is writing costs a lock and a few appends; one that is
//     parked is woken, and its reactor starts the write on this thread);
//   * the per-token metrics (first token, inter-token gaps);
//   * the end: the Complete (usage, timing, tool calls, the finish reason,
//     TOOL_CALLS for a turn that called tools) or the error, the finished
//     request's metrics, then the request's id is given back (Hooks::retired).
//
// The engine tells a shard about a request only through events, queued on
// the engine thread and handed over once per iteration (Flush): Begin (the
// request's output side, at admission), Token (one sampled token; `last` when
// a token-level stop made the engine finish the sequence at it) and End (the
// engine retired the sequence: its blocks are free). Every admitted request
// gets exactly one End, after which the shard emits its one terminal outcome.
// A request of n choices is n sequences (kChoiceStride) sharing one stream:
// each streams its chunks and its Complete with its index, and the stream
// ends after the last Complete, or with the first choice that fails (the
// shard then finishes the others, whose ends are not sent).
// A shard that ends a request itself (a stop string; a stream whose client
// went away or stopped reading) asks the engine to finish it (Hooks::finish,
// like an abort through the engine's inbox) and drops the tokens that still
// come for it; the outcome waits for the engine's End, so the blocks are
// free before the client sees the end.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/output_processor.h"
#include "coordinator/response_queue.h"
#include "sampling/sampler.h"
#include "scheduler/step_plan.h"
#include "tpserve/v1/generation.pb.h"

namespace tpserve {

// A request's choices (n > 1, parallel sampling) are the sequences first + i
// for i < n, with first a multiple of kChoiceStride: the pool keeps them on
// one shard, so their shared stream has one producer.
inline constexpr uint64_t kChoiceStride = 256;
inline uint64_t FirstChoiceOf(uint64_t seq_id) { return seq_id - seq_id % kChoiceStride; }

// What a request's choices share on their shard's thread (no lock).
struct ChoiceGroup {
  explicit ChoiceGroup(int32_t choices) : n(choices), open(choices) {}
  const int32_t n;
  int32_t open;                 // choices whose End has not come
  bool ended = false;           // the stream ended with an error (the others are finished unseen)
  int64_t output_tokens = 0;    // of the choices ended so far
  bool has_token = false;       // a first token was counted (metrics)
  // Prompt log-probs (GenerateRequest.prompt_logprobs): the prompt's ids,
  // then each position's as the steps bring them (a recompute after a
  // preemption repeats positions: kept once), sent on each choice's first
  // Chunk. Whichever choice computes the prompt, its sampling waits for the
  // whole prompt, so every first Chunk finds them all.
  bool wants_prompt_logprobs = false;
  tpserve::v1::PromptLogprobs prompt_logprobs;
};

// One request's output side: made by EngineLoop::Submit, owned by its shard
// from Begin on.
struct OutputRequest {
  OutputRequest(std::string owner, std::string id, std::shared_ptr<ResponseQueue> queue, OutputProcessor proc,
                int64_t prompt_tokens, bool with_logprobs, int32_t choice = 0,
                std::shared_ptr<ChoiceGroup> choices = nullptr)
      : client(std::move(owner)),
        request_id(std::move(id)),
        out(std::move(queue)),
        processor(std::move(proc)),
        num_prompt_tokens(prompt_tokens),
        logprobs(with_logprobs),
        index(choice),
        group(choices ? std::move(choices) : std::make_shared<ChoiceGroup>(1)) {}

  const std::string client;      // whose request it is (with request_id, the engine's ids_ key)
  const std::string request_id;  // as the client named it, or server-assigned
  const std::shared_ptr<ResponseQueue> out;
  OutputProcessor processor;
  const int64_t num_prompt_tokens;
  const bool logprobs;  // sampling.logprobs >= 0
  const int32_t index;  // its choice (GenerateResponse.index)
  const std::shared_ptr<ChoiceGroup> group;  // the request's choices, this one among them
  const absl::Time arrival = absl::Now();

  // The shard's own, from Begin on.
  enum class Verdict {
    kNone,       // streaming
    kFinished,   // the processor ended it (finish, matched_stop)
    kCancelled,  // its stream was cancelled (the client went away)
    kOverflow,   // its client fell --max-buffered-chunks behind
  };
  Verdict verdict = Verdict::kNone;
  StopReason finish = StopReason::kNone;
  std::string matched_stop;
  std::optional<absl::Time> first_token;
  absl::Time last_token;                  // when first_token is set
  std::vector<tpserve::v1::ToolCall> tool_calls;  // every call the output made (for Complete)
  bool prompt_logprobs_sent = false;      // on its first Chunk (ChoiceGroup::prompt_logprobs)
};

// How the engine retired a sequence (an End event).
struct EngineEnd {
  // kEos, kStop, kLength: a token-level stop at the last token handed on;
  // kAborted: an Abort with an OK status (Complete{ABORTED}); kNone: ended
  // by `status`, or a finish the shard asked for.
  StopReason reason = StopReason::kNone;
  absl::Status status;  // not OK: the stream ends with it (reason kNone)
  std::optional<absl::Time> first_scheduled;
  uint32_t cached_tokens = 0;  // prompt tokens the prefix cache served
};

class OutputPool {
 public:
  struct Hooks {
    // A shard ended a request itself: the engine is to finish its sequence
    // (any thread; must not block on the pool).
    std::function<void(uint64_t seq_id)> finish;
    // A choice's end is being sent (once per sequence); `last`: the request's
    // terminal outcome, its id is free again.
    std::function<void(const std::string& client, const std::string& request_id, bool last)> retired;
  };

  // `threads` >= 1 (each named tpserve-out-N). `metrics` (may be null) must
  // outlive the pool.
  OutputPool(int threads, CoordinatorMetrics* metrics, Hooks hooks);
  ~OutputPool();  // Stop()
  OutputPool(const OutputPool&) = delete;
  OutputPool& operator=(const OutputPool&) = delete;

  void Start();
  // Handles every event flushed so far, then ends the threads. A request
  // still open then (never ended by the engine) ends UNAVAILABLE.
  void Stop();

  // The engine thread's side. Events queue per shard in call order; Flush
  // hands them to the shards' threads.
  void Begin(uint64_t seq_id, std::unique_ptr<OutputRequest> request);
  // `last`: the engine finished the sequence at this token (a TokenStops verdict).
  void Token(uint64_t seq_id, SampledToken sampled, absl::Time at, bool last);
  void End(uint64_t seq_id, EngineEnd end);
  // Prompt log-probs a step computed for the sequence (before its first token).
  void AddPromptLogprobs(uint64_t seq_id, tpserve::PromptLogprobs prompt);
  void Flush();
  // Blocks while a shard has `max_batches` or more flushed token batches not
  // yet handled: the engine does not run further ahead of its output than that.
  void WaitBehind(int64_t max_batches);

  int threads() const { return static_cast<int>(shards_.size()); }

 private:
  struct Event {
    enum class Kind : uint8_t { kBegin, kToken, kEnd, kPromptLogprobs };
    Kind kind = Kind::kToken;
    bool last = false;  // kToken
    uint64_t seq_id = 0;
    absl::Time at;                           // kToken: when its step's result arrived
    SampledToken sampled;                    // kToken
    std::unique_ptr<OutputRequest> request;  // kBegin
    EngineEnd end;                           // kEnd
    tpserve::PromptLogprobs prompt;          // kPromptLogprobs
  };
  class Shard;
  Shard& ShardOf(uint64_t seq_id) { return *shards_[(seq_id / kChoiceStride) % shards_.size()]; }

  const Hooks hooks_;  // the shards call them
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace tpserve

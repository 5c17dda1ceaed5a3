// End to end, real processes: the overlapped step pipeline (the default: step
// N+1 is scheduled and sent before step N's tokens are back) changes no output.
//
// * The same ~200 concurrent random requests (seeded prompts sharing prefixes,
//   lengths, stop strings and stop ids, EOS allowed or not, greedy and seeded
//   sampling, penalties, logprobs with alternatives, Abort after k chunks, short
//   deadlines) to a default coordinator and to a --no-overlap one, both under a
//   KV pool small enough to force preemption, prefix caching on: identical
//   chunks (token ids, text, and log-probs with their alternatives, all
//   exactly: the CPU backend is batch-invariant, docs/architecture.md "The
//   CPU backend's numerics"), finish reasons and matched stops; an aborted
//   request identical up to the abort point; every KV block free at the end.
//   Then a few of the requests once more, each alone on the lock-step server:
//   the same tokens and log-probs as in the crowd.
// * No request streams a token computed after it stopped: its Complete counts
//   exactly the streamed tokens, nothing follows the Complete, no token follows
//   a stop id or EOS, and LENGTH means max_tokens tokens.
// * A worker killed while many requests are in flight ends each of them with
//   one UNAVAILABLE naming the rank; new requests get UNAVAILABLE too.
#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/e2e/harness.h"
#include "tests/testing/seed.h"

namespace tpserve::e2e {
namespace {

namespace v1 = tpserve::v1;

// One random request and what the client does with it.
struct Spec {
  v1::GenerateRequest request;
  int abort_after = 0;                             // > 0: Abort RPC once this many chunks arrived
  absl::Duration deadline = absl::ZeroDuration();  // > 0: a short client deadline (timing-dependent)
  std::atomic<int>* started = nullptr;             // when set: incremented at the first chunk
};

// What one stream delivered, in order. Where one chunk ends and the next
// begins is not part of the output: a stream that fell behind gets the chunks
// waiting in a row merged (coordinator/response_queue.h), which depends on
// timing; `all` is every chunk appended into one.
struct Observed {
  std::vector<v1::Chunk> chunks;  // one per response with a chunk
  v1::Chunk all;                  // the chunks in order, merged
  int completes = 0;
  bool chunk_after_complete = false;
  v1::Complete complete;
  grpc::Status status;

  int64_t streamed_tokens() const {
    int64_t n = 0;
    for (const v1::Chunk& c : chunks) n += c.token_ids_size();
    return n;
  }
};

class RandomRequests {
 public:
  explicit RandomRequests(uint64_t seed) : rng_(seed) {
    for (auto& prefix : prefixes_) {  // shared prompt starts: prefix-cache hits
      for (int k = Int(6, 20); k > 0; --k) prefix.push_back(static_cast<uint32_t>(Int(3, 399)));
    }
  }

  Spec Next(int i) {
    Spec s;
    s.request.set_request_id(absl::StrCat("r", i));
    auto* ids = s.request.mutable_prompt_token_ids();
    if (Chance(0.4)) {
      for (uint32_t t : prefixes_[static_cast<size_t>(Int(0, 2))]) ids->add_ids(t);
    }
    for (int k = Int(1, 24); k > 0; --k) ids->add_ids(static_cast<uint32_t>(Int(3, 399)));
    Sampling(*s.request.mutable_sampling());
    Stopping(*s.request.mutable_stopping());
    if (Chance(0.4)) s.request.set_logprobs(static_cast<uint32_t>(Int(0, 5)));
    s.request.set_skip_special_tokens(Chance(0.5));
    const int max_tokens = static_cast<int>(s.request.stopping().max_tokens());
    if (max_tokens >= 3 && Chance(0.12)) {
      s.abort_after = Int(1, max_tokens - 1);
    } else if (Chance(0.05)) {
      s.deadline = absl::Milliseconds(Int(50, 400));
    }
    return s;
  }

 private:
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  float Real(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  void Sampling(v1::SamplingParams& sp) {
    if (Chance(0.4)) {
      sp.set_temperature(0);
    } else {  // sampled, so seeded: both servers must draw the same tokens
      sp.set_temperature(Real(0.3f, 1.5f));
      sp.set_seed(rng_());
      if (Chance(0.5)) sp.set_top_k(Int(1, 40));
      if (Chance(0.5)) sp.set_top_p(Real(0.5f, 1.0f));
      if (Chance(0.3)) sp.set_min_p(Real(0.0f, 0.2f));
    }
    if (Chance(0.3)) sp.set_repetition_penalty(Real(0.8f, 1.6f));
    if (Chance(0.3)) sp.set_presence_penalty(Real(-0.5f, 1.0f));
    if (Chance(0.3)) sp.set_frequency_penalty(Real(-0.5f, 1.0f));
  }

  void Stopping(v1::StoppingParams& st) {
    static const char* const kStops[] = {"e", "a", "in", "th", " t", "s ", "q", "zz", "\n"};
    const int max_tokens = Int(1, 40);
    st.set_max_tokens(static_cast<uint32_t>(max_tokens));
    st.set_ignore_eos(Chance(0.5));
    if (Chance(0.35)) {
      for (int k = Int(1, 2); k > 0; --k) st.add_stop(kStops[Int(0, static_cast<int>(std::size(kStops)) - 1)]);
      st.set_include_stop_str_in_output(Chance(0.3));
    }
    if (Chance(0.25)) {
      for (int k = Int(1, 3); k > 0; --k) st.add_stop_token_ids(static_cast<uint32_t>(Int(3, 399)));
    }
    if (Chance(0.15)) st.set_min_tokens(static_cast<uint32_t>(Int(1, std::min(5, max_tokens))));
  }

  std::mt19937_64 rng_;
  std::vector<uint32_t> prefixes_[3];
};

void SendAbort(v1::Generation::Stub& stub, const std::string& request_id) {
  grpc::ClientContext context;
  v1::AbortRequest request;
  request.set_request_id(request_id);
  v1::AbortResponse response;
  const grpc::Status s = stub.Abort(&context, request, &response);
  EXPECT_TRUE(s.ok()) << request_id << ": " << s.error_message();
}

// Streams one request to its end, sending Abort after `abort_after` chunks.
Observed Stream(v1::Generation::Stub& stub, const Spec& spec) {
  Observed o;
  grpc::ClientContext context;
  const absl::Duration timeout = spec.deadline > absl::ZeroDuration() ? spec.deadline : absl::Seconds(120);
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  auto reader = stub.Generate(&context, spec.request);
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
    if (r.has_chunk()) {
      if (o.completes > 0) o.chunk_after_complete = true;
      o.chunks.push_back(r.chunk());
      o.all.mutable_token_ids()->MergeFrom(r.chunk().token_ids());
      o.all.mutable_text()->append(r.chunk().text());
      o.all.mutable_logprobs()->MergeFrom(r.chunk().logprobs());
      if (o.chunks.size() == 1 && spec.started != nullptr) ++*spec.started;
      if (static_cast<int>(o.chunks.size()) == spec.abort_after) SendAbort(stub, spec.request.request_id());
    } else if (r.has_complete()) {
      ++o.completes;
      o.complete = r.complete();
    }
  }
  o.status = reader->Finish();
  return o;
}

// Every request at once, one client thread each.
std::vector<Observed> RunAll(v1::Generation::Stub& stub, const std::vector<Spec>& specs) {
  std::vector<Observed> out(specs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < specs.size(); ++i) {
    threads.emplace_back([&, i] { out[i] = Stream(stub, specs[i]); });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

// Whether the stream should have ended at output token j (0-based) of `ids`:
// a stop id, or EOS unless ignored, once min_tokens tokens are out.
bool StopsAt(const v1::StoppingParams& st, const std::vector<uint32_t>& eos, uint32_t id, size_t j) {
  if (j + 1 <= st.min_tokens()) return false;
  const auto& stop_ids = st.stop_token_ids();
  if (std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end()) return true;
  return !st.ignore_eos() && std::find(eos.begin(), eos.end(), id) != eos.end();
}

// Problems of one stream on its own ("" when none): a request that ended
// must have streamed exactly the tokens its Complete counts, nothing after it,
// no more than max_tokens, no token after a stop id or EOS, and end the way
// its parameters allow. `eos`: the model's EOS ids.
std::string WellFormed(const Spec& spec, const Observed& o, const std::vector<uint32_t>& eos) {
  const v1::StoppingParams& st = spec.request.stopping();
  // A deadline that passes as the Complete arrives may still end the call
  // DEADLINE_EXCEEDED on the client (gRPC's deadline is the client's own
  // timer too): the server sent one outcome either way.
  if (spec.deadline > absl::ZeroDuration() && o.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return o.completes <= 1 ? "" : "several Complete messages";
  }
  if (!o.status.ok()) return absl::StrCat("status ", o.status.error_code(), ": ", o.status.error_message());
  if (o.completes != 1) return absl::StrCat(o.completes, " Complete messages");
  if (o.chunk_after_complete) return "a chunk after the Complete";
  std::vector<uint32_t> ids;
  for (const v1::Chunk& c : o.chunks) ids.insert(ids.end(), c.token_ids().begin(), c.token_ids().end());
  const int64_t n = std::ssize(ids);
  if (o.complete.usage().completion_tokens() != n) {
    return absl::StrCat("Complete counts ", o.complete.usage().completion_tokens(), " tokens, ", n, " were streamed");
  }
  if (n > st.max_tokens()) return absl::StrCat(n, " tokens streamed, max_tokens ", st.max_tokens());
  for (size_t j = 0; j + 1 < ids.size(); ++j) {
    if (StopsAt(st, eos, ids[j], j)) return absl::StrCat("token ", j, " (", ids[j], ") stops it, yet more followed");
  }
  const v1::FinishReason why = o.complete.finish_reason();
  if (why == v1::LENGTH && n != st.max_tokens()) return absl::StrCat("LENGTH after ", n, " of ", st.max_tokens());
  if (why == v1::ABORTED && spec.abort_after == 0) return "ABORTED without an Abort";
  if (why == v1::EOS && st.ignore_eos()) return "EOS with ignore_eos";
  if (why == v1::FINISH_REASON_UNSPECIFIED) return "no finish reason";
  for (const v1::Chunk& c : o.chunks) {
    const int want = spec.request.has_logprobs() ? c.token_ids_size() : 0;
    if (c.logprobs_size() != want) return absl::StrCat("a chunk with ", c.logprobs_size(), " logprobs, not ", want);
  }
  return "";
}

// The same float, bit for bit.
bool Same(float x, float y) { return std::memcmp(&x, &y, sizeof x) == 0; }

// The chosen token's log-prob and the alternatives (ids, order and log-probs),
// exactly: the two servers batch the request differently, which the CPU
// backend's batch invariance makes no difference to.
bool SameLogprob(const v1::TokenLogprob& a, const v1::TokenLogprob& b) {
  if (a.token_id() != b.token_id() || !Same(a.logprob(), b.logprob()) || a.top_size() != b.top_size()) return false;
  for (int k = 0; k < a.top_size(); ++k) {
    if (a.top(k).token_id() != b.top(k).token_id() || !Same(a.top(k).logprob(), b.top(k).logprob())) return false;
  }
  return true;
}

// The first difference between the first `n` tokens of the merged streams
// (ids and log-probs exactly), and their text: the
// same when both ended by themselves (`whole`), else one a prefix of the
// other ("" when none).
std::string StreamDifference(const Observed& a, const Observed& b, int n, bool whole) {
  for (int k = 0; k < n; ++k) {
    if (a.all.token_ids(k) != b.all.token_ids(k)) {
      return absl::StrCat("token ", k, ": ", a.all.token_ids(k), " with overlap, ", b.all.token_ids(k), " without");
    }
    if (k < a.all.logprobs_size() && k < b.all.logprobs_size() && !SameLogprob(a.all.logprobs(k), b.all.logprobs(k))) {
      return absl::StrCat("token ", k, "'s log-probs: overlap {", a.all.logprobs(k).ShortDebugString(),
                          "} vs no-overlap {", b.all.logprobs(k).ShortDebugString(), "}");
    }
  }
  const std::string& ta = a.all.text();
  const std::string& tb = b.all.text();
  const bool same_text = whole ? ta == tb : (ta.size() <= tb.size() ? tb.starts_with(ta) : ta.starts_with(tb));
  if (!same_text) return absl::StrCat("text \"", ta, "\" with overlap, \"", tb, "\" without");
  return "";
}

// How the overlapped stream `a` differs from the lock-step one `b` ("" when it
// does not). An aborted request is compared up to its abort point; one with a
// short deadline not at all (where it ends depends on timing).
std::string Difference(const Spec& spec, const Observed& a, const Observed& b) {
  if (spec.deadline > absl::ZeroDuration() || !a.status.ok() || !b.status.ok()) return "";
  const int na = a.all.token_ids_size(), nb = b.all.token_ids_size();
  const bool both_natural = a.complete.finish_reason() != v1::ABORTED && b.complete.finish_reason() != v1::ABORTED;
  if (spec.abort_after > 0 && !both_natural) return StreamDifference(a, b, std::min(na, nb), /*whole=*/false);
  if (na != nb) {
    const std::string first = StreamDifference(a, b, std::min(na, nb), /*whole=*/false);
    return absl::StrCat(na, " tokens vs ", nb, first.empty() ? "" : "; ", first);
  }
  if (std::string d = StreamDifference(a, b, na, /*whole=*/true); !d.empty()) return d;
  if (a.complete.finish_reason() != b.complete.finish_reason() ||
      a.complete.matched_stop() != b.complete.matched_stop()) {
    return absl::StrCat("finish ", v1::FinishReason_Name(a.complete.finish_reason()), " \"",
                        a.complete.matched_stop(), "\" vs ", v1::FinishReason_Name(b.complete.finish_reason()),
                        " \"", b.complete.matched_stop(), "\"");
  }
  if (a.complete.usage().prompt_tokens() != b.complete.usage().prompt_tokens()) return "prompt_tokens differ";
  return "";
}

std::vector<uint32_t> EosIds(v1::Generation::Stub& stub) {
  grpc::ClientContext context;
  v1::ModelInfo info;
  const grpc::Status s = stub.GetModelInfo(&context, v1::ModelInfoRequest(), &info);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return {info.eos_token_ids().begin(), info.eos_token_ids().end()};
}

// Fails the test with the first few problems and their count.
void ExpectNone(const std::vector<std::string>& problems, const std::string& what) {
  std::string shown;
  for (size_t i = 0; i < problems.size() && i < 5; ++i) absl::StrAppend(&shown, "\n  ", problems[i]);
  EXPECT_TRUE(problems.empty()) << problems.size() << " requests " << what << ":" << shown;
}

// Waits (up to 10 s) until the server holds no request and every KV block is free.
void ExpectAllBlocksFree(v1::Generation::Stub& stub, const std::string& name) {
  v1::ServerInfo info;
  for (int i = 0; i < 500; ++i) {
    info = ServerInfo(stub);
    if (info.free_blocks() == info.num_blocks() && info.running() == 0 && info.waiting() == 0) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(info.free_blocks(), info.num_blocks()) << name;
  EXPECT_EQ(info.running(), 0u) << name;
  EXPECT_EQ(info.waiting(), 0u) << name;
}

class OverlapTest : public ::testing::Test {
 protected:
  // The same random requests to a default (overlapped) coordinator and a
  // --no-overlap one, concurrently; checks every stream and compares them.
  // The two pipelines batch, preempt and recompute sequences at different
  // moments; the CPU backend's batch invariance (backend/cpu_gemm.h) makes
  // that no difference to any bit, so a sampled token at a near-tie agrees too.
  void CompareWithLockStep(int tp, int num_requests, const std::vector<std::string>& flags) {
    const uint64_t seed = testing_util::TestSeed();
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " (TPSERVE_TEST_SEED=" << seed << " replays it)");
    const std::string model = MakeModel(dir_.path(), "qwen3", {"--seed", "21"});
    std::vector<std::string> lockstep_flags = flags;
    lockstep_flags.push_back("--no-overlap");
    Coordinator overlap = StartCoordinator(model, tp, dir_.path() + "/overlap.log", flags);
    Coordinator lockstep = StartCoordinator(model, tp, dir_.path() + "/lockstep.log", lockstep_flags);
    ASSERT_TRUE(overlap.stub && lockstep.stub) << "no coordinator";
    RandomRequests random(seed);
    std::vector<Spec> specs;
    for (int i = 0; i < num_requests; ++i) specs.push_back(random.Next(i));
    std::vector<Observed> a, b;
    std::thread other([&] { b = RunAll(*lockstep.stub, specs); });
    a = RunAll(*overlap.stub, specs);
    other.join();

    const std::vector<uint32_t> eos = EosIds(*overlap.stub);
    std::vector<std::string> malformed, different;
    int compared = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      const std::string id =
          absl::StrCat(specs[i].request.request_id(), " {", specs[i].request.ShortDebugString(), "}: ");
      if (std::string p = WellFormed(specs[i], a[i], eos); !p.empty()) malformed.push_back(id + "overlap: " + p);
      if (std::string p = WellFormed(specs[i], b[i], eos); !p.empty()) malformed.push_back(id + "no-overlap: " + p);
      if (std::string d = Difference(specs[i], a[i], b[i]); !d.empty()) different.push_back(id + d);
      if (specs[i].deadline == absl::ZeroDuration()) ++compared;
    }
    ExpectNone(malformed, "ended badly");
    ExpectNone(different, "differ between overlap and --no-overlap");
    EXPECT_GT(compared, num_requests * 8 / 10);
    ExpectAllBlocksFree(*overlap.stub, "overlap");
    ExpectAllBlocksFree(*lockstep.stub, "no-overlap");

    // Alone: the first few requests that asked for log-probs and were not
    // cut short (greedy and seeded-sampled alike), each by itself on the
    // lock-step server, give what the overlapped server streamed while ~200
    // others shared its steps (their prefixes may now come from the cache).
    std::vector<std::string> alone_different;
    int replayed = 0;
    for (size_t i = 0; i < specs.size() && replayed < kReplayedAlone; ++i) {
      if (specs[i].abort_after > 0 || specs[i].deadline > absl::ZeroDuration() || !a[i].status.ok() ||
          !specs[i].request.has_logprobs()) {
        continue;
      }
      Spec alone = specs[i];
      alone.request.set_request_id(absl::StrCat(specs[i].request.request_id(), "-alone"));
      const Observed o = Stream(*lockstep.stub, alone);
      ++replayed;
      if (std::string d = Difference(specs[i], a[i], o); !d.empty()) {
        alone_different.push_back(absl::StrCat(specs[i].request.request_id(), ": ", d));
      }
    }
    EXPECT_EQ(replayed, kReplayedAlone);
    ExpectNone(alone_different, "differ between the crowd (overlapped) and alone (--no-overlap)");
  }

  static constexpr int kReplayedAlone = 8;

  TempDir dir_;
};

// 40 blocks of 4 tokens hold 160 tokens; a request may need up to 84 (a
// 20-token shared prefix, 24 more prompt tokens, 40 outputs), and 200 arrive
// at once: running sequences outgrow the pool and are preempted (a gdb count
// of Scheduler::Preempt on the development machine: 126 and 143 preemptions in
// the two servers). Prefix caching is on (the default).
TEST_F(OverlapTest, Tp2SameOutputsAsLockStepUnderPreemption) {
  CompareWithLockStep(2, 200, {"--block-size", "4", "--num-gpu-blocks-override", "40"});
}

// tp 1, a roomier pool (still 57 and 76 preemptions, counted as above) and a
// 32-token step budget, so longer prompts are prefilled in chunks.
TEST_F(OverlapTest, Tp1SameOutputsAsLockStepWithChunkedPrefill) {
  CompareWithLockStep(1, 200, {"--block-size", "4", "--num-gpu-blocks-override", "96",
                               "--max-num-batched-tokens", "32"});
}

// failure_test's KillingAWorkerEndsStreamsUnavailableAndNamesTheRank with one
// stream; here the default (overlapped) pipeline has steps in flight for many.
TEST_F(OverlapTest, AWorkerKilledUnderManyStreamsEndsEachOnceNamingTheRank) {
  const std::string model = MakeModel(dir_.path(), "qwen3", {"--seed", "4", "--max-pos", "4096"});
  Coordinator c = StartCoordinator(model, 2, dir_.path() + "/coordinator.log");
  ASSERT_TRUE(c.stub) << "no coordinator";
  const pid_t rank1 = WorkerPid(ServerInfo(*c.stub), 1);
  ASSERT_GT(rank1, 0) << ServerInfo(*c.stub).ShortDebugString();
  constexpr int kStreams = 20;
  std::atomic<int> started{0};
  std::vector<Spec> specs(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    specs[i].request = Greedy(4000);  // thousands of steps unless stopped
    specs[i].request.set_prompt(absl::StrCat("count forever, stream ", i));
    specs[i].started = &started;
  }
  std::vector<Observed> got;
  std::thread client([&] { got = RunAll(*c.stub, specs); });
  for (int i = 0; i < 3000 && started.load() < kStreams; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(started.load(), kStreams) << "not every stream had its first token after 30 s";
  const int killed = kill(rank1, SIGKILL) == 0 ? 0 : errno;
  if (killed != 0) c.process->Signal(SIGKILL);  // the streams must end for the join
  client.join();
  ASSERT_EQ(killed, 0) << "kill(" << rank1 << "): " << std::strerror(killed);
  for (int i = 0; i < kStreams; ++i) {
    const Observed& o = got[static_cast<size_t>(i)];
    const std::string& message = o.status.error_message();
    EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE) << "stream " << i << ": " << message;
    EXPECT_NE(message.find("rank 1"), std::string::npos) << "stream " << i << ": " << message;
    EXPECT_EQ(o.completes, 0) << "stream " << i << " got a Complete and an error";
    EXPECT_LT(o.streamed_tokens(), 4000) << "stream " << i;
  }
  // The group is replaced (recovery_test.cc), and serves a new request whole.
  ASSERT_TRUE(AwaitServing(*c.stub)) << c.process->Log();
  Spec after;
  after.request = Greedy(4);
  after.request.set_prompt("after the loss");
  const Observed served = Stream(*c.stub, after);
  EXPECT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.completes, 1);
}

}  // namespace
}  // namespace tpserve::e2e

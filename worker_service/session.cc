#include "worker_service/session.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/grpcpp.h"
#include "transport/shm_channel.h"
#include "worker_service/coordinator_store.h"
#include "worker_service/dial_diagnosis.h"

namespace tpserve {
namespace iv1 = tpserve::internal::v1;
namespace {

void Log(int rank, const std::string& line) {
  std::fprintf(stderr, "tpserve-worker[rank %d]: %s\n", rank, line.c_str());
}

const char* CommandName(const iv1::CoordinatorMessage& m) {
  switch (m.command_case()) {
    case iv1::CoordinatorMessage::kLoad: return "Load";
    case iv1::CoordinatorMessage::kProfile: return "Profile";
    case iv1::CoordinatorMessage::kAllocateKv: return "AllocateKv";
    case iv1::CoordinatorMessage::kWarmUp: return "WarmUp";
    case iv1::CoordinatorMessage::kStep: return "Step";
    case iv1::CoordinatorMessage::kShutdown: return "Shutdown";
    case iv1::CoordinatorMessage::kUseSharedMemory: return "UseSharedMemory";
    default: return "unknown";
  }
}

std::string Describe(const grpc::Status& s) {
  return absl::StrCat("gRPC status ", static_cast<int>(s.error_code()), " \"", s.error_message(), "\"");
}

using SessionStream = grpc::ClientReaderWriter<iv1::WorkerMessage, iv1::CoordinatorMessage>;

std::shared_ptr<grpc::Channel> MakeChannel(const SessionOptions& options) {
  grpc::ChannelArguments args;
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  args.SetMaxReceiveMessageSize(-1);  // a step of long prompts may exceed 4 MB
  args.SetMaxSendMessageSize(-1);
  // Retry the connection quickly while the coordinator starts.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(
      options.coordinator, options.credentials ? options.credentials : grpc::InsecureChannelCredentials(), args);
}

// The channel's last connection error: the message of a call that fails at
// once (no wait for ready) while the channel is in TRANSIENT_FAILURE.
std::string LastConnectError(const std::shared_ptr<grpc::Channel>& channel) {
  std::unique_ptr<iv1::Worker::Stub> stub = iv1::Worker::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  iv1::ChallengeResponse response;
  const grpc::Status status = stub->Challenge(&context, iv1::ChallengeRequest(), &response);
  return status.ok() ? "" : status.error_message();
}

DialSettings DialSettingsOf(const SessionOptions& options) {
  return {.address = options.coordinator, .tls = options.tls, .ca = options.tls_ca, .cert = options.tls_cert,
          .key = options.tls_key, .server_name = options.tls_server_name};
}

// Waits until the channel connects; the exit code when the session must end
// first (stopped: 0, connect_timeout passed: 1), nullopt once connected.
// While the channel fails, every 2 s the cause is looked for (dial_diagnosis.h)
// and logged when it is one (a TLS handshake that failed, say) and new; the
// exit at the timeout names the last one.
std::optional<int> AwaitCoordinator(const std::shared_ptr<grpc::Channel>& channel, const SessionOptions& options,
                                    SessionStopper& stopper) {
  const int rank = options.worker.rank.rank;
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  absl::Time next_diagnosis = absl::Now() + absl::Seconds(1);
  std::string diagnosis, last_error;
  while (!channel->WaitForConnected(
      absl::ToChronoTime(std::min(deadline, absl::Now() + absl::Milliseconds(250))))) {
    if (stopper.stopped()) {
      Log(rank, "stopped before the coordinator answered");
      return 0;
    }
    const bool timed_out = absl::Now() >= deadline;
    if (timed_out || (absl::Now() >= next_diagnosis &&
                      channel->GetState(false) == GRPC_CHANNEL_TRANSIENT_FAILURE)) {
      last_error = LastConnectError(channel);
      std::string why = DiagnoseDialFailure(DialSettingsOf(options), last_error);
      if (!why.empty() && why != diagnosis && !timed_out) {
        Log(rank, absl::StrCat(why, " (retrying for --connect-timeout ",
                               absl::FormatDuration(options.connect_timeout), ")"));
      }
      diagnosis = std::move(why);
      next_diagnosis = absl::Now() + absl::Seconds(2);
    }
    if (timed_out) {
      if (!diagnosis.empty()) {
        Log(rank, absl::StrCat(diagnosis, "; gave up after --connect-timeout ",
                               absl::FormatDuration(options.connect_timeout)));
        return 1;
      }
      Log(rank, absl::StrCat("the coordinator at ", options.coordinator, " did not answer within ",
                             absl::FormatDuration(options.connect_timeout),
                             last_error.empty() ? "" : absl::StrCat(" (", last_error, ")"),
                             "; is tpserve-coordinator running, and is this its --worker-listen address "
                             "(printed as 'workers connect to HOST:PORT')? "
                             "Raise --connect-timeout if it starts slowly"));
      return 1;
    }
  }
  return std::nullopt;
}

// How the command loop ended: exit_code -1 when the stream did (no command asked to exit).
struct LoopEnd {
  int exit_code = -1;
  bool clean_end = false;  // the exit came from Shutdown
  std::unique_ptr<ShmEndpoint> shm;  // set: go on with the commands of this channel
};

// Handles one command; the reply to send, and whether (and how) to exit.
CommandHandler::Outcome Answer(CommandHandler& handler, const iv1::CoordinatorMessage& command, int rank,
                               LoopEnd& end) {
  CommandHandler::Outcome outcome = handler.Handle(command);
  if (!outcome.reply.error().empty()) {
    Log(rank, absl::StrCat(CommandName(command), " (seq ", command.seq(), ") failed: ", outcome.reply.error()));
  } else if (command.command_case() != iv1::CoordinatorMessage::kStep) {
    Log(rank, absl::StrCat(CommandName(command), " done"));
  }
  if (outcome.exit_code) {
    end.exit_code = *outcome.exit_code;
    end.clean_end = command.command_case() == iv1::CoordinatorMessage::kShutdown;
  }
  return outcome;
}

// UseSharedMemory: opens the channel (this worker is reader `rank`); the Ack
// or the error to reply on the stream.
iv1::WorkerMessage OpenChannel(const iv1::CoordinatorMessage& command, int rank, LoopEnd& end) {
  iv1::WorkerMessage reply;
  reply.set_seq(command.seq());
  absl::StatusOr<std::unique_ptr<ShmEndpoint>> shm = ShmEndpoint::Open(command.use_shared_memory().name(), rank);
  if (!shm.ok()) {
    reply.set_error(absl::StrCat("UseSharedMemory: ", shm.status().ToString(),
                                 "; the coordinator goes on over the stream"));
    Log(rank, reply.error());
    return reply;
  }
  reply.mutable_ack();
  end.shm = *std::move(shm);
  Log(rank, "commands now come through shared memory");
  return reply;
}

// Writes to the session stream for the command loop and the heartbeat
// thread, one at a time (a gRPC stream takes one writer at once). The
// heartbeat goes every `interval` until StopHeartbeat, whatever the command
// loop does (a step blocked in a collective included), so the coordinator
// can tell a stopped or frozen process from one that is busy.
class StreamWriter {
 public:
  explicit StreamWriter(SessionStream& stream) : stream_(stream) {}
  ~StreamWriter() { StopHeartbeat(); }

  bool Write(const iv1::WorkerMessage& message) {
    absl::MutexLock lock(&mu_);
    return !done_ && stream_.Write(message);
  }
  // No write after this one.
  void WritesDone() {
    absl::MutexLock lock(&mu_);
    if (!done_) stream_.WritesDone();
    done_ = true;
  }
  // The worker was told to stop: says so (WorkerMessage.stopping, naming
  // `why`) as the stream's last message, then closes this side, so the
  // coordinator reads the notice before it sees the stream end.
  void SayStopping(const std::string& why) {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    iv1::WorkerMessage notice;
    notice.set_stopping(true);
    notice.set_error(why);
    (void)stream_.Write(notice);
    stream_.WritesDone();
    done_ = true;
  }
  void StartHeartbeat(absl::Duration interval) {
    heartbeat_ = std::thread([this, interval] {
      iv1::WorkerMessage beat;
      beat.set_heartbeat(true);
      absl::MutexLock lock(&mu_);
      while (!stop_ && !done_) {
        if (mu_.AwaitWithTimeout(absl::Condition(&stop_), interval)) break;
        if (!done_ && !stream_.Write(beat)) break;
      }
    });
  }
  void StopHeartbeat() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (heartbeat_.joinable()) heartbeat_.join();
  }

 private:
  SessionStream& stream_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread heartbeat_;
};

// What a session needs to be admitted: the challenge and the proof for its
// Hello, the token for its store calls (all empty without a secret).
struct Credentials {
  std::string challenge;
  std::string proof;
  std::string store_token;
};

// Asks the coordinator for a challenge and answers it with `options.secret`.
// An error (logged) when the call fails or the coordinator wants a secret
// this worker lacks.
absl::StatusOr<Credentials> Authenticate(iv1::Worker::Stub& stub, const SessionOptions& options) {
  const int rank = options.worker.rank.rank;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  iv1::ChallengeResponse response;
  const grpc::Status status = stub.Challenge(&context, iv1::ChallengeRequest(), &response);
  absl::Status error;
  if (!status.ok()) {
    error = absl::UnavailableError(absl::StrCat("asking the coordinator at ", options.coordinator,
                                                " for a challenge failed (", Describe(status),
                                                "); is it a tpserve-coordinator of the same version?"));
  } else if (response.secret_required() && !options.secret) {
    error = absl::UnauthenticatedError(absl::StrCat(
        "the coordinator at ", options.coordinator, " requires the cluster secret: pass --cluster-secret-file FILE ",
        "(or set ", kClusterSecretFileEnv, ") with the file the coordinator was given"));
  }
  if (!error.ok()) {
    Log(rank, std::string(error.message()));
    return error;
  }
  Credentials credentials;
  if (options.secret) {
    credentials.challenge = response.challenge();
    credentials.proof = options.secret->HelloProof(credentials.challenge, static_cast<uint32_t>(rank),
                                                   static_cast<uint32_t>(options.worker.rank.world_size));
    credentials.store_token = options.secret->StoreToken(credentials.challenge);
    if (!response.secret_required()) Log(rank, "note: the coordinator does not check the cluster secret");
  }
  return credentials;
}

// Says Hello, then answers every command in order until one asks to exit, the
// stream breaks, or the commands move to shared memory (end.shm).
LoopEnd AnswerCommands(SessionStream& stream, StreamWriter& writer, CommandHandler& handler,
                       const Credentials& credentials, int rank) {
  iv1::WorkerMessage hello;
  *hello.mutable_hello() = handler.MakeHello();
  hello.mutable_hello()->set_challenge(credentials.challenge);
  hello.mutable_hello()->set_proof(credentials.proof);
  LoopEnd end;
  if (writer.Write(hello)) {
    writer.StartHeartbeat(kHeartbeatInterval);
    iv1::CoordinatorMessage command;
    while (end.exit_code < 0 && end.shm == nullptr && stream.Read(&command)) {
      const iv1::WorkerMessage reply = command.has_use_shared_memory() ? OpenChannel(command, rank, end)
                                                                       : Answer(handler, command, rank, end).reply;
      if (!writer.Write(reply)) {
        end.shm.reset();
        break;
      }
    }
  }
  return end;
}

// Answers the commands of the shared-memory channel until one asks to exit or
// the channel closes (the hub closed, or `shm` was closed because the stream
// ended). Replies go back through the channel. A reply that says the worker
// exits (a failed collective) also goes on the stream, as the stream's only
// message: the coordinator's session thread sees it before the stream ends,
// and so knows this rank did not die first.
void AnswerShmCommands(StreamWriter& writer, ShmEndpoint& shm, CommandHandler& handler, int rank, LoopEnd& end) {
  iv1::CoordinatorMessage command;
  std::string bytes_out;
  while (end.exit_code < 0) {
    absl::StatusOr<std::string> bytes = shm.Receive();
    if (!bytes.ok()) return;
    if (!command.ParseFromString(*bytes)) {
      Log(rank, "a command in shared memory does not parse; is the coordinator from the same build?");
      return;
    }
    const iv1::WorkerMessage reply = Answer(handler, command, rank, end).reply;
    if (reply.exiting()) (void)writer.Write(reply);
    reply.SerializeToString(&bytes_out);
    if (!shm.Reply(bytes_out).ok()) return;
  }
}

// The stream once commands come through shared memory: this thread only
// reads it, to learn when it ends (the coordinator went away or closed it, or
// the stopper cancelled it), and then closes the channel so a Receive wakes.
std::thread WatchStream(SessionStream& stream, ShmEndpoint& shm) {
  return std::thread([&stream, &shm] {
    iv1::CoordinatorMessage ignored;
    while (stream.Read(&ignored)) {
    }
    shm.Close(absl::UnavailableError("the session with the coordinator ended"));
  });
}

// After a command asked to exit: lets the coordinator close the stream
// (cancelled after 5 s), detaches the context from the stopper and finishes
// the stream. `reader`, when the stream is already being read (WatchStream), is
// joined instead of reading here.
void CloseStream(SessionStream& stream, StreamWriter& writer, grpc::ClientContext& context, SessionStopper& stopper,
                 std::thread* reader = nullptr) {
  writer.WritesDone();
  absl::Mutex mu;
  bool finished = false;
  std::thread watchdog([&] {
    absl::MutexLock lock(&mu);
    if (!mu.AwaitWithTimeout(absl::Condition(&finished), absl::Seconds(5))) context.TryCancel();
  });
  if (reader != nullptr) {
    reader->join();
  } else {
    iv1::CoordinatorMessage ignored;
    while (stream.Read(&ignored)) {
    }
  }
  stopper.Attach(nullptr);  // before Finish: a stop's notice may be writing
  (void)stream.Finish();
  {
    absl::MutexLock lock(&mu);
    finished = true;
  }
  watchdog.join();
}

}  // namespace

void SessionStopper::Stop(const std::string& why) {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  grpc::ClientContext* const context = context_;
  if (context == nullptr) return;
  if (!notice_ || noticing_) {
    context->TryCancel();
    return;
  }
  noticing_ = true;
  std::thread say([this, notice = notice_, why] {
    notice(why);
    absl::MutexLock done(&mu_);
    noticing_ = false;
  });
  // The coordinator ends the session once it has read the notice and the
  // stream's end (the session then detaches); or it is cancelled here, which
  // also ends a notice that could not be written.
  auto detached = [this, context]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return context_ != context; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&detached), kStopGrace)) context->TryCancel();
  mu_.Unlock();
  say.join();
  mu_.Lock();
}

bool SessionStopper::stopped() const {
  absl::MutexLock lock(&mu_);
  return stopped_;
}

void SessionStopper::Attach(grpc::ClientContext* context, Notice notice) {
  absl::MutexLock lock(&mu_);
  if (context == nullptr) {  // the stream stays until a notice being written is
    auto quiet = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !noticing_; };
    mu_.Await(absl::Condition(&quiet));
  }
  context_ = context;
  notice_ = std::move(notice);
  if (context_ != nullptr && stopped_) context_->TryCancel();
}

int RunWorkerSession(const SessionOptions& options, SessionStopper& stopper) {
  const int rank = options.worker.rank.rank;
  const std::string& address = options.coordinator;
  std::shared_ptr<grpc::Channel> channel = MakeChannel(options);

  Log(rank, absl::StrCat("rank ", rank, " of ", options.worker.rank.world_size, " (local rank ",
                         options.worker.rank.local_rank, ", from ", options.worker.rank.source,
                         "), dialling the coordinator at ", address));
  if (std::optional<int> exit_code = AwaitCoordinator(channel, options, stopper)) return *exit_code;

  std::shared_ptr<iv1::Worker::Stub> stub = iv1::Worker::NewStub(channel);
  absl::StatusOr<Credentials> credentials = Authenticate(*stub, options);
  if (!credentials.ok()) return 1;
  CoordinatorStore store(stub, address, credentials->store_token);
  CommandHandler handler(options.worker, store);

  grpc::ClientContext context;
  stopper.Attach(&context);
  std::unique_ptr<SessionStream> stream = stub->Session(&context);
  StreamWriter writer(*stream);
  stopper.Attach(&context, [&writer](const std::string& why) { writer.SayStopping(why); });
  LoopEnd end = AnswerCommands(*stream, writer, handler, *credentials, rank);
  std::thread watcher;
  if (end.shm != nullptr) {
    watcher = WatchStream(*stream, *end.shm);
    AnswerShmCommands(writer, *end.shm, handler, rank, end);
  }
  writer.StopHeartbeat();
  if (end.exit_code >= 0) {
    CloseStream(*stream, writer, context, stopper, watcher.joinable() ? &watcher : nullptr);
    Log(rank, end.clean_end ? "shut down by the coordinator" : absl::StrCat("exiting with code ", end.exit_code));
    return end.exit_code;
  }
  if (watcher.joinable()) {  // the channel closed: the stream is ending, or ends now
    context.TryCancel();
    watcher.join();
  }
  stopper.Attach(nullptr);  // before Finish: a stop's notice may be writing
  const grpc::Status status = stream->Finish();
  if (stopper.stopped()) {
    Log(rank, "stopped by a signal");
    return 0;
  }
  Log(rank, absl::StrCat("the session with the coordinator at ", address, " ended without Shutdown (",
                         Describe(status), "); the coordinator refused this worker or went away, exiting"));
  return 1;
}

}  // namespace tpserve

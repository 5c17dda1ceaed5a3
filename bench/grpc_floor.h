// The gRPC layer alone, as a floor for the coordinator's cost per token
// (issue 32, "Know the floor"): a server of tpserve.v1.Generation/Generate
// that generates nothing. Every `step_us` one producer thread (the stand-in
// for the coordinator's output thread) makes one token ready for every open
// stream; a stream that is not writing starts its write on that thread, one
// that is writing has the token counted and sends it, with any others that
// came meanwhile, from OnWriteDone as one message. The messages are ready-made
// and serialized once: a GenerateResponse Chunk with a 36-byte request id (a
// server-assigned one's length), k token ids and k bytes of text for k
// tokens, about the size of the coordinator's. A stream gets the request's
// max_tokens tokens, then ends OK. So the server's CPU per message is what
// gRPC costs to stream these messages to these clients, and nothing else.
//
// Run by bench/serving_overhead as a child process (serving_overhead
// --grpc-floor-server STEP_US), measured as the coordinator is: its threads'
// CPU from /proc/PID/task.
#pragma once

namespace tpserve::bench {

// Serves on 127.0.0.1:0, prints "grpc-floor: serving on HOST:PORT" and runs
// until SIGTERM or SIGINT. Returns the process's exit status.
int RunGrpcFloorServer(int step_us);

inline constexpr char kGrpcFloorMarker[] = "grpc-floor: serving on ";

}  // namespace tpserve::bench

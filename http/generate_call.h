// One OpenAI completion request as gRPC Generate calls (one; one per prompt
// of a completions request with a list of prompts, whose choices make one
// response: choice i of prompt p is p * n + i), on gRPC's callback API: no
// thread waits for it. The call reads one gRPC response at a time and
// reads the next only once the client's socket has taken what the last one
// became, so a slow client slows its own stream (and, through gRPC's flow
// control, the coordinator cuts it off with --max-buffered-chunks) without
// anything piling up here.
//
//   streaming      the HTTP head goes out with the first gRPC response (a
//                  refusal before it is an HTTP error instead), then one SSE
//                  event per chunk, the finish (and usage) chunk, [DONE]; an
//                  error after the head is an error event, then [DONE]; with
//                  n > 1 or several prompts the choices' events interleave,
//                  each with its index, and [DONE] follows the last finish
//   not streaming  each choice's text is gathered; one JSON response at the end
//   one call that fails fails the response (the others are cancelled)
//
// The client leaving (closing, resetting, half-closing, or not reading for
// the server's write timeout) cancels the gRPC call: the coordinator frees the
// request at its next step, streaming or not.
#pragma once

#include <memory>

#include "http/coordinator_client.h"
#include "http/openai_request.h"
#include "http/openai_response.h"
#include "httpd/server.h"

namespace tpserve::http {

// Starts the call; it answers `exchange` and ends by itself.
void StartGenerateCall(CoordinatorClient& client, std::shared_ptr<httpd::Exchange> exchange, OpenAiRequest request,
                       ResponseHead head);

}  // namespace tpserve::http

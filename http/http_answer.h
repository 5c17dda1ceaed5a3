// Answers in OpenAI's shapes through an httpd::Exchange.
#pragma once

#include "http/openai_response.h"
#include "httpd/server.h"
#include "nlohmann/json.hpp"

namespace tpserve::http {

inline httpd::Response JsonResponse(int status, const nlohmann::json& body) {
  return httpd::Response{.status = status, .content_type = "application/json", .body = Dump(body)};
}

inline void AnswerJson(httpd::Exchange& exchange, int status, const nlohmann::json& body) {
  exchange.Respond(JsonResponse(status, body));
}

inline void AnswerError(httpd::Exchange& exchange, const HttpError& error) {
  AnswerJson(exchange, error.status, ErrorBody(error));
}

}  // namespace tpserve::http

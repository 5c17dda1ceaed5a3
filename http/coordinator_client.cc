#include "http/coordinator_client.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "auth/api_keys.h"

namespace tpserve::http {
namespace {

namespace v1 = tpserve::v1;

constexpr absl::Duration kUnaryDeadline = absl::Seconds(30);

}  // namespace

CoordinatorClient::CoordinatorClient(std::shared_ptr<grpc::Channel> channel, std::string api_key)
    : stub_(v1::Generation::NewStub(std::move(channel))), api_key_(std::move(api_key)) {}

void CoordinatorClient::Prepare(grpc::ClientContext& context, const std::string& client) const {
  if (!api_key_.empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", api_key_));
  if (!client.empty()) context.AddMetadata(kClientNameMetadata, client);
}

void CoordinatorClient::Begin() {
  absl::MutexLock lock(&mu_);
  ++in_flight_;
}

void CoordinatorClient::End() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

bool CoordinatorClient::AwaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

namespace {

// One unary call through `start` (which calls the stub's async method), its
// request and response kept alive until `done` has run.
template <typename Request, typename Response, typename Start>
void Unary(CoordinatorClient& client, Start start, Request request,
           CoordinatorClient::Done<Response> done) {
  struct State {
    grpc::ClientContext context;
    Request request;
    Response response;
  };
  auto state = std::make_shared<State>();
  state->request = std::move(request);
  client.Prepare(state->context);
  state->context.set_deadline(absl::ToChronoTime(absl::Now() + kUnaryDeadline));
  client.Begin();
  start(&state->context, &state->request, &state->response,
        [&client, state, done = std::move(done)](grpc::Status status) {
          done(status, state->response);
          client.End();
        });
}

}  // namespace

void CoordinatorClient::ModelInfo(Done<v1::ModelInfo> done) {
  std::optional<v1::ModelInfo> cached;
  {
    absl::MutexLock lock(&mu_);
    cached = model_info_;
  }
  if (cached) return done(grpc::Status::OK, *cached);
  Unary<v1::ModelInfoRequest, v1::ModelInfo>(
      *this,
      [this](auto* context, auto* request, auto* response, auto callback) {
        stub_->async()->GetModelInfo(context, request, response, std::move(callback));
      },
      v1::ModelInfoRequest(),
      [this, done = std::move(done)](const grpc::Status& status, v1::ModelInfo& info) {
        if (status.ok()) {
          absl::MutexLock lock(&mu_);
          model_info_ = info;
        }
        done(status, info);
      });
}

void CoordinatorClient::Tokenize(v1::TokenizeRequest request, Done<v1::TokenizeResponse> done) {
  Unary<v1::TokenizeRequest, v1::TokenizeResponse>(
      *this,
      [this](auto* context, auto* r, auto* response, auto callback) {
        stub_->async()->Tokenize(context, r, response, std::move(callback));
      },
      std::move(request), std::move(done));
}

void CoordinatorClient::Detokenize(v1::DetokenizeRequest request, Done<v1::DetokenizeResponse> done) {
  Unary<v1::DetokenizeRequest, v1::DetokenizeResponse>(
      *this,
      [this](auto* context, auto* r, auto* response, auto callback) {
        stub_->async()->Detokenize(context, r, response, std::move(callback));
      },
      std::move(request), std::move(done));
}

void CoordinatorClient::TokenTexts(const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& logprobs,
                                   bool as_ids, std::function<void(absl::StatusOr<TokenText>)> done) {
  if (as_ids) return done(TokenText([](uint32_t id) { return absl::StrCat("token_id:", id); }));
  v1::DetokenizeRequest request;
  request.set_pieces(true);
  for (const v1::TokenLogprob& lp : logprobs) {
    request.add_token_ids(lp.token_id());
    for (const v1::TopLogprob& t : lp.top()) request.add_token_ids(t.token_id());
  }
  std::vector<uint32_t> ids(request.token_ids().begin(), request.token_ids().end());
  Detokenize(std::move(request), [ids = std::move(ids), done = std::move(done)](const grpc::Status& s,
                                                                               v1::DetokenizeResponse& response) {
    if (!s.ok()) return done(absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message()));
    auto texts = std::make_shared<std::map<uint32_t, std::string>>();
    for (size_t i = 0; i < ids.size() && i < static_cast<size_t>(response.pieces_size()); ++i) {
      (*texts)[ids[i]] = response.pieces(static_cast<int>(i));
    }
    done(TokenText([texts](uint32_t id) {
      auto it = texts->find(id);
      return it == texts->end() ? absl::StrCat("token_id:", id) : it->second;
    }));
  });
}

}  // namespace tpserve::http

#include "speculative/proposer.h"

#include "base/check.h"

namespace tpserve::speculative {
namespace {

class Ngram final : public Proposer {
 public:
  explicit Ngram(NgramProposer p) : p_(std::move(p)) {}
  void Append(std::span<const int32_t> tokens) override { p_.Append(tokens); }
  int32_t Propose(std::span<int32_t> out) override { return p_.Propose(out); }
  int64_t memory_bytes() const override { return p_.memory_bytes(); }

 private:
  NgramProposer p_;
};

class Suffix final : public Proposer {
 public:
  explicit Suffix(SuffixProposer p) : p_(std::move(p)) {}
  void Append(std::span<const int32_t> tokens) override { p_.Append(tokens); }
  int32_t Propose(std::span<int32_t> out) override { return p_.Propose(out).num_tokens; }
  int64_t memory_bytes() const override { return p_.memory_bytes(); }

 private:
  SuffixProposer p_;
};

}  // namespace

std::unique_ptr<Proposer> MakeProposer(NgramProposer proposer) {
  return std::make_unique<Ngram>(std::move(proposer));
}
std::unique_ptr<Proposer> MakeProposer(SuffixProposer proposer) {
  return std::make_unique<Suffix>(std::move(proposer));
}

int32_t AcceptGreedy(std::span<const int32_t> proposed, std::span<const int32_t> target) {
  TPSERVE_CHECK(target.size() == proposed.size() + 1, "AcceptGreedy: ", target.size(), " target tokens for ",
                proposed.size(), " proposed; a verification has k + 1 rows");
  int32_t a = 0;
  while (static_cast<size_t>(a) < proposed.size() && proposed[static_cast<size_t>(a)] == target[static_cast<size_t>(a)]) ++a;
  return a;
}

}  // namespace tpserve::speculative

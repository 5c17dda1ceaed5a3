// Matcher: Accept (the token's bytes through the lexer and the parser),
// Rollback (the saved state before each token), and the queries.
#include "grammar/matcher.h"

#include <algorithm>

#include "base/check.h"
#include "grammar/matcher_state.h"

namespace tpserve::grammar {

using internal::Completion;

Matcher::State::State(std::shared_ptr<const CompiledGrammar> c)
    : compiled(std::move(c)),
      vocabulary(*compiled->vocabulary),
      tables(compiled->tables),
      deriver(compiled->tables),
      walk_entries(static_cast<size_t>(vocabulary.max_token_bytes()) + 1),
      walk_done(static_cast<size_t>(vocabulary.max_token_bytes()) + 1) {
  chart.push_back({compiled->initial, {}, {}});
  for (int32_t t : compiled->initial->terminals) {
    active.push_back({0, t, compiled->automata[static_cast<size_t>(t)]->dfa.start});
  }
}

void Matcher::State::Advance(std::span<const LexEntry> from, uint8_t byte, std::vector<LexEntry>& to,
                             std::vector<Completion>& done) const {
  for (const LexEntry& e : from) {
    const internal::Dfa& dfa = compiled->automata[static_cast<size_t>(e.terminal)]->dfa;
    const int32_t s = dfa.Next(e.state, byte);
    if (s < 0) continue;
    if (dfa.Accepting(s)) done.push_back({e.set, e.terminal});
    if (dfa.Extendable(s)) to.push_back({e.set, e.terminal, s});
  }
}

int32_t Matcher::State::Boundary(std::span<const Completion> done, std::vector<LexEntry>& to) {
  std::shared_ptr<const internal::EarleySet> set = deriver.Derive(chart, done);
  const auto index = static_cast<int32_t>(chart.size());
  for (int32_t t : set->terminals) to.push_back({index, t, compiled->automata[static_cast<size_t>(t)]->dfa.start});
  chart.push_back({std::move(set), {}, {}});
  return index;
}

bool Matcher::State::Complete() const {
  if (!status.ok()) return false;
  return stopped || (current >= 0 && chart[static_cast<size_t>(current)].set->complete);
}

bool Matcher::State::Accept(int32_t token) {
  if (stopped || !status.ok() || token < 0 || token >= vocabulary.size()) return false;
  Saved saved{chart.size(), active, current, stopped};
  if (vocabulary.is_stop(token)) {
    if (!Complete()) return false;
    stopped = true;
  } else {
    if (!vocabulary.in_trie(token)) return false;
    std::vector<LexEntry> here = active, next;
    std::vector<Completion> done;
    int32_t set = current;
    for (unsigned char byte : vocabulary.bytes(token)) {
      next.clear();
      done.clear();
      Advance(here, byte, next, done);
      set = done.empty() ? -1 : Boundary(done, next);
      if (next.empty() && set < 0) {
        chart.resize(saved.chart_size);
        return false;
      }
      here.swap(next);
    }
    active = std::move(here);
    current = set;
  }
  history.push_back(std::move(saved));
  forced.reset();
  return true;
}

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar) : state_(std::make_unique<State>(std::move(grammar))) {}
Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

void Matcher::FillMask(std::span<uint32_t> words) { state_->FillMask(words, {0, words.size()}); }
MaskRange Matcher::FillMask(std::span<uint32_t> words, MaskRange dirty) { return state_->FillMask(words, dirty); }
bool Matcher::Accept(int32_t token) { return state_->Accept(token); }

void Matcher::Rollback(size_t n) {
  TPSERVE_CHECK(n <= state_->history.size());
  if (n == 0) return;
  State& s = *state_;
  State::Saved& saved = s.history[s.history.size() - n];
  s.chart.resize(saved.chart_size);
  s.active = std::move(saved.active);
  s.current = saved.current;
  s.stopped = saved.stopped;
  s.history.resize(s.history.size() - n);
  s.forced.reset();
}

const absl::Status& Matcher::status() const { return state_->status; }
size_t Matcher::accepted() const { return state_->history.size(); }
bool Matcher::IsComplete() const { return state_->Complete(); }
bool Matcher::IsTerminated() const { return state_->stopped || (state_->Complete() && state_->active.empty()); }

std::optional<int32_t> Matcher::ForcedToken() {
  State& s = *state_;
  if (s.forced) return *s.forced;
  std::optional<int32_t> result;
  if (!s.stopped) {
    s.scratch_words.resize(MaskWords(s.vocabulary.size()));
    s.FillMask(s.scratch_words, {0, s.scratch_words.size()});
    int found = 0;
    for (size_t w = 0; w < s.scratch_words.size() && found < 2; ++w) {
      for (uint32_t bits = s.scratch_words[w]; bits != 0 && found < 2; bits &= bits - 1) {
        result = static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits)));
        ++found;
      }
    }
    if (found != 1 || s.vocabulary.is_stop(*result)) result.reset();  // a mask that gave up allows nothing
  }
  s.forced = result;
  return result;
}

}  // namespace tpserve::grammar

#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

// Per-thread match state, shared by every Regex used on that thread.
struct ThreadState {
  pcre2_match_data* data = nullptr;     // one ovector pair: we need only the whole match
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;  // grows up to 64 MiB: long whitespace runs backtrack deeply

  ThreadState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
    if (context != nullptr && jit_stack != nullptr) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

ThreadState& State() {
  thread_local ThreadState state;
  return state;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern, bool literal,
                                                      const std::string& field) {
  uint32_t options = PCRE2_UTF | PCRE2_UCP;
  if (literal) options |= PCRE2_LITERAL;
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error,
                                   &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("field '", field, "': regex does not compile at offset ", offset,
                                                   ": ", reinterpret_cast<const char*>(message)));
  }
  std::unique_ptr<Regex> regex(new Regex());
  regex->code_ = code;
  regex->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return regex;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::ForEachMatch(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const {
  auto* code = static_cast<pcre2_code*>(code_);
  ThreadState& state = State();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  while (offset <= text.size()) {
    int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), offset, 0, state.data, state.context)
                  : PCRE2_ERROR_JIT_STACKLIMIT;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // No JIT, or its stack is exhausted: the interpreter keeps its frames on the heap.
      rc = pcre2_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, state.data,
                       state.context);
    }
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // Match limits hit on pathological input: leave the rest as one unmatched piece.
      break;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      on_match(begin, end);
      offset = end;
    } else {
      // Empty match: step over one code point.
      offset = begin + 1;
      while (offset < text.size() && (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80) ++offset;
      if (begin >= text.size()) break;
    }
  }
}

}  // namespace tpserve

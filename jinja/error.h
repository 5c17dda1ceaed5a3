// Errors raised while parsing or rendering a template. Inside the engine they are
// thrown as RenderError and caught at the public API (jinja/template.h), which
// returns them as absl::Status; they never escape it.
#pragma once

#include <stdexcept>
#include <string>

namespace tpserve::jinja {

class RenderError : public std::runtime_error {
 public:
  enum class Kind {
    kSyntax,      // the template cannot be parsed, or uses an unsupported construct
    kRuntime,     // a type error, an undefined attribute, a limit exceeded
    kRaised,      // the template called raise_exception(message)
  };
  RenderError(Kind kind, std::string message, int line = 0)
      : std::runtime_error(std::move(message)), kind_(kind), line_(line) {}
  Kind kind() const { return kind_; }
  int line() const { return line_; }  // 1-based; 0 when not known yet

 private:
  Kind kind_;
  int line_;
};

[[noreturn]] inline void Fail(std::string message) {
  throw RenderError(RenderError::Kind::kRuntime, std::move(message));
}

}  // namespace tpserve::jinja

// Parse and render at the public interface: RenderError becomes a Status here.
// See jinja/template.h.
#include "jinja/template.h"

#include "jinja/ast.h"
#include "jinja/error.h"
#include "jinja/interpreter.h"
#include "jinja/parser.h"

namespace tpserve::jinja {

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  try {
    return Template(std::make_shared<const Program>(jinja::Parse(source)));
  } catch (const RenderError& e) {
    return absl::InvalidArgumentError(e.what());
  } catch (const std::exception& e) {  // std::bad_alloc and the like: never out of the engine
    return absl::ResourceExhaustedError(std::string("template parsing failed: ") + e.what());
  }
}

absl::StatusOr<Text> Template::Render(const nlohmann::ordered_json& data, const nlohmann::ordered_json& trusted,
                                      const RenderLimits& limits) const {
  if (!data.is_object() || !trusted.is_object()) {
    return absl::InvalidArgumentError("template variables must be given as JSON objects");
  }
  Interpreter::Frame globals;
  try {
    for (const auto& [k, v] : data.items()) globals[k] = Value::FromJson(v, /*trusted=*/false);
    for (const auto& [k, v] : trusted.items()) globals[k] = Value::FromJson(v, /*trusted=*/true);
  } catch (const RenderError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  Interpreter interp(limits, std::move(globals));
  try {
    return interp.Run(*program_);
  } catch (const RenderError& e) {
    if (e.kind() == RenderError::Kind::kRaised) return absl::InvalidArgumentError(e.what());
    return absl::InvalidArgumentError("line " + std::to_string(interp.line()) + ": " + e.what());
  } catch (const std::exception& e) {  // std::bad_alloc and the like: never out of the engine
    return absl::ResourceExhaustedError(std::string("template rendering failed: ") + e.what());
  }
}

}  // namespace tpserve::jinja

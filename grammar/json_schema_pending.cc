// Stands in for json_schema.cc until the JSON Schema front end lands: the
// library links, and Compile answers UNIMPLEMENTED for kJsonSchema and
// kJsonObject. grammar/CMakeLists.txt picks json_schema.cc when it exists.
#include "grammar/json_schema.h"

namespace tpserve::grammar {

absl::StatusOr<Grammar> JsonSchemaGrammar(absl::string_view, JsonLayout, const CompileLimits&) {
  return absl::UnimplementedError("JSON Schema grammars are not built yet (grammar/json_schema.cc)");
}

absl::StatusOr<Grammar> JsonObjectGrammar(JsonLayout, const CompileLimits&) {
  return absl::UnimplementedError("JSON object grammars are not built yet (grammar/json_schema.cc)");
}

}  // namespace tpserve::grammar

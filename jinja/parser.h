// Parses template tokens (jinja/lexer.h) into a Program (jinja/ast.h).
// Supported statements: if/elif/else, for (loop variables, tuple unpacking,
// `if` filter, else), set (name, namespace attribute, block set), macro,
// break/continue, and transformers' generation block. Anything else -- an unknown
// statement, filter, test, method (`x.format()`) or function (`lipsum()`) -- is a
// kSyntax RenderError naming it and its line.
#pragma once

#include <string_view>

#include "jinja/ast.h"

namespace tpserve::jinja {

Program Parse(std::string_view source);

}  // namespace tpserve::jinja

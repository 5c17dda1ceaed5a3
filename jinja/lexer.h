// Splits a template source into tokens the way Jinja2's lexer does with
// transformers' settings: trim_blocks, lstrip_blocks, keep_trailing_newline off,
// newlines normalised to "\n", `{%-`/`-%}`/`{{-`/`-}}`/`{#-`/`-#}` whitespace
// control, `{%+` to keep lstrip_blocks from applying. Comments are dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tpserve::jinja {

struct Token {
  enum class Type {
    kText,        // template data outside tags (value: the text)
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,        // identifier or keyword
    kString,      // string literal, escapes already applied
    kInt,
    kFloat,
    kOp,          // operator or punctuation: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
    kEof,
  };
  Type type;
  std::string value;
  int line = 1;  // 1-based line of the token's first character
};

// Throws RenderError(kSyntax) naming the line for an unterminated tag, comment or string.
std::vector<Token> Tokenize(std::string_view source);

}  // namespace tpserve::jinja

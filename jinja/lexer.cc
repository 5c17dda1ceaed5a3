// Jinja2's lexer, the subset chat templates need. See jinja/lexer.h.
#include "jinja/lexer.h"

#include <cctype>

#include "jinja/error.h"
#include "jinja/utf8.h"

namespace tpserve::jinja {
namespace {

[[noreturn]] void SyntaxError(int line, const std::string& what) {
  throw RenderError(RenderError::Kind::kSyntax, "line " + std::to_string(line) + ": " + what, line);
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Jinja2 reads the source with every line ending as "\n" and drops one trailing newline.
std::string NormalizeSource(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}
  std::vector<Token> Run();

 private:
  void EmitText(std::string text, int line);
  // Lexes the inside of a {{ }} or {% %} tag starting at pos_; consumes the closing delimiter.
  void LexTag(bool block);
  void LexString(char quote);
  void LexNumber();
  // After a tag's closing delimiter: `-` strips all following whitespace, trim_blocks one "\n".
  void AfterTagEnd(bool strip, bool trim_newline);
  void Advance(size_t n);

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // the last thing consumed ended a line (for lstrip_blocks)
  std::vector<Token> out_;
};

void Lexer::Advance(size_t n) {
  for (size_t i = 0; i < n && pos_ < src_.size(); ++i, ++pos_) {
    if (src_[pos_] == '\n') ++line_;
  }
}

void Lexer::EmitText(std::string text, int line) {
  if (!text.empty()) out_.push_back({Token::Type::kText, std::move(text), line});
}

void Lexer::AfterTagEnd(bool strip, bool trim_newline) {
  line_starting_ = false;
  if (strip) {
    while (pos_ < src_.size() && IsSpace(src_[pos_])) {
      line_starting_ = src_[pos_] == '\n';
      Advance(1);
    }
  } else if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
    Advance(1);
    line_starting_ = true;
  }
}

std::vector<Token> Lexer::Run() {
  while (pos_ < src_.size()) {
    const int text_line = line_;
    size_t open = src_.find('{', pos_);
    while (open != std::string::npos && open + 1 < src_.size() && src_[open + 1] != '{' && src_[open + 1] != '%' &&
           src_[open + 1] != '#') {
      open = src_.find('{', open + 1);
    }
    if (open == std::string::npos || open + 1 >= src_.size()) {
      EmitText(src_.substr(pos_), text_line);
      Advance(src_.size() - pos_);
      break;
    }
    std::string text = src_.substr(pos_, open - pos_);
    Advance(open - pos_);
    const char kind = src_[open + 1];
    const char mod = open + 2 < src_.size() ? src_[open + 2] : '\0';
    if (mod == '-') {
      while (!text.empty() && IsSpace(text.back())) text.pop_back();
    } else if (mod != '+' && kind != '{') {
      // lstrip_blocks: drop spaces and tabs between the line's start and a {% or {#.
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && text.find_first_not_of(" \t", l_pos) == std::string::npos) {
        text.resize(l_pos);
      }
    }
    EmitText(std::move(text), text_line);
    Advance(2 + ((mod == '-' || mod == '+') ? 1 : 0));
    if (kind == '#') {
      const int start = line_;
      const size_t close = src_.find("#}", pos_);
      if (close == std::string::npos) SyntaxError(start, "unterminated comment {# ... (add #})");
      const bool strip = close > pos_ && src_[close - 1] == '-';
      Advance(close + 2 - pos_);
      AfterTagEnd(strip, /*trim_newline=*/true);
      continue;
    }
    LexTag(kind == '%');
  }
  out_.push_back({Token::Type::kEof, "", line_});
  return std::move(out_);
}

void Lexer::LexTag(bool block) {
  const int start = line_;
  out_.push_back({block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "", start});
  int depth = 0;  // open ( [ { inside the tag: a "}}" there closes a dict, not the tag
  while (true) {
    while (pos_ < src_.size() && IsSpace(src_[pos_])) Advance(1);
    if (pos_ >= src_.size()) SyntaxError(start, std::string("unterminated tag ") + (block ? "{% ... (add %})" : "{{ ... (add }})"));
    const std::string_view rest = std::string_view(src_).substr(pos_);
    const std::string_view close = block ? "%}" : "}}";
    for (int strip = 1; strip >= 0; --strip) {
      const bool plus = !strip && block && rest.size() > 2 && rest[0] == '+' && rest.substr(1, 2) == close;
      const size_t skip = (strip || plus) ? 1 : 0;
      if ((!strip || rest[0] == '-') && (!plus || rest[0] == '+') && rest.substr(skip, 2) == close &&
          (depth == 0 || block)) {
        out_.push_back({block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", line_});
        Advance(skip + 2);
        AfterTagEnd(strip == 1, block && !plus);
        return;
      }
    }
    const char c = rest[0];
    if (c == '\'' || c == '"') {
      LexString(c);
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      LexNumber();
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t n = 1;
      while (n < rest.size() && (std::isalnum(static_cast<unsigned char>(rest[n])) || rest[n] == '_')) ++n;
      out_.push_back({Token::Type::kName, std::string(rest.substr(0, n)), line_});
      Advance(n);
    } else {
      static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
      size_t n = 0;
      for (std::string_view op : kTwo) {
        if (rest.substr(0, 2) == op) n = 2;
      }
      if (n == 0 && std::string_view("+-*/%~<>=()[]{},.:|").find(c) != std::string_view::npos) n = 1;
      if (n == 0) SyntaxError(line_, std::string("unexpected character '") + c + "' in a tag");
      if (c == '(' || c == '[' || c == '{') ++depth;
      if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
      out_.push_back({Token::Type::kOp, std::string(rest.substr(0, n)), line_});
      Advance(n);
    }
  }
}

// Python's unicode-escape decoding of a Jinja string literal: \n \t \r \\ \' \" \xHH \uHHHH
// \UHHHHHHHH are decoded, any other backslash sequence is kept as written.
void Lexer::LexString(char quote) {
  const int start = line_;
  std::string value;
  size_t i = pos_ + 1;
  while (true) {
    if (i >= src_.size()) SyntaxError(start, std::string("unterminated string literal (add the closing ") + quote + ")");
    const char c = src_[i];
    if (c == quote) break;
    if (c != '\\' || i + 1 >= src_.size()) {
      value += c;
      ++i;
      continue;
    }
    const char e = src_[i + 1];
    static constexpr std::string_view kFrom = "nrtabfv\\'\"\n0";
    static constexpr std::string_view kTo = "\n\r\t\a\b\f\v\\'\"";
    const size_t k = kFrom.find(e);
    if (k != std::string_view::npos && k < kTo.size()) {
      value += kTo[k];
      i += 2;
    } else if (e == '\n') {
      i += 2;  // a backslash-newline continues the line
    } else if (e == 'x' || e == 'u' || e == 'U') {
      const size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
      uint32_t cp = 0;
      for (size_t d = 0; d < len; ++d) {
        const char h = i + 2 + d < src_.size() ? src_[i + 2 + d] : '\0';
        if (!std::isxdigit(static_cast<unsigned char>(h))) SyntaxError(line_, std::string("bad \\") + e + " escape in a string literal");
        cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      if (cp > 0x10FFFF) SyntaxError(line_, "\\U escape beyond U+10FFFF in a string literal");
      AppendUtf8(cp, value);
      i += 2 + len;
    } else {
      value += c;
      value += e;
      i += 2;
    }
  }
  out_.push_back({Token::Type::kString, std::move(value), start});
  Advance(i + 1 - pos_);
}

void Lexer::LexNumber() {
  size_t n = 0;
  const std::string_view rest = std::string_view(src_).substr(pos_);
  bool is_float = false;
  auto digits = [&] {
    while (n < rest.size() && (std::isdigit(static_cast<unsigned char>(rest[n])) || rest[n] == '_')) ++n;
  };
  digits();
  if (n + 1 < rest.size() && rest[n] == '.' && std::isdigit(static_cast<unsigned char>(rest[n + 1]))) {
    is_float = true;
    ++n;
    digits();
  }
  if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
    size_t m = n + 1;
    if (m < rest.size() && (rest[m] == '+' || rest[m] == '-')) ++m;
    if (m < rest.size() && std::isdigit(static_cast<unsigned char>(rest[m]))) {
      is_float = true;
      n = m;
      digits();
    }
  }
  std::string text;
  for (char c : rest.substr(0, n)) {
    if (c != '_') text += c;
  }
  out_.push_back({is_float ? Token::Type::kFloat : Token::Type::kInt, text, line_});
  Advance(n);
}

}  // namespace

std::vector<Token> Tokenize(std::string_view source) { return Lexer(NormalizeSource(source)).Run(); }

}  // namespace tpserve::jinja

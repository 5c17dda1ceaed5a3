// Recursive-descent parser following Jinja2's grammar and operator precedence
// (jinja2/parser.py: condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary,
// then postfix . [] () and the | filters and `is` tests). See jinja/parser.h.
#include "jinja/parser.h"

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/lexer.h"

namespace tpserve::jinja {
namespace {

using T = Token::Type;
constexpr int kMaxDepth = 200;  // nesting of expressions and blocks; deeper is a syntax error

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Program Run() {
    Program p;
    std::string end;
    p.body = ParseBody({}, &end);
    // A called name must be a global or a macro of this template (data holds no functions).
    for (const auto& [name, line] : called_names_) {
      if (!IsKnownGlobal(name) && macros_.count(name) == 0) {
        throw RenderError(RenderError::Kind::kSyntax,
                          "line " + std::to_string(line) + ": unsupported function '" + name +
                              "()'; supported: range, namespace, dict, raise_exception, strftime_now and macros",
                          line);
      }
    }
    return p;
  }

 private:
  const Token& Cur() const { return toks_[pos_]; }
  const Token& Next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool IsOp(std::string_view op) const { return Cur().type == T::kOp && Cur().value == op; }
  bool IsName(std::string_view n) const { return Cur().type == T::kName && Cur().value == n; }
  [[noreturn]] void Error(const std::string& what) const {
    throw RenderError(RenderError::Kind::kSyntax, "line " + std::to_string(Cur().line) + ": " + what, Cur().line);
  }
  // An integer literal (`12`, or the index in `x.12`); past 64 bits a syntax error, as Jinja2 has no such ints here.
  int64_t IntLiteral(const std::string& v) const {
    int64_t i = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), i);
    if (ec != std::errc() || end != v.data() + v.size()) Error("integer literal " + v + " does not fit in 64 bits");
    return i;
  }
  void Expect(std::string_view op) {
    if (!IsOp(op)) Error("expected '" + std::string(op) + "', found " + Describe(Cur()));
    Next();
  }
  std::string ExpectName() {
    if (Cur().type != T::kName) Error("expected a name, found " + Describe(Cur()));
    return Next().value;
  }
  void ExpectBlockEnd(std::string_view stmt) {
    if (Cur().type != T::kBlockEnd) Error("expected %} to end {% " + std::string(stmt) + " %}, found " + Describe(Cur()));
    Next();
  }
  static std::string Describe(const Token& t) {
    switch (t.type) {
      case T::kEof: return "the end of the template";
      case T::kBlockEnd: return "%}";
      case T::kVarEnd: return "}}";
      case T::kText: return "template text";
      default: return "'" + t.value + "'";
    }
  }
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p(p) {
      if (++p->depth_ > kMaxDepth) p->Error("the template nests deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };

  Body ParseBody(std::initializer_list<std::string_view> ends, std::string* end);
  std::unique_ptr<Stmt> ParseStatement(const std::string& keyword, int line);
  std::unique_ptr<Stmt> ParseIf(int line);
  std::unique_ptr<Stmt> ParseFor(int line);
  std::unique_ptr<Stmt> ParseSet(int line);
  std::unique_ptr<Stmt> ParseMacro(int line);

  ExprPtr ParseExpr();  // condexpr
  ExprPtr ParseOr();
  ExprPtr ParseAnd();
  ExprPtr ParseNot();
  ExprPtr ParseCompare();
  ExprPtr ParseMath1();
  ExprPtr ParseConcat();
  ExprPtr ParseMath2();
  ExprPtr ParsePow();
  ExprPtr ParseUnary(bool with_filter);
  ExprPtr ParsePrimary();
  ExprPtr ParsePostfix(ExprPtr e);
  ExprPtr ParseFilterExpr(ExprPtr e);
  void ParseCallArgs(Expr& call);  // after '(' up to and including ')'
  // a, b, c without brackets, or one expression; a `for` iterable takes no inline if.
  ExprPtr ParseTupleOrExpr(bool with_condexpr = true);

  ExprPtr Make(Expr::Kind kind) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = Cur().line;
    return e;
  }
  ExprPtr MakeBinary(std::string op, ExprPtr l, ExprPtr r) {
    auto e = Make(Expr::Kind::kBinary);
    e->name = std::move(op);
    e->a = std::move(l);
    e->args.push_back(std::move(r));
    return e;
  }

  // A call `callee(...)` at the current token: a method must be one some value has.
  ExprPtr MakeCall(ExprPtr callee) {
    if (callee->kind == Expr::Kind::kGetAttr && !IsKnownMethod(callee->name)) {
      Error("unsupported method '." + callee->name + "()'");
    }
    if (callee->kind == Expr::Kind::kName) called_names_.emplace_back(callee->name, callee->line);
    auto c = Make(Expr::Kind::kCall);
    c->a = std::move(callee);
    ParseCallArgs(*c);
    return c;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::set<std::string> macros_;                            // names of the template's macros
  std::vector<std::pair<std::string, int>> called_names_;  // name(...) calls and their lines
};

Body Parser::ParseBody(std::initializer_list<std::string_view> ends, std::string* end) {
  DepthGuard guard(this);
  Body body;
  while (true) {
    const Token& t = Cur();
    if (t.type == T::kEof) {
      if (ends.size() == 0) return body;
      std::string want;
      for (std::string_view e : ends) want += (want.empty() ? "{% " : " or {% ") + std::string(e) + " %}";
      Error("the template ended inside a block; expected " + want);
    }
    if (t.type == T::kText) {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kText;
      s->line = t.line;
      s->text = t.value;
      body.push_back(std::move(s));
      Next();
    } else if (t.type == T::kVarBegin) {
      Next();
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kOutput;
      s->line = t.line;
      s->expr = ParseExpr();
      if (Cur().type != T::kVarEnd) Error("expected }} to end {{ ... }}, found " + Describe(Cur()));
      Next();
      body.push_back(std::move(s));
    } else if (t.type == T::kBlockBegin) {
      Next();
      const int line = Cur().line;
      const std::string kw = ExpectName();
      for (std::string_view e : ends) {
        if (kw == e) {
          *end = kw;
          return body;
        }
      }
      body.push_back(ParseStatement(kw, line));
    } else {
      Error("unexpected " + Describe(t));
    }
  }
}

std::unique_ptr<Stmt> Parser::ParseStatement(const std::string& kw, int line) {
  if (kw == "if") return ParseIf(line);
  if (kw == "for") return ParseFor(line);
  if (kw == "set") return ParseSet(line);
  if (kw == "macro") return ParseMacro(line);
  auto s = std::make_unique<Stmt>();
  s->line = line;
  if (kw == "break" || kw == "continue") {
    s->kind = kw == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    ExpectBlockEnd(kw);
    return s;
  }
  if (kw == "generation") {  // transformers' assistant-mask marker: renders its body unchanged
    s->kind = Stmt::Kind::kBlock;
    ExpectBlockEnd(kw);
    std::string end;
    s->bodies.push_back(ParseBody({"endgeneration"}, &end));
    ExpectBlockEnd(end);
    return s;
  }
  if (kw == "elif" || kw == "else" || kw.rfind("end", 0) == 0) {
    Error("{% " + kw + " %} without the block it belongs to");
  }
  Error("unsupported statement {% " + kw +
        " %}; supported: if/elif/else, for, set, macro, break, continue, generation");
}

std::unique_ptr<Stmt> Parser::ParseIf(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::kIf;
  s->line = line;
  std::string end = "if";
  while (end == "if" || end == "elif") {
    s->conds.push_back(ParseExpr());
    ExpectBlockEnd(end);
    s->bodies.push_back(ParseBody({"elif", "else", "endif"}, &end));
  }
  if (end == "else") {
    ExpectBlockEnd("else");
    s->else_body = ParseBody({"endif"}, &end);
  }
  ExpectBlockEnd("endif");
  return s;
}

std::unique_ptr<Stmt> Parser::ParseFor(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::kFor;
  s->line = line;
  s->targets.push_back(ExpectName());
  while (IsOp(",")) {
    Next();
    s->targets.push_back(ExpectName());
  }
  if (!IsName("in")) Error("expected 'in' in {% for %}, found " + Describe(Cur()));
  Next();
  s->expr = ParseTupleOrExpr(/*with_condexpr=*/false);
  if (IsName("if")) {
    Next();
    s->cond = ParseExpr();
  }
  if (IsName("recursive")) Error("unsupported: recursive for loops");
  ExpectBlockEnd("for");
  std::string end;
  s->bodies.push_back(ParseBody({"else", "endfor"}, &end));
  if (end == "else") {
    ExpectBlockEnd("else");
    s->else_body = ParseBody({"endfor"}, &end);
  }
  ExpectBlockEnd("endfor");
  return s;
}

std::unique_ptr<Stmt> Parser::ParseSet(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::kSet;
  s->line = line;
  s->targets.push_back(ExpectName());
  if (IsOp(".")) {
    Next();
    s->targets.push_back(ExpectName());
  }
  if (IsOp(",")) Error("unsupported: assigning to several names in one {% set %}");
  if (IsOp("=")) {
    Next();
    s->expr = ParseTupleOrExpr();
    ExpectBlockEnd("set");
    return s;
  }
  if (s->targets.size() != 1) Error("a block {% set %} needs a plain name");
  if (IsOp("|")) Error("unsupported: filters on a block {% set %}");
  ExpectBlockEnd("set");
  std::string end;
  s->bodies.push_back(ParseBody({"endset"}, &end));
  ExpectBlockEnd("endset");
  return s;
}

std::unique_ptr<Stmt> Parser::ParseMacro(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::kMacro;
  s->line = line;
  s->targets.push_back(ExpectName());
  macros_.insert(s->targets[0]);
  Expect("(");
  while (!IsOp(")")) {
    if (!s->params.empty()) Expect(",");
    std::string name = ExpectName();
    ExprPtr def;
    if (IsOp("=")) {
      Next();
      def = ParseExpr();
    }
    s->params.emplace_back(std::move(name), std::move(def));
  }
  Next();
  ExpectBlockEnd("macro");
  std::string end;
  s->bodies.push_back(ParseBody({"endmacro"}, &end));
  ExpectBlockEnd("endmacro");
  return s;
}

ExprPtr Parser::ParseTupleOrExpr(bool with_condexpr) {
  auto one = [&] { return with_condexpr ? ParseExpr() : ParseOr(); };
  ExprPtr first = one();
  if (!IsOp(",")) return first;
  auto list = Make(Expr::Kind::kList);
  list->name = "tuple";
  list->args.push_back(std::move(first));
  while (IsOp(",")) {
    Next();
    if (Cur().type == T::kBlockEnd || IsName("if") || IsOp(")")) break;
    list->args.push_back(one());
  }
  return list;
}

ExprPtr Parser::ParseExpr() {
  DepthGuard guard(this);
  ExprPtr e = ParseOr();
  while (IsName("if")) {
    Next();
    auto cond = Make(Expr::Kind::kCond);
    cond->args.push_back(std::move(e));
    cond->args.push_back(ParseOr());
    if (IsName("else")) {
      Next();
      cond->args.push_back(ParseExpr());
    } else {
      cond->args.push_back(nullptr);
    }
    e = std::move(cond);
  }
  return e;
}

ExprPtr Parser::ParseOr() {
  ExprPtr e = ParseAnd();
  while (IsName("or")) {
    Next();
    e = MakeBinary("or", std::move(e), ParseAnd());
  }
  return e;
}

ExprPtr Parser::ParseAnd() {
  ExprPtr e = ParseNot();
  while (IsName("and")) {
    Next();
    e = MakeBinary("and", std::move(e), ParseNot());
  }
  return e;
}

ExprPtr Parser::ParseNot() {
  if (IsName("not")) {
    DepthGuard guard(this);
    auto e = Make(Expr::Kind::kNot);
    Next();
    e->a = ParseNot();
    return e;
  }
  return ParseCompare();
}

ExprPtr Parser::ParseCompare() {
  ExprPtr first = ParseMath1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (Cur().type == T::kOp &&
        (Cur().value == "==" || Cur().value == "!=" || Cur().value == "<" || Cur().value == "<=" ||
         Cur().value == ">" || Cur().value == ">=")) {
      op = Next().value;
    } else if (IsName("in")) {
      Next();
      op = "in";
    } else if (IsName("not") && toks_[pos_ + 1].type == T::kName && toks_[pos_ + 1].value == "in") {
      Next();
      Next();
      op = "notin";
    } else {
      break;
    }
    if (!cmp) {
      cmp = Make(Expr::Kind::kCompare);
      cmp->a = std::move(first);
    }
    cmp->ops.push_back(op);
    cmp->args.push_back(ParseMath1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

ExprPtr Parser::ParseMath1() {
  ExprPtr e = ParseConcat();
  while (IsOp("+") || IsOp("-")) {
    std::string op = Next().value;
    e = MakeBinary(op, std::move(e), ParseConcat());
  }
  return e;
}

ExprPtr Parser::ParseConcat() {
  ExprPtr e = ParseMath2();
  while (IsOp("~")) {
    Next();
    e = MakeBinary("~", std::move(e), ParseMath2());
  }
  return e;
}

ExprPtr Parser::ParseMath2() {
  ExprPtr e = ParsePow();
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    std::string op = Next().value;
    e = MakeBinary(op, std::move(e), ParsePow());
  }
  return e;
}

ExprPtr Parser::ParsePow() {
  ExprPtr e = ParseUnary(true);
  while (IsOp("**")) {
    Next();
    e = MakeBinary("**", std::move(e), ParseUnary(true));
  }
  return e;
}

ExprPtr Parser::ParseUnary(bool with_filter) {
  DepthGuard guard(this);
  ExprPtr e;
  if (IsOp("-") || IsOp("+")) {
    e = Make(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos);
    Next();
    e->a = ParseUnary(false);
  } else {
    e = ParsePrimary();
  }
  e = ParsePostfix(std::move(e));
  return with_filter ? ParseFilterExpr(std::move(e)) : std::move(e);
}

ExprPtr Parser::ParsePrimary() {
  const Token& t = Cur();
  auto e = Make(Expr::Kind::kLiteral);
  switch (t.type) {
    case T::kName: {
      const std::string& n = t.value;
      if (n == "true" || n == "True" || n == "false" || n == "False") {
        e->value = Value::Bool(n[0] == 't' || n[0] == 'T');
      } else if (n == "none" || n == "None") {
        e->value = Value::None();
      } else {
        e->kind = Expr::Kind::kName;
        e->name = n;
      }
      Next();
      return e;
    }
    case T::kString: {
      std::string s;
      while (Cur().type == T::kString) s += Next().value;  // adjacent literals concatenate
      e->value = Value::String(Text::Trusted(s));
      return e;
    }
    case T::kInt:
      e->value = Value::Int(IntLiteral(Next().value));
      return e;
    case T::kFloat:
      // strtod, not stod: out of range is inf or 0.0 as in Python (1e999, 1e-999), not an exception.
      e->value = Value::Float(std::strtod(Next().value.c_str(), nullptr));
      return e;
    default:
      break;
  }
  if (IsOp("(")) {
    Next();
    if (IsOp(")")) {
      Next();
      e->kind = Expr::Kind::kList;
      e->name = "tuple";
      return e;
    }
    ExprPtr inner = ParseTupleOrExpr();
    Expect(")");
    return inner;
  }
  if (IsOp("[")) {
    Next();
    e->kind = Expr::Kind::kList;
    while (!IsOp("]")) {
      if (!e->args.empty()) Expect(",");
      if (IsOp("]")) break;
      e->args.push_back(ParseExpr());
    }
    Next();
    return e;
  }
  if (IsOp("{")) {
    Next();
    e->kind = Expr::Kind::kDict;
    while (!IsOp("}")) {
      if (!e->args.empty()) Expect(",");
      if (IsOp("}")) break;
      e->keys.push_back(ParseExpr());
      Expect(":");
      e->args.push_back(ParseExpr());
    }
    Next();
    return e;
  }
  Error("expected an expression, found " + Describe(t));
}

ExprPtr Parser::ParsePostfix(ExprPtr e) {
  while (true) {
    if (IsOp(".")) {
      Next();
      auto g = Make(Expr::Kind::kGetAttr);
      if (Cur().type == T::kInt) {
        g->kind = Expr::Kind::kGetItem;
        auto idx = Make(Expr::Kind::kLiteral);
        idx->value = Value::Int(IntLiteral(Next().value));
        g->args.push_back(std::move(idx));
      } else {
        g->name = ExpectName();
      }
      g->a = std::move(e);
      e = std::move(g);
    } else if (IsOp("[")) {
      Next();
      auto g = Make(Expr::Kind::kGetItem);
      g->a = std::move(e);
      ExprPtr parts[3];
      int part = 0;
      bool slice = false;
      while (!IsOp("]")) {
        if (IsOp(":")) {
          Next();
          slice = true;
          if (++part > 2) Error("a slice takes at most start:stop:step");
          continue;
        }
        if (parts[part]) Error("expected ':' or ']' in a subscript, found " + Describe(Cur()));
        parts[part] = ParseExpr();
      }
      Next();
      if (slice) {
        g->kind = Expr::Kind::kSlice;
        for (auto& p : parts) g->args.push_back(std::move(p));
      } else {
        if (!parts[0]) Error("empty subscript []");
        g->args.push_back(std::move(parts[0]));
      }
      e = std::move(g);
    } else if (IsOp("(")) {
      Next();
      e = MakeCall(std::move(e));
    } else {
      return e;
    }
  }
}

void Parser::ParseCallArgs(Expr& call) {
  bool first = true;
  while (!IsOp(")")) {
    if (!first) Expect(",");
    first = false;
    if (IsOp(")")) break;
    if (IsOp("*") || IsOp("**")) Error("unsupported: *args and **kwargs in a call");
    if (Cur().type == T::kName && toks_[pos_ + 1].type == T::kOp && toks_[pos_ + 1].value == "=") {
      std::string name = Next().value;
      Next();
      call.named.emplace_back(std::move(name), ParseExpr());
    } else {
      if (!call.named.empty()) Error("a positional argument after a keyword argument");
      call.args.push_back(ParseExpr());
    }
  }
  Next();
}

ExprPtr Parser::ParseFilterExpr(ExprPtr e) {
  while (true) {
    if (IsOp("|")) {
      Next();
      auto f = Make(Expr::Kind::kFilter);
      f->name = ExpectName();
      if (!IsKnownFilter(f->name)) Error("unsupported filter '" + f->name + "'");
      f->a = std::move(e);
      if (IsOp("(")) {
        Next();
        ParseCallArgs(*f);
      }
      e = std::move(f);
    } else if (IsName("is")) {
      Next();
      auto t = Make(Expr::Kind::kTest);
      if (IsName("not")) {
        Next();
        t->negated = true;
      }
      t->name = ExpectName();
      if (!IsKnownTest(t->name)) Error("unsupported test 'is " + t->name + "'");
      t->a = std::move(e);
      if (IsOp("(")) {
        Next();
        ParseCallArgs(*t);
      } else if ((Cur().type == T::kString || Cur().type == T::kInt || Cur().type == T::kFloat || IsOp("[") ||
                  IsOp("{") || Cur().type == T::kName) &&
                 !IsName("else") && !IsName("or") && !IsName("and") && !IsName("if") && !IsName("in") &&
                 !IsName("not") && !IsName("is") && !IsName("recursive")) {
        t->args.push_back(ParsePostfix(ParsePrimary()));
      }
      e = std::move(t);
    } else if (IsOp("(")) {
      Next();
      e = MakeCall(std::move(e));
    } else {
      return e;
    }
  }
}

}  // namespace

Program Parse(std::string_view source) { return Parser(Tokenize(source)).Run(); }

}  // namespace tpserve::jinja

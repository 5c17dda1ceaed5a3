// The tree-walking renderer. See jinja/interpreter.h.
#include "jinja/interpreter.h"

#include <cmath>
#include <exception>

#include "jinja/builtins.h"
#include "jinja/error.h"

namespace tpserve::jinja {
namespace {

// Sets the current line for an evaluation and restores it when the evaluation
// returns -- but not when it throws, so the error reports where it happened.
struct LineScope {
  LineScope(int* line, int now) : line(line), saved(*line), exceptions(std::uncaught_exceptions()) {
    if (now > 0) *line = now;
  }
  ~LineScope() {
    if (std::uncaught_exceptions() == exceptions) *line = saved;
  }
  int* line;
  int saved;
  int exceptions;
};

bool IsNumeric(const Value& v) { return v.is_number() || v.kind() == Value::Kind::kBool; }
bool IsIntLike(const Value& v) { return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool; }
int64_t AsInt(const Value& v) { return v.kind() == Value::Kind::kBool ? v.as_bool() : v.as_int(); }

[[noreturn]] void BadOperands(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) {
    const Value& u = a.is_undefined() ? a : b;
    Fail(u.undefined_hint().empty() ? "an undefined value used with '" + op + "'" : u.undefined_hint());
  }
  Fail("unsupported operand type(s) for " + op + ": '" + std::string(a.TypeName()) + "' and '" + std::string(b.TypeName()) + "'");
}

Value Arith(const std::string& op, const Value& a, const Value& b) {
  if (IsIntLike(a) && IsIntLike(b) && op != "/") {
    const int64_t x = AsInt(a), y = AsInt(b);
    int64_t r = 0;
    if (op == "+" && !__builtin_add_overflow(x, y, &r)) return Value::Int(r);
    if (op == "-" && !__builtin_sub_overflow(x, y, &r)) return Value::Int(r);
    if (op == "*" && !__builtin_mul_overflow(x, y, &r)) return Value::Int(r);
    if ((op == "//" || op == "%") && y == 0) Fail("integer division or modulo by zero");
    if (op == "//" && !(x == INT64_MIN && y == -1)) return Value::Int(x / y - ((x % y != 0) && ((x < 0) != (y < 0))));
    if (op == "%" && !(x == INT64_MIN && y == -1)) {
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::Int(m);
    }
    if (op == "**" && y >= 0) {
      int64_t p = 1;
      bool ok = true;
      for (int64_t i = 0; i < y && ok; ++i) ok = !__builtin_mul_overflow(p, x, &p);
      if (ok) return Value::Int(p);
    }
    if (op != "**" || y >= 0) Fail("integer overflow in '" + op + "'");
  }
  if (!IsNumeric(a) || !IsNumeric(b)) BadOperands(op, a, b);
  const double x = a.as_number(), y = b.as_number();
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (op == "**") return Value::Float(std::pow(x, y));
  if (y == 0) Fail("division by zero");
  if (op == "/") return Value::Float(x / y);
  if (op == "//") return Value::Float(std::floor(x / y));
  const double m = std::fmod(x, y);
  return Value::Float(m != 0 && ((m < 0) != (y < 0)) ? m + y : m);
}

}  // namespace

Interpreter::Interpreter(const RenderLimits& limits, Frame globals) : limits_(limits) {
  frames_.push_back(std::move(globals));
}

Interpreter::~Interpreter() {
  for (const Value& ns : namespaces_) ns.mutable_namespace().Clear();
}

void Interpreter::KeepNamespace(const Value& ns) {
  if (namespace_set_.count(&ns.dict()) != 0) return;
  if (static_cast<int64_t>(namespaces_.size()) >= limits_.max_namespaces) {
    Fail("more than " + std::to_string(limits_.max_namespaces) + " namespace() objects (render limit)");
  }
  namespace_set_.insert(&ns.dict());
  namespaces_.push_back(ns);
}

Text Interpreter::Run(const Program& program) {
  Text out;
  Exec(program.body, out);
  return out;
}

void Interpreter::Emit(Text& out, const Text& piece) {
  if (out.size() + piece.size() > limits_.max_output_bytes) {
    Fail("the output would exceed " + std::to_string(limits_.max_output_bytes) + " bytes (render limit)");
  }
  out.Append(piece);
}

Interpreter::Flow Interpreter::Exec(const Body& body, Text& out) {
  for (const auto& s : body) {
    const Flow f = ExecStmt(*s, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::ExecStmt(const Stmt& s, Text& out) {
  LineScope scope(&line_, s.line);
  switch (s.kind) {
    case Stmt::Kind::kText:
      Emit(out, Text::Trusted(s.text));
      return Flow::kNormal;
    case Stmt::Kind::kOutput:
      Emit(out, Eval(*s.expr).ToText());
      return Flow::kNormal;
    case Stmt::Kind::kIf:
      for (size_t i = 0; i < s.conds.size(); ++i) {
        if (Eval(*s.conds[i]).Truthy()) return Exec(s.bodies[i], out);
      }
      return Exec(s.else_body, out);
    case Stmt::Kind::kFor:
      return ExecFor(s, out);
    case Stmt::Kind::kSet:
      ExecSet(s);
      return Flow::kNormal;
    case Stmt::Kind::kMacro:
      frames_.back()[s.targets[0]] = DefineMacro(s);
      return Flow::kNormal;
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
    case Stmt::Kind::kBlock:
      return Exec(s.bodies[0], out);
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::ExecFor(const Stmt& s, Text& out) {
  List items = IterateValue(Eval(*s.expr));
  if (s.cond) {  // `for x in xs if cond`: the filter sees the loop variable, not `loop`
    List kept;
    for (Value& item : items) {
      frames_.push_back({{s.targets[0], item}});
      const bool keep = Eval(*s.cond).Truthy();
      frames_.pop_back();
      if (keep) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const auto n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    if (++iterations_ > limits_.max_loop_iterations) {
      Fail("more than " + std::to_string(limits_.max_loop_iterations) + " loop iterations (render limit)");
    }
    Dict loop;
    loop.Set("index0", Value::Int(i));
    loop.Set("index", Value::Int(i + 1));
    loop.Set("revindex0", Value::Int(n - i - 1));
    loop.Set("revindex", Value::Int(n - i));
    loop.Set("first", Value::Bool(i == 0));
    loop.Set("last", Value::Bool(i == n - 1));
    loop.Set("length", Value::Int(n));
    loop.Set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::Undefined("there is no previous item"));
    loop.Set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::Undefined("there is no next item"));
    loop.Set("cycle", Value::MakeFunction({"loop.cycle", [i](CallArgs& a) {
                                             if (a.positional.empty()) Fail("loop.cycle: no items given");
                                             return a.positional[static_cast<size_t>(i) % a.positional.size()];
                                           }}));
    Frame frame;
    frame["loop"] = Value::MakeDict(std::move(loop));
    const Value& item = items[static_cast<size_t>(i)];
    if (s.targets.size() == 1) {
      frame[s.targets[0]] = item;
    } else {
      List parts = IterateValue(item);
      if (parts.size() != s.targets.size()) {
        Fail("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(s.targets.size()) + " loop variables");
      }
      for (size_t k = 0; k < parts.size(); ++k) frame[s.targets[k]] = parts[k];
    }
    frames_.push_back(std::move(frame));
    const Flow f = Exec(s.bodies[0], out);
    frames_.pop_back();
    if (f == Flow::kBreak) break;
  }
  if (n == 0) return Exec(s.else_body, out);
  return Flow::kNormal;
}

void Interpreter::ExecSet(const Stmt& s) {
  Value v;
  if (s.expr) {
    v = Eval(*s.expr);
  } else {
    Text body;
    Exec(s.bodies[0], body);
    v = Value::String(std::move(body));
  }
  if (s.targets.size() == 1) {
    frames_.back()[s.targets[0]] = std::move(v);
    return;
  }
  const Value ns = Lookup(s.targets[0]);
  if (!ns.is_namespace()) Fail("cannot assign attribute '" + s.targets[1] + "' on non-namespace object '" + s.targets[0] + "'");
  ns.mutable_namespace().Set(s.targets[1], std::move(v));
}

Value Interpreter::DefineMacro(const Stmt& s) {
  return Value::MakeFunction({"macro " + s.targets[0], [this, &s](CallArgs& a) { return CallMacro(s, a); }});
}

Value Interpreter::CallMacro(const Stmt& s, CallArgs& args) {
  if (macro_depth_ >= limits_.max_macro_depth) {
    Fail("macro calls nested more than " + std::to_string(limits_.max_macro_depth) + " deep (render limit)");
  }
  if (args.positional.size() > s.params.size()) Fail("macro '" + s.targets[0] + "' takes at most " + std::to_string(s.params.size()) + " arguments");
  Frame frame;
  for (size_t i = 0; i < s.params.size(); ++i) {
    const auto& [name, def] = s.params[i];
    if (i < args.positional.size()) {
      frame[name] = args.positional[i];
    } else if (const Value* v = args.Named(name)) {
      frame[name] = *v;
    } else {
      frame[name] = def ? Eval(*def) : Value::Undefined("macro parameter '" + name + "' was not given");
    }
  }
  for (const auto& [name, v] : args.named) {
    if (frame.find(name) == frame.end()) Fail("macro '" + s.targets[0] + "' takes no keyword argument '" + name + "'");
  }
  // A macro sees the globals and its parameters, not its caller's loop variables.
  std::vector<Frame> saved(frames_.begin() + 1, frames_.end());
  frames_.resize(1);
  frames_.push_back(std::move(frame));
  ++macro_depth_;
  Text out;
  try {
    Exec(s.bodies[0], out);
  } catch (...) {
    --macro_depth_;
    frames_.resize(1);
    frames_.insert(frames_.end(), saved.begin(), saved.end());
    throw;
  }
  --macro_depth_;
  frames_.resize(1);
  frames_.insert(frames_.end(), saved.begin(), saved.end());
  return Value::String(std::move(out));
}

Value Interpreter::Lookup(const std::string& name) const {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
    auto f = it->find(name);
    if (f != it->end()) return f->second;
  }
  return GetGlobal(name);
}

CallArgs Interpreter::EvalArgs(const Expr& e) {
  CallArgs a;
  for (const auto& x : e.args) a.positional.push_back(Eval(*x));
  for (const auto& [k, x] : e.named) a.named.emplace_back(k, Eval(*x));
  return a;
}

Value Interpreter::EvalCall(const Expr& e) {
  const Value callee = Eval(*e.a);
  if (callee.kind() != Value::Kind::kFunction) {
    if (callee.is_undefined() && !callee.undefined_hint().empty()) Fail(callee.undefined_hint());
    Fail("'" + std::string(callee.TypeName()) + "' object is not callable");
  }
  CallArgs args = EvalArgs(e);
  Value result = callee.function().call(args);
  if (result.is_namespace()) KeepNamespace(result);
  return result;
}

Value Interpreter::EvalBinary(const Expr& e) {
  const std::string& op = e.name;
  const Value a = Eval(*e.a);
  if (op == "and") return a.Truthy() ? Eval(*e.args[0]) : a;
  if (op == "or") return a.Truthy() ? a : Eval(*e.args[0]);
  const Value b = Eval(*e.args[0]);
  const size_t max = limits_.max_output_bytes;
  if (op == "~") {
    Text t = a.ToText();
    if (t.size() + b.ToText().size() > max) Fail("a string would exceed " + std::to_string(max) + " bytes (render limit)");
    t.Append(b.ToText());
    return Value::String(std::move(t));
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    if (a.text().size() + b.text().size() > max) Fail("a string would exceed " + std::to_string(max) + " bytes (render limit)");
    Text t = a.text();
    t.Append(b.text());
    return Value::String(std::move(t));
  }
  if (op == "+" && a.is_list() && b.is_list()) {
    if (a.list().size() + b.list().size() > static_cast<size_t>(limits_.max_loop_iterations)) Fail("a list would be too long (render limit)");
    List l = a.list();
    l.insert(l.end(), b.list().begin(), b.list().end());
    return Value::MakeList(std::move(l));
  }
  if (op == "*" && (a.is_string() || a.is_list()) && IsIntLike(b)) {
    const int64_t n = std::max<int64_t>(0, AsInt(b));
    const size_t unit = a.is_string() ? a.text().size() : a.list().size();
    if (n > 0 && unit > max / static_cast<size_t>(n)) Fail("a repeated value would exceed the render limit");
    if (a.is_list()) {
      List l;
      for (int64_t i = 0; i < n; ++i) l.insert(l.end(), a.list().begin(), a.list().end());
      return Value::MakeList(std::move(l));
    }
    Text t;
    for (int64_t i = 0; i < n; ++i) t.Append(a.text());
    return Value::String(std::move(t));
  }
  if (op == "%" && a.is_string()) Fail("unsupported: printf-style '%' formatting of strings");
  return Arith(op, a, b);
}

Value Interpreter::EvalCompare(const Expr& e) {
  Value left = Eval(*e.a);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = Eval(*e.args[i]);
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==") r = left.Equals(right);
    else if (op == "!=") r = !left.Equals(right);
    else if (op == "<") r = LessThan(left, right);
    else if (op == ">") r = LessThan(right, left);
    else if (op == "<=") r = !LessThan(right, left);
    else if (op == ">=") r = !LessThan(left, right);
    else if (op == "in") r = Contains(right, left);
    else r = !Contains(right, left);
    if (!r) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

Value Interpreter::Eval(const Expr& e) {
  LineScope scope(&line_, e.line);
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      return Lookup(e.name);
    case Expr::Kind::kGetAttr:
      return GetAttr(Eval(*e.a), e.name);
    case Expr::Kind::kGetItem:
      return GetItem(Eval(*e.a), Eval(*e.args[0]));
    case Expr::Kind::kSlice: {
      const Value obj = Eval(*e.a);
      Value b[3];
      for (int i = 0; i < 3; ++i) {
        if (e.args[static_cast<size_t>(i)]) b[i] = Eval(*e.args[static_cast<size_t>(i)]);
      }
      auto p = [&](int i) { return e.args[static_cast<size_t>(i)] ? &b[i] : nullptr; };
      return GetSlice(obj, p(0), p(1), p(2));
    }
    case Expr::Kind::kCall:
      return EvalCall(e);
    case Expr::Kind::kFilter: {
      const Value v = Eval(*e.a);
      CallArgs args = EvalArgs(e);
      Value r = ApplyFilter(e.name, v, args);
      if (r.is_string() && r.text().size() > limits_.max_output_bytes) Fail("a filter result exceeds the render limit");
      return r;
    }
    case Expr::Kind::kTest: {
      const Value v = Eval(*e.a);
      CallArgs args = EvalArgs(e);
      return Value::Bool(ApplyTest(e.name, v, args) != e.negated);
    }
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      const Value v = Eval(*e.a);
      if (!IsNumeric(v)) Fail("bad operand type for unary " + std::string(e.kind == Expr::Kind::kNeg ? "-" : "+") + ": '" + std::string(v.TypeName()) + "'");
      if (e.kind == Expr::Kind::kPos) return IsIntLike(v) ? Value::Int(AsInt(v)) : v;
      if (IsIntLike(v) && AsInt(v) != INT64_MIN) return Value::Int(-AsInt(v));
      return Value::Float(-v.as_number());
    }
    case Expr::Kind::kNot:
      return Value::Bool(!Eval(*e.a).Truthy());
    case Expr::Kind::kBinary:
      return EvalBinary(e);
    case Expr::Kind::kCompare:
      return EvalCompare(e);
    case Expr::Kind::kCond:
      if (Eval(*e.args[1]).Truthy()) return Eval(*e.args[0]);
      return e.args[2] ? Eval(*e.args[2]) : Value::Undefined("the inline if has no else");
    case Expr::Kind::kList: {
      List items;
      for (const auto& x : e.args) items.push_back(Eval(*x));
      return Value::MakeList(std::move(items), /*is_tuple=*/e.name == "tuple");
    }
    case Expr::Kind::kDict: {
      Dict d;
      for (size_t i = 0; i < e.keys.size(); ++i) {
        const Value k = Eval(*e.keys[i]);
        if (!k.is_string()) Fail("unsupported: dict literal keys other than strings");
        d.Set(k.text().str(), Eval(*e.args[i]));
      }
      return Value::MakeDict(std::move(d));
    }
  }
  return Value();
}

}  // namespace tpserve::jinja

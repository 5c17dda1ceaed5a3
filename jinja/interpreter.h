// Walks a parsed Program (jinja/ast.h) and renders it into a Text. Internal to
// jinja/; the public interface is jinja/template.h. Throws RenderError.
#pragma once

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "jinja/ast.h"
#include "jinja/template.h"
#include "jinja/text.h"
#include "jinja/value.h"

namespace tpserve::jinja {

class Interpreter {
 public:
  using Frame = std::unordered_map<std::string, Value>;

  // `globals`: the render's variables (the bottom frame, where top-level `set` writes too).
  Interpreter(const RenderLimits& limits, Frame globals);
  // Empties every namespace the render made (see namespaces_).
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  Text Run(const Program& program);
  // The line of the expression or statement being evaluated, for error messages.
  int line() const { return line_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow Exec(const Body& body, Text& out);
  Flow ExecStmt(const Stmt& s, Text& out);
  Flow ExecFor(const Stmt& s, Text& out);
  void ExecSet(const Stmt& s);
  Value DefineMacro(const Stmt& s);
  Value CallMacro(const Stmt& s, CallArgs& args);

  Value Eval(const Expr& e);
  Value EvalBinary(const Expr& e);
  Value EvalCompare(const Expr& e);
  Value EvalCall(const Expr& e);
  CallArgs EvalArgs(const Expr& e);
  Value Lookup(const std::string& name) const;
  void Emit(Text& out, const Text& piece);
  void KeepNamespace(const Value& ns);

  const RenderLimits limits_;
  std::vector<Frame> frames_;  // frames_[0]: globals; one more per loop iteration and macro call
  int64_t iterations_ = 0;
  int macro_depth_ = 0;
  int line_ = 0;
  // Every namespace() the render made, held to its end. Namespaces are the only
  // values that change after they are made, so every reference cycle runs
  // through one (`set ns.a = ns`, `set ns.a = [ns]`): shared ownership alone
  // would leak it. Held here, a namespace is never freed from inside another
  // value, so freeing recurses at most Value::kMaxNesting deep however long a
  // chain of namespaces a loop builds. ~Interpreter empties them all.
  std::vector<Value> namespaces_;
  std::unordered_set<const Dict*> namespace_set_;
};

}  // namespace tpserve::jinja

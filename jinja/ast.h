// The parsed form of a template: statements holding expressions. Built by
// jinja/parser.cc, walked by jinja/interpreter.cc.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace tpserve::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // value
    kName,      // name
    kGetAttr,   // a.name
    kGetItem,   // a[b]
    kSlice,     // a[b:c:d]; missing bounds are null pointers in args
    kCall,      // a(args..., named...)
    kFilter,    // a | name(args..., named...)
    kTest,      // a is [not] name(args...)
    kNeg,       // -a
    kPos,       // +a
    kNot,       // not a
    kBinary,    // a op b: + - * / // % ** ~ and or
    kCompare,   // a op1 b op2 c ...: == != < <= > >= in notin (ops in `ops`)
    kCond,      // args[0] if args[1] else args[2] (args[2] may be null)
    kList,      // [args...], and tuples (name "tuple")
    kDict,      // {keys[i]: args[i]}
  };
  Kind kind;
  int line = 0;
  Value value;                 // kLiteral
  std::string name;            // kName, kGetAttr, kCall (unused), kFilter, kTest, kBinary (the operator)
  bool negated = false;        // kTest: `is not`
  ExprPtr a;                   // the operand (object, callee, filtered value, left side)
  std::vector<ExprPtr> args;   // positional arguments, right sides, list items, dict values
  std::vector<std::pair<std::string, ExprPtr>> named;  // keyword arguments
  std::vector<std::string> ops;  // kCompare
  std::vector<ExprPtr> keys;   // kDict
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,      // text (from the template source)
    kOutput,    // {{ expr }}
    kIf,        // conds[i] -> bodies[i]; else_body
    kFor,       // for targets in expr [if cond] -> bodies[0]; else_body
    kSet,       // set target[.attr] = expr, or {% set target %}bodies[0]{% endset %}
    kMacro,     // macro name(params = defaults) -> bodies[0]
    kBreak,
    kContinue,
    kBlock,     // bodies[0] rendered in place ({% generation %} of transformers)
  };
  Kind kind;
  int line = 0;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kFor (iterable), kSet (value, null for a block set)
  ExprPtr cond;                      // kFor: the `if` filter (may be null)
  std::vector<ExprPtr> conds;        // kIf
  std::vector<Body> bodies;          // kIf: one per cond; kFor, kSet, kMacro, kBlock: bodies[0]
  Body else_body;                    // kIf, kFor
  std::vector<std::string> targets;  // kFor: loop variables; kSet: {name} or {namespace, attribute}; kMacro: {name}
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: parameters and defaults (null: none)
};

// A parsed template: its statements, and the source's line count for messages.
struct Program {
  Body body;
};

}  // namespace tpserve::jinja

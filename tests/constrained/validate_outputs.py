#!/usr/bin/env python3
"""Independent validator of constrained generations (tests/constrained).

Reads a JSON array of cases from argv[1]; each case is
  {"kind": "regex"|"json_schema"|"json_object"|"choice"|"tool_calls_hermes"|"tool_calls_llama3",
   "spec": ..., "text": "...", "complete": bool}
and checks every complete output with Python's own machinery: `re.fullmatch`
for regexes (and for GBNF grammars, through an equivalent regex the test
gives), python-jsonschema (Draft 2020-12) for schemas and tool arguments.
Outputs cut by max_tokens are checked by the C++ side (a prefix the matcher
accepts). Prints one line per failure and exits 1 when there is any; prints
the number of cases checked.
"""
import json
import re
import sys

import jsonschema


def check_schema(instance, schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(instance)


def check_calls(text, spec, hermes):
    if hermes:
        parts = re.fullmatch(r"(<tool_call>\n.*?\n</tool_call>)(\n<tool_call>\n.*?\n</tool_call>)*", text, re.S)
        if parts is None:
            raise ValueError("not <tool_call> blocks joined by newlines")
        bodies = re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.S)
        key = "arguments"
    else:
        bodies = text.split("; ")
        key = "parameters"
    if not spec["parallel"] and len(bodies) != 1:
        raise ValueError(f"{len(bodies)} calls without parallel_tool_calls")
    for body in bodies:
        call = json.loads(body)
        if set(call) != {"name", key}:
            raise ValueError(f"call keys {sorted(call)}")
        functions = {f["name"]: f["parameters"] for f in spec["functions"]}
        if call["name"] not in functions:
            raise ValueError(f"unknown function {call['name']}")
        check_schema(call[key], functions[call["name"]])


def check(case):
    kind, spec, text = case["kind"], case["spec"], case["text"]
    if kind == "regex":
        if re.fullmatch(spec, text, re.S) is None:
            raise ValueError("no full match")
    elif kind == "json_schema":
        check_schema(json.loads(text), spec)
    elif kind == "json_object":
        if not isinstance(json.loads(text), dict):
            raise ValueError("not an object")
    elif kind == "choice":
        if text not in spec:
            raise ValueError("not one of the choices")
    elif kind in ("tool_calls_hermes", "tool_calls_llama3"):
        check_calls(text, spec, kind == "tool_calls_hermes")
    else:
        raise ValueError(f"unknown kind {kind}")


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    failures = 0
    checked = 0
    for i, case in enumerate(cases):
        if not case["complete"]:
            continue
        checked += 1
        try:
            check(case)
        except Exception as e:  # every failure is reported, whatever raised it
            failures += 1
            print(f"case {i} ({case['kind']}): {e}: {json.dumps(case['text'])}")
    print(f"checked {checked} complete outputs, {failures} invalid")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Renders chat templates with Python's Jinja2 exactly as transformers'
apply_chat_template sets it up (transformers/utils/chat_template_utils.py:
ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
tojson with ensure_ascii=False, raise_exception, strftime_now).

usage: reference_render.py TEMPLATE CORPUS.jsonl OUT.jsonl
Writes one line per corpus line: {"text": ...} or {"error": ...}. With TEMPLATE "-",
each corpus line carries its own {"template": ...} (tests/jinja/constructs.jsonl).
bos_token / eos_token are passed as transformers does for the template's family.
Exit status 77 when jinja2 is not installed (the C++ test then skips).
"""
import json
import sys
from datetime import datetime

try:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit(77)


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


class GenerationTracker(jinja2.ext.Extension):
    """transformers' AssistantTracker without the mask bookkeeping: renders the body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def main():
    template_path, corpus_path, out_path = sys.argv[1:4]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    template = None
    if template_path != "-":
        with open(template_path, encoding="utf-8") as f:
            template = env.from_string(f.read())
    special = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"} if "llama" in template_path else \
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    with open(corpus_path, encoding="utf-8") as f, open(out_path, "w", encoding="utf-8") as out:
        for line in f:
            if not line.strip():
                continue
            case = json.loads(line)
            try:
                t = template if template is not None else env.from_string(case["template"])
                result = {"text": t.render(**case["vars"], **special)}
            except TemplateError as e:
                result = {"error": str(e), "raised": True}
            except Exception as e:  # a type error in the template on this input
                result = {"error": "%s: %s" % (type(e).__name__, e)}
            out.write(json.dumps(result, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()

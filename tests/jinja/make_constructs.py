#!/usr/bin/env python3
"""Writes tests/jinja/constructs.jsonl: one small template per construct the
engine supports, each with its variables, rendered by both Python's Jinja2 and
tpserve_jinja in conformance_test.cc (ConstructsMatchPythonJinja2).
    python3 tests/jinja/make_constructs.py > tests/jinja/constructs.jsonl
"""
import json

MSGS = [{"role": "system", "content": " sys \n"}, {"role": "user", "content": "Hi <b>"},
        {"role": "assistant", "content": "<think>\nr\n</think>\n\nok", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": {"a": 1, "b": [True, None, 1.5]}}}]}]
CASES = [
    # whitespace control, trim_blocks, lstrip_blocks, comments, newlines
    ("a  {{- 'b' -}}  c", {}),
    ("x\n    {% if true %}\n    y\n    {% endif %}\nz", {}),
    ("x\n  {%- if true -%}\n  y\n  {%- endif %}  \nz", {}),
    ("{# c #}\n  {#- c -#}  \nline\n", {}),
    ("a\r\nb\r\n{% if true %}\r\nc{% endif %}\r\n", {}),
    ("  {%+ if true %}x{% endif %}\n{% raw_not %}" if False else "  {%+ if true %}x{% endif %}", {}),
    ("{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}\n", {}),
    ("{{ 'a' }}\n{{ 'b' }}\n\n", {}),
    # literals, printing
    ("{{ 1 }} {{ -2 }} {{ 1.5 }} {{ 2.0 }} {{ 1e3 }} {{ 1_000 }} {{ true }} {{ none }} {{ undefined }}|", {}),
    ("{{ [1, 'a', none, [true]] }} {{ {'k': 'v', 'n': {'x': 1}} }} {{ ('a', 1) }} {{ (1,) }}", {}),
    ("{{ \"it's\" }} {{ 'say \"hi\"' }} {{ ['it\\'s'] }} {{ 'tab\\there' }} {{ '\\u00e9\\x41' }}", {}),
    ("{{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 10 / 5 }} {{ 2 ** 0.5 }} {{ 1e16 }} {{ 1e-7 }} {{ 123456789.125 }}", {}),
    # operators
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 % 2 }} {{ 2 * 3 + 1 }} {{ 2 ** 3 ** 2 }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' + 'cd' }} {{ [1] + [2, 3] }} {{ 'ab' * 3 }} {{ (1 + 2) ~ 3 }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} {{ [1, 2] == [1, 2] }}", {}),
    ("{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'x' not in 'abc' }}", {}),
    ("{{ none or 'x' }} {{ 0 and 1 }} {{ not [] }} {{ not 'a' }} {{ 1 if false }}|{{ 'a' if 0 else 'b' if 1 else 'c' }}", {}),
    # names, attributes, items, slicing
    ("{{ m.role }} {{ m['content'] }} {{ m.missing is defined }} {{ m.items is defined }} {{ m.get('role') }}", {"m": MSGS[1]}),
    ("{{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[5:] }} {{ xs[-2:] }}", {"xs": [1, 2, 3, 4]}),
    ("{{ s[1:3] }} {{ s[::-1] }} {{ s[-1] }} {{ s[0] }} {{ s | length }}", {"s": "héllo😀"}),
    ("{{ messages[2].tool_calls[0].function.arguments.b[0] }} {{ messages[0]['content'] | trim }}", {"messages": MSGS}),
    # if / for / loop / set / namespace / macro / break / continue
    ("{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}", {"x": 2}),
    ("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }},{% endfor %}", {"xs": "ab"}),
    ("{% for x in xs %}{{ x }}{% else %}empty{% endfor %}", {"xs": []}),
    ("{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": [2]}}),
    ("{% for x in [1,2,3,4,5,6] if x is odd %}{{ x }}{{ loop.length }}{% endfor %}", {}),
    ("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a', 'b') }} {% endfor %}", {}),
    ("{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("{% set x = 0 %}{% for i in [1,2,3] %}{% if i > 1 %}{{ x }}{% endif %}{% set x = i %}{% endfor %}[{{ x }}]", {}),
    ("{% set ns = namespace(n=0, last=none) %}{% for i in [3, 4] %}{% set ns.n = ns.n + i %}{% set ns.last = i %}{% endfor %}{{ ns.n }} {{ ns.last }}", {}),
    ("{% set b %}in {{ 'block' }}{% endset %}[{{ b }}] {% set t = 1, 2 %}{{ t }}", {}),
    ("{% macro g(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ g('a') }} {{ g('b', punct='?') }} {{ g(name='c') }}", {}),
    ("{% if true %}{% set y = 5 %}{% endif %}{{ y }}", {}),
    # tests
    ("{{ x is none }} {{ x is not none }} {{ y is defined }} {{ y is undefined }} {{ 's' is string }} {{ 1 is number }} {{ true is number }}", {"x": None}),
    ("{{ {} is mapping }} {{ [] is mapping }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ [] is sequence }} {{ y is iterable }}", {}),
    ("{{ false is false }} {{ 0 is false }} {{ true is true }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is integer }} {{ true is boolean }}", {}),
    ("{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby(3) }} {{ 'x' is equalto 'x' }} {{ 'x' is eq('y') }} {{ 'ab' is lower }} {{ 'AB' is upper }}", {}),
    ("{{ 2 is in([1, 2]) }} {{ true is sameas true }} {{ none is sameas none }} {{ 1 is gt 0 }} {{ 1 is le 0 }}", {}),
    # filters
    ("[{{ '  a b \\n' | trim }}] [{{ 'xxaxx' | trim('x') }}] {{ 'abc' | length }} {{ [1, 2] | count }} {{ {'a': 1} | length }}", {}),
    ("{{ xs | join }} {{ xs | join(', ') }} {{ xs | first }} {{ xs | last }} {{ [] | first }}|{{ 'abc' | first }}{{ 'abc' | last }}", {"xs": ["a", "b"]}),
    ("{{ u | default('d') }} {{ '' | default('e') }} {{ '' | default('e', true) }} {{ none | d('n') }} {{ u | default }}|", {}),
    ("{{ 'Ab cD' | upper }} {{ 'Ab cD' | lower }} {{ 'ab cd' | capitalize }} {{ 'ab cd' | title }} {{ 'aXa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }}", {}),
    ("{{ 'éàü ñoño' | upper }} {{ 'ÉCOLE Ünï' | lower }} {{ 'élan vital x1y (ab-cd' | title }} {{ 'x1y ab-cd'.title() }} {{ 'éLAN' | capitalize }} {{ 'é' is lower }} {{ '' is lower }} {{ '1' is upper }} {{ 'Ab' is upper }}", {}),
    ("{{ 3 | string }}{{ none | string }} {{ '42' | int }} {{ 'x' | int }} {{ 3.9 | int }} {{ '2.5' | float }} {{ -3 | abs }} {{ [3, 1, 2] | sort }} {{ [3, 1] | sort(reverse=true) }}", {}),
    ("{{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }} {{ 'ab' | list }} {{ {'a': 1, 'b': 2} | list }} {{ d | items | list }}", {"d": {"x": 1}}),
    ("{{ ['a', 'code_interpreter', 'b'] | reject('equalto', 'code_interpreter') | join(', ') }} {{ [1, 2, 3, 4] | select('even') | list }} {{ [0, 1, '', 'a'] | select | list }}", {}),
    ("{{ xs | map(attribute='n') | join(',') }} {{ xs | selectattr('n', 'equalto', 2) | list }} {{ xs | rejectattr('n', 'odd') | list }} {{ ['a', 'b'] | map('upper') | list }}", {"xs": [{"n": 1}, {"n": 2}]}),
    ("{{ t | tojson }}\n{{ t | tojson(indent=2) }}\n{{ t | tojson(sort_keys=true) }}\n{{ 'é\"\\n<' | tojson }}", {"t": {"b": [1, 2.5, True, None, "ü"], "a": {}, "c": []}}),
    ("{{ messages | tojson(indent=4) }}", {"messages": MSGS}),
    # str / dict methods
    ("[{{ ' x '.strip() }}][{{ '\\n x \\n'.strip('\\n') }}][{{ 'xxaxx'.lstrip('x') }}][{{ 'xxaxx'.rstrip('x') }}][{{ '\\u3000y\\u3000'.strip() }}]", {}),
    ("{{ 'a b  c '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a</t>b</t>'.split('</t>') }} {{ ' a b '.split(none, 1) }}", {}),
    ("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith('bc') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'Ab'.upper() }}{{ 'Ab'.lower() }} {{ 'a-b'.replace('-', '+') }} {{ 'abcb'.find('b') }} {{ '-'.join(['x', 'y']) }}", {}),
    ("{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.get('z', 0) }} {{ d.get('z') }}", {"d": {"a": 1, "b": "2"}}),
    ("{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}", {"c": "<think>\nreason\n</think>\n\nanswer"}),
    # globals
    ("{{ range(3) | list }} {{ range(1, 7, 2) | join(',') }} {{ range(5, 0, -2) | list }} {{ namespace(a=1).a }} {{ dict(a=1, b=2) }}", {}),
    ("{% if true %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}", {}),
    # errors both engines raise
    ("{{ u.x }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ 1 // 0 }}", {}),
    ("{{ 1 + 2 ~ 3 }}", {}),
]


def main():
    for i, (template, vars_) in enumerate(CASES):
        print(json.dumps({"name": "construct-%02d" % i, "template": template, "vars": vars_}, ensure_ascii=False))


if __name__ == "__main__":
    main()

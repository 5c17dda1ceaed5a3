#!/usr/bin/env python3
"""Writes bench/grammar_corpus/schemas.jsonl: the JSON Schema corpus of grammar_bench.

    bench/grammar_corpus/make_corpus.py [--check NODE_MODULES]

Tool and function-parameter schemas of the kind agents send (weather, search,
calendar, mail, orders, flights, databases, files, tickets, ...), each drawn in
a few variants (fields optional or required, enums, formats, patterns, bounds,
nested objects and arrays, anyOf, $ref to $defs, recursive $ref), with valid
instances spelled as the grammar spells JSON: compact, properties in
`properties` order, json.dumps(ensure_ascii=False). Seeded: the same file every
run. --check validates every instance with ajv (npm; scripts/fetch-json-schema-suite.sh).
"""
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(26)

WORDS = ["alpha", "report", "Paris", "quarterly", "meeting notes", "urgent", "blue", "résumé", "東京", "data",
         "customer", "pipeline", "invoice 42", "hello world", "the quick brown fox", "Zürich", "ok"]


def S(**kw):
    return {"type": "string", **kw}


def I(**kw):
    return {"type": "integer", **kw}


def N(**kw):
    return {"type": "number", **kw}


def B():
    return {"type": "boolean"}


def A(items, **kw):
    return {"type": "array", "items": items, **kw}


def O(props, required=None, additional=False, **kw):
    out = {"type": "object", "properties": props}
    if required is None:
        required = list(props)
    if required:
        out["required"] = required
    if additional is not None:
        out["additionalProperties"] = additional
    out.update(kw)
    return out


def E(*values):
    return {"type": "string", "enum": list(values)}


DATE = S(format="date")
DATETIME = S(format="date-time")
EMAIL = S(format="email")
UUID = S(format="uuid")
URI = S(format="uri")

TOOLS = {
    "get_weather": lambda: O({"location": S(description="City and country, e.g. Paris, France"),
                              "unit": E("celsius", "fahrenheit"), "days": I(minimum=1, maximum=14)},
                             ["location"]),
    "search_web": lambda: O({"query": S(minLength=1, maxLength=200), "num_results": I(minimum=1, maximum=20),
                             "safe_search": B(), "site": S(), "recency_days": I(minimum=0)}, ["query"]),
    "create_event": lambda: O({"title": S(), "start": DATETIME, "end": DATETIME, "location": S(),
                               "attendees": A(EMAIL, maxItems=10), "reminder_minutes": I(minimum=0, maximum=1440),
                               "visibility": E("public", "private", "confidential")}, ["title", "start", "end"]),
    "send_email": lambda: O({"to": A(EMAIL, minItems=1), "cc": A(EMAIL), "subject": S(maxLength=120),
                             "body": S(), "priority": E("low", "normal", "high")}, ["to", "subject", "body"]),
    "book_flight": lambda: O({"origin": S(pattern="^[A-Z]{3}$"), "destination": S(pattern="^[A-Z]{3}$"),
                              "date": DATE, "passengers": A(O({"name": S(), "age": I(minimum=0, maximum=120),
                                                               "seat": E("window", "aisle", "middle")}, ["name"]),
                                                            minItems=1, maxItems=9),
                              "cabin": E("economy", "premium", "business", "first")},
                             ["origin", "destination", "date", "passengers"]),
    "create_order": lambda: O({"customer_id": UUID, "items": A(O({"sku": S(pattern="^[A-Z0-9-]{4,12}$"),
                                                                  "quantity": I(minimum=1, maximum=100),
                                                                  "unit_price": N(minimum=0)}),
                                                               minItems=1),
                               "shipping": {"$ref": "#/$defs/address"}, "gift": B(), "note": S(maxLength=500)},
                              ["customer_id", "items", "shipping"],
                              **{"$defs": {"address": O({"street": S(), "city": S(), "zip": S(pattern="^[0-9]{5}$"),
                                                         "country": E("US", "FR", "DE", "JP", "BR")},
                                                        ["street", "city", "country"])}}),
    "query_database": lambda: O({"table": E("users", "orders", "products", "events"),
                                 "columns": A(S(), minItems=1, maxItems=16),
                                 "filters": A(O({"column": S(), "op": E("=", "!=", "<", ">", "like", "in"),
                                                 "value": {"anyOf": [S(), N(), B(), {"type": "null"}]}})),
                                 "limit": I(minimum=1, maximum=1000), "order_by": S()}, ["table", "columns"]),
    "read_file": lambda: O({"path": S(pattern="^/[^\\u0000]*$"), "offset": I(minimum=0), "length": I(minimum=1),
                            "encoding": E("utf-8", "latin-1", "base64")}, ["path"]),
    "write_file": lambda: O({"path": S(), "content": S(), "append": B(), "mode": S(pattern="^[0-7]{3}$")},
                            ["path", "content"]),
    "create_ticket": lambda: O({"title": S(minLength=5, maxLength=80), "description": S(),
                                "severity": I(minimum=1, maximum=5), "labels": A(S(), uniqueItems=False),
                                "assignee": {"anyOf": [EMAIL, {"type": "null"}]},
                                "component": E("api", "ui", "infra", "docs")}, ["title", "severity"]),
    "translate": lambda: O({"text": S(), "source_lang": S(pattern="^[a-z]{2}$"), "target_lang": S(pattern="^[a-z]{2}$"),
                            "formality": E("default", "more", "less")}, ["text", "target_lang"]),
    "set_thermostat": lambda: O({"room": S(), "temperature": N(minimum=5, maximum=35), "mode": E("heat", "cool", "auto", "off"),
                                 "schedule": A(O({"time": S(pattern="^[0-2][0-9]:[0-5][0-9]$"),
                                                  "temperature": N(minimum=5, maximum=35)}), maxItems=8)},
                                ["room", "temperature"]),
    "run_code": lambda: O({"language": E("python", "javascript", "bash", "sql"), "code": S(),
                           "timeout_seconds": I(minimum=1, maximum=300), "env": O({}, [], {"type": "string"})},
                          ["language", "code"]),
    "get_stock_quote": lambda: O({"symbol": S(pattern="^[A-Z.]{1,6}$"), "exchange": E("NYSE", "NASDAQ", "LSE", "TSE"),
                                  "include_history": B(), "period": E("1d", "5d", "1mo", "6mo", "1y")}, ["symbol"]),
    "schedule_meeting": lambda: O({"participants": A(O({"name": S(), "email": EMAIL, "optional": B()}, ["email"]),
                                                     minItems=2),
                                   "duration_minutes": {"type": "integer", "enum": [15, 30, 45, 60, 90]},
                                   "window": O({"earliest": DATETIME, "latest": DATETIME}),
                                   "agenda": A(S())}, ["participants", "duration_minutes", "window"]),
    "update_contact": lambda: O({"id": UUID, "name": O({"first": S(), "last": S()}, ["first"]),
                                 "phones": A(O({"kind": E("mobile", "home", "work"), "number": S(pattern="^\\+?[0-9 ]{7,15}$")})),
                                 "website": URI, "birthday": DATE}, ["id"]),
    "file_tree": lambda: {"$ref": "#/$defs/node", "$defs": {"node": O({"name": S(), "kind": E("file", "dir"),
                                                                       "size": I(minimum=0),
                                                                       "children": A({"$ref": "#/$defs/node"})},
                                                                      ["name", "kind"])}},
    "math_expression": lambda: {"$ref": "#/$defs/expr", "$defs": {"expr": {"anyOf": [
        O({"op": E("add", "sub", "mul", "div"), "args": A({"$ref": "#/$defs/expr"}, minItems=2, maxItems=2)}),
        O({"value": N()}), O({"var": S(pattern="^[a-z]$")})]}}},
    "extract_entities": lambda: O({"entities": A(O({"text": S(), "type": E("PERSON", "ORG", "LOC", "DATE", "MONEY"),
                                                    "start": I(minimum=0), "end": I(minimum=0),
                                                    "confidence": N(minimum=0, maximum=1)},
                                                   ["text", "type"]))}),
    "classify": lambda: O({"label": E("positive", "negative", "neutral", "mixed"), "score": N(minimum=0, maximum=1),
                           "reasons": A(S(), maxItems=3)}, ["label"]),
    "navigate": lambda: O({"url": URI, "wait_until": E("load", "domcontentloaded", "networkidle"),
                           "viewport": O({"width": I(minimum=320, maximum=3840), "height": I(minimum=240, maximum=2160)}),
                           "headers": O({}, [], {"type": "string"})}, ["url"]),
    "create_invoice": lambda: O({"invoice_number": S(pattern="^INV-[0-9]{6}$"), "issued": DATE, "due": DATE,
                                 "currency": E("USD", "EUR", "JPY", "GBP"),
                                 "lines": A(O({"description": S(), "amount": N(minimum=0), "tax_rate": N(minimum=0, maximum=0.5)},
                                              ["description", "amount"]), minItems=1),
                                 "paid": B()}, ["invoice_number", "issued", "currency", "lines"]),
    "geocode": lambda: O({"address": S(), "bounds": O({"north": N(minimum=-90, maximum=90), "south": N(minimum=-90, maximum=90),
                                                       "east": N(minimum=-180, maximum=180), "west": N(minimum=-180, maximum=180)}),
                          "language": S(pattern="^[a-z]{2}(-[A-Z]{2})?$")}, ["address"]),
    "plan_trip": lambda: O({"destination": S(), "start": DATE, "nights": I(minimum=1, maximum=30),
                            "travelers": I(minimum=1, maximum=10), "budget": O({"amount": N(minimum=0), "currency": E("USD", "EUR")}),
                            "interests": A(E("museums", "food", "hiking", "beaches", "nightlife"), maxItems=5),
                            "accessible": B()}, ["destination", "start", "nights"]),
    "git_commit": lambda: O({"message": S(minLength=1, maxLength=72), "files": A(S(), minItems=1), "amend": B(),
                             "author": O({"name": S(), "email": EMAIL})}, ["message", "files"]),
    "rate_limit": lambda: O({"key": S(), "limit": I(minimum=1), "window": O({"seconds": I(minimum=1, maximum=86400)}),
                             "burst": {"anyOf": [I(minimum=0), {"type": "null"}]}}, ["key", "limit"]),
}


def instance(schema, root, depth=0):
    if "$ref" in schema:
        name = schema["$ref"].split("/")[-1]
        return instance(root["$defs"][name], root, depth + 1)
    if "anyOf" in schema:
        branches = schema["anyOf"]
        if depth > 3:  # recursion: the branch without $ref
            branches = [b for b in branches if "$ref" not in json.dumps(b)] or branches
        return instance(rng.choice(branches), root, depth + 1)
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if "const" in schema:
        return schema["const"]
    t = schema.get("type")
    if t == "string":
        return string(schema)
    if t == "integer":
        lo, hi = schema.get("minimum", -50), schema.get("maximum", 5000)
        return rng.randint(lo, hi)
    if t == "number":
        lo, hi = schema.get("minimum", -100), schema.get("maximum", 10000)
        return round(rng.uniform(lo, hi) * 4) / 4 if hi - lo > 2 else round(rng.uniform(lo, hi), 2)
    if t == "boolean":
        return rng.random() < 0.5
    if t == "null":
        return None
    if t == "array":
        lo = schema.get("minItems", 0)
        hi = schema.get("maxItems", lo + 3)
        if depth > 3:
            hi = lo
        return [instance(schema["items"], root, depth + 1) for _ in range(rng.randint(lo, max(lo, min(hi, lo + 3))))]
    if t == "object":
        out = {}
        required = set(schema.get("required", []))
        for name, sub in schema.get("properties", {}).items():
            if name in required or (depth <= 3 and rng.random() < 0.6):
                out[name] = instance(sub, root, depth + 1)
        if not schema.get("properties") and isinstance(schema.get("additionalProperties"), dict):
            for k in range(rng.randint(0, 2)):
                out["KEY_%d" % k] = instance(schema["additionalProperties"], root, depth + 1)
        return out
    raise ValueError("no instance for %r" % schema)


def string(schema):
    fmt, pattern = schema.get("format"), schema.get("pattern")
    if fmt == "date":
        return "2024-%02d-%02d" % (rng.randint(1, 12), rng.randint(1, 28))
    if fmt == "date-time":
        return "2024-%02d-%02dT%02d:%02d:00Z" % (rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23), rng.randint(0, 59))
    if fmt == "email":
        return rng.choice(["alice", "bob.smith", "ops+alerts", "j_doe"]) + "@" + rng.choice(["example.com", "mail.example.org"])
    if fmt == "uuid":
        return "%08x-%04x-4%03x-a%03x-%012x" % (rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(12),
                                                 rng.getrandbits(12), rng.getrandbits(48))
    if fmt == "uri":
        return rng.choice(["https://example.com/", "https://docs.example.org/guide?page=2", "http://localhost:8080/api/v1"])
    if pattern:
        return PATTERN_SAMPLES[pattern]()
    lo, hi = schema.get("minLength", 0), schema.get("maxLength", 60)
    text = rng.choice(WORDS)
    while len(text) < lo or (rng.random() < 0.3 and len(text) < hi - 20):
        text += " " + rng.choice(WORDS)
    return text[:hi]


def letters(n, alphabet):
    return "".join(rng.choice(alphabet) for _ in range(n))


PATTERN_SAMPLES = {
    "^[A-Z]{3}$": lambda: rng.choice(["CDG", "JFK", "NRT", "GRU", "SFO"]),
    "^[A-Z0-9-]{4,12}$": lambda: letters(rng.randint(4, 12), "ABCXYZ0123456789-"),
    "^[0-9]{5}$": lambda: letters(5, "0123456789"),
    "^/[^\\u0000]*$": lambda: rng.choice(["/etc/hosts", "/home/alice/notes.txt", "/var/log/syslog"]),
    "^[0-7]{3}$": lambda: letters(3, "01234567"),
    "^[a-z]{2}$": lambda: rng.choice(["en", "fr", "de", "ja", "pt"]),
    "^[0-2][0-9]:[0-5][0-9]$": lambda: "%02d:%02d" % (rng.randint(0, 23), rng.randint(0, 59)),
    "^[A-Z.]{1,6}$": lambda: rng.choice(["AAPL", "MSFT", "BRK.B", "T"]),
    "^\\+?[0-9 ]{7,15}$": lambda: rng.choice(["+33 1 23 45 67", "5551234567", "+81 3 1234 5678"]),
    "^[a-z]$": lambda: rng.choice("xyz"),
    "^INV-[0-9]{6}$": lambda: "INV-" + letters(6, "0123456789"),
    "^[a-z]{2}(-[A-Z]{2})?$": lambda: rng.choice(["en", "en-US", "pt-BR", "ja"]),
}


def variant(name, make, k):
    """The k-th variant of a tool schema: 0 as written; then some optional fields
    required, some required ones optional, a description added, or the whole
    wrapped as the parameters of a tool call {"name": ..., "arguments": ...}."""
    schema = make()
    body = schema if schema.get("type") == "object" else None
    if k == 1 and body is not None and "required" in body:
        body["required"] = list(body["properties"])
    if k == 2 and body is not None:
        body["required"] = body.get("required", [])[:1]
        body["description"] = "Parameters of %s." % name
    if k == 3:
        defs = schema.pop("$defs", None)
        wrapped = O({"name": {"const": name}, "arguments": schema})
        if defs:
            wrapped["$defs"] = defs
        schema = wrapped
    return schema


def main():
    corpus = []
    for name, make in TOOLS.items():
        for k in range(4):
            schema = variant(name, make, k)
            texts = []
            for _ in range(3):
                value = instance(schema, schema)
                texts.append(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
            corpus.append({"name": "%s_v%d" % (name, k), "schema": schema, "instances": texts})
    with open(os.path.join(HERE, "schemas.jsonl"), "w") as f:
        for entry in corpus:
            f.write(json.dumps(entry, ensure_ascii=False, sort_keys=False) + "\n")
    print("make_corpus.py: %d schemas, %d instances" % (len(corpus), sum(len(e["instances"]) for e in corpus)))
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2], corpus)


def check(modules, corpus):
    lines = [json.dumps({"schema": e["schema"], "text": t}) for e in corpus for t in e["instances"]]
    script = ("const m=process.argv[1];const Ajv=require(m+'/ajv/dist/2020').default;"
              "const f=require(m+'/ajv-formats').default;const a=f(new Ajv({strict:false}));"
              "let bad=0;for(const l of require('fs').readFileSync(0,'utf8').split('\\n')){if(!l)continue;"
              "const {schema,text}=JSON.parse(l);const v=a.compile(schema);"
              "if(!v(JSON.parse(text))){bad++;console.log(text, JSON.stringify(v.errors));}}"
              "console.log('ajv: '+bad+' invalid');process.exit(bad?1:0);")
    r = subprocess.run(["node", "-e", script, modules], input="\n".join(lines), text=True)
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes json_schema_corpus.jsonl: JSON Schemas modeled on what agent
frameworks send (OpenAI strict function calling, Pydantic v2's
model_json_schema, zod-to-json-schema's draft-07, MCP tool inputSchemas,
LangChain tools, structured-output extraction), each with valid instances.

One line per schema: {"name", "style", "schema", "instances"}. Instances are
written in the grammar's member order (json_schema.h: `properties` order,
then required names outside it, then others), so that
json.dumps(instance, separators=(",", ":"), ensure_ascii=False) is accepted
by the compact grammar as it stands. tests/grammar/json_schema_corpus_test
checks that, and that ajv finds every instance valid.

  python3 tests/grammar/data/make_json_schema_corpus.py > tests/grammar/data/json_schema_corpus.jsonl
"""
import json
import sys

CORPUS = []
DRAFT7 = "http://json-schema.org/draft-07/schema#"
DRAFT2020 = "https://json-schema.org/draft/2020-12/schema"


def add(name, style, schema, *instances):
    CORPUS.append({"name": name, "style": style, "schema": schema, "instances": list(instances)})


# ---- helpers -------------------------------------------------------------

def s(desc=None, **kw):
    d = {"type": "string"}
    if desc:
        d["description"] = desc
    d.update(kw)
    return d


def i(desc=None, **kw):
    d = {"type": "integer"}
    if desc:
        d["description"] = desc
    d.update(kw)
    return d


def n(desc=None, **kw):
    d = {"type": "number"}
    if desc:
        d["description"] = desc
    d.update(kw)
    return d


def b(desc=None, **kw):
    d = {"type": "boolean"}
    if desc:
        d["description"] = desc
    d.update(kw)
    return d


def e(values, desc=None, typ="string"):
    d = {"type": typ, "enum": values}
    if desc:
        d["description"] = desc
    return d


def arr(items, desc=None, **kw):
    d = {"type": "array", "items": items}
    if desc:
        d["description"] = desc
    d.update(kw)
    return d


def obj(props, required=None, additional=None, desc=None, **kw):
    d = {"type": "object", "properties": props}
    if desc:
        d["description"] = desc
    if required is not None:
        d["required"] = required
    if additional is not None:
        d["additionalProperties"] = additional
    d.update(kw)
    return d


def strict(props, desc=None):
    """OpenAI strict mode: every property required, no others."""
    return obj(props, list(props), False, desc)


def nullable(schema):
    """OpenAI strict's optional field: a type list with null."""
    d = dict(schema)
    t = d["type"]
    d["type"] = (t if isinstance(t, list) else [t]) + ["null"]
    if "enum" in d:
        d["enum"] = d["enum"] + [None]
    return d


def opt(schema, title):
    """Pydantic v2's Optional[X] = None."""
    return {"anyOf": [schema, {"type": "null"}], "default": None, "title": title}


def titled(schema, title):
    d = {"title": title}
    d.update(schema)
    return d


def zod(props, required):
    """zod-to-json-schema: draft-07, additionalProperties false."""
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False,
            "$schema": DRAFT7}


# ---- OpenAI strict function calling ----------------------------------------

add("get_weather", "openai-strict",
    strict({"location": s("City and country, e.g. Paris, France"),
            "unit": nullable(e(["celsius", "fahrenheit"], "Temperature unit"))}),
    {"location": "Paris, France", "unit": "celsius"}, {"location": "Tokyo", "unit": None})

add("search_web", "openai-strict",
    strict({"query": s("Search terms", minLength=1),
            "num_results": i("How many results", minimum=1, maximum=20),
            "safe_search": b(),
            "site": nullable(s("Restrict to a domain", format="hostname"))}),
    {"query": "llm serving benchmarks", "num_results": 5, "safe_search": True, "site": None},
    {"query": "rust async", "num_results": 20, "safe_search": False, "site": "docs.rs"})

add("send_email", "openai-strict",
    strict({"to": arr(s(format="email"), minItems=1, maxItems=10),
            "cc": arr(s(format="email"), maxItems=10),
            "subject": s(maxLength=200),
            "body": s(),
            "priority": e(["low", "normal", "high"])}),
    {"to": ["ann@example.com"], "cc": [], "subject": "Hi", "body": "See you at 5.", "priority": "normal"},
    {"to": ["a@b.co", "c.d@e.org"], "cc": ["x@y.io"], "subject": "Q3 report", "body": "Attached.\nThanks",
     "priority": "high"})

add("create_calendar_event", "openai-strict",
    strict({"title": s(),
            "start": s("ISO 8601 start", format="date-time"),
            "end": s(format="date-time"),
            "attendees": arr(strict({"email": s(format="email"), "optional": b()})),
            "location": nullable(s()),
            "reminder_minutes": nullable(i(minimum=0, maximum=10080))}),
    {"title": "Standup", "start": "2025-03-01T09:00:00Z", "end": "2025-03-01T09:15:00Z",
     "attendees": [{"email": "bob@example.com", "optional": False}], "location": None, "reminder_minutes": 10},
    {"title": "Offsite", "start": "2025-06-10T08:00:00+02:00", "end": "2025-06-11T17:00:00+02:00", "attendees": [],
     "location": "Lisbon", "reminder_minutes": None})

add("book_flight", "openai-strict",
    strict({"origin": s("IATA code", pattern="^[A-Z]{3}$"),
            "destination": s(pattern="^[A-Z]{3}$"),
            "departure_date": s(format="date"),
            "return_date": nullable(s(format="date")),
            "passengers": i(minimum=1, maximum=9),
            "cabin": e(["economy", "premium_economy", "business", "first"])}),
    {"origin": "SFO", "destination": "NRT", "departure_date": "2025-04-02", "return_date": "2025-04-12",
     "passengers": 2, "cabin": "economy"},
    {"origin": "LHR", "destination": "JFK", "departure_date": "2024-02-29", "return_date": None, "passengers": 1,
     "cabin": "business"})

add("run_sql", "openai-strict",
    strict({"database": e(["analytics", "billing", "users"]),
            "query": s("A read-only SQL query", maxLength=4000),
            "limit": i(minimum=1, maximum=10000),
            "timeout_seconds": n(exclusiveMinimum=0, maximum=300)}),
    {"database": "analytics", "query": "SELECT count(*) FROM events WHERE day = '2025-01-01'", "limit": 100,
     "timeout_seconds": 30},
    {"database": "users", "query": "SELECT id, email FROM users ORDER BY created_at DESC", "limit": 10,
     "timeout_seconds": 2.5})

add("execute_shell", "openai-strict",
    strict({"command": s(), "cwd": nullable(s()), "env": arr(strict({"name": s(pattern="^[A-Z_][A-Z0-9_]*$"),
                                                                      "value": s()})),
            "timeout_ms": i(minimum=100, maximum=600000)}),
    {"command": "ls -la", "cwd": "/tmp", "env": [], "timeout_ms": 5000},
    {"command": "make test", "cwd": None, "env": [{"name": "CC", "value": "clang"}, {"name": "JOBS", "value": "4"}],
     "timeout_ms": 600000})

add("http_request", "openai-strict",
    strict({"method": e(["GET", "POST", "PUT", "PATCH", "DELETE"]),
            "url": s(format="uri"),
            "headers": arr(strict({"key": s(), "value": s()})),
            "body": nullable(s())}),
    {"method": "GET", "url": "https://api.example.com/v1/items?page=2", "headers": [], "body": None},
    {"method": "POST", "url": "http://localhost:8080/submit", "headers": [{"key": "Content-Type",
                                                                          "value": "application/json"}],
     "body": "{\"a\":1}"})

add("get_stock_quote", "openai-strict",
    strict({"ticker": s(pattern="^[A-Z.]{1,6}$"), "exchange": nullable(e(["NYSE", "NASDAQ", "LSE", "TSE"])),
            "include_history": b()}),
    {"ticker": "AAPL", "exchange": "NASDAQ", "include_history": False},
    {"ticker": "BRK.B", "exchange": None, "include_history": True})

add("convert_currency", "openai-strict",
    strict({"amount": n(minimum=0), "from": s(pattern="^[A-Z]{3}$"), "to": s(pattern="^[A-Z]{3}$")}),
    {"amount": 100, "from": "USD", "to": "EUR"}, {"amount": 12.75, "from": "JPY", "to": "GBP"})

add("set_thermostat", "openai-strict",
    strict({"room": e(["living_room", "bedroom", "kitchen", "office"]),
            "target_celsius": n(minimum=5, maximum=30),
            "mode": e(["heat", "cool", "auto", "off"]),
            "schedule": nullable(arr(strict({"time": s(format="time"), "target_celsius": n(minimum=5, maximum=30)}),
                                     maxItems=8))}),
    {"room": "bedroom", "target_celsius": 19.5, "mode": "heat", "schedule": None},
    {"room": "office", "target_celsius": 22, "mode": "auto",
     "schedule": [{"time": "07:00:00Z", "target_celsius": 21}, {"time": "22:30:00+01:00", "target_celsius": 17.5}]})

add("create_ticket", "openai-strict",
    strict({"title": s(maxLength=120), "description": s(), "severity": e(["sev1", "sev2", "sev3", "sev4"]),
            "labels": arr(s(pattern="^[a-z0-9-]+$"), maxItems=5),
            "assignee": nullable(s(format="email"))}),
    {"title": "Login fails on Safari", "description": "Steps: open /login ...", "severity": "sev2",
     "labels": ["frontend", "auth"], "assignee": None},
    {"title": "DB failover", "description": "", "severity": "sev1", "labels": [], "assignee": "oncall@example.com"})

add("translate_text", "openai-strict",
    strict({"text": s(), "source_language": nullable(s(pattern="^[a-z]{2}(-[A-Z]{2})?$")),
            "target_language": s(pattern="^[a-z]{2}(-[A-Z]{2})?$"), "formality": e(["default", "more", "less"])}),
    {"text": "Where is the station?", "source_language": "en", "target_language": "ja", "formality": "more"},
    {"text": "Ça va ?", "source_language": None, "target_language": "en-US", "formality": "default"})

add("play_music", "openai-strict",
    strict({"query": s(), "type": e(["track", "album", "playlist", "artist"]), "shuffle": b(),
            "volume": i(minimum=0, maximum=100)}),
    {"query": "Kind of Blue", "type": "album", "shuffle": False, "volume": 40},
    {"query": "lofi beats", "type": "playlist", "shuffle": True, "volume": 100})

add("order_food", "openai-strict",
    strict({"restaurant_id": s(format="uuid"),
            "items": arr(strict({"menu_item_id": s(), "quantity": i(minimum=1, maximum=50),
                                 "notes": nullable(s(maxLength=200))}), minItems=1),
            "delivery": strict({"address": s(), "instructions": nullable(s())}),
            "tip_percent": i(minimum=0, maximum=100)}),
    {"restaurant_id": "3f2b6a1c-9d4e-4b8a-a2f1-0c5d7e8f9a10",
     "items": [{"menu_item_id": "margherita", "quantity": 2, "notes": None}],
     "delivery": {"address": "1 Main St, Springfield", "instructions": "Ring twice"}, "tip_percent": 15})

add("classify_sentiment", "openai-strict",
    strict({"sentiment": e(["positive", "neutral", "negative"]), "confidence": n(minimum=0, maximum=1),
            "aspects": arr(strict({"aspect": s(), "sentiment": e(["positive", "neutral", "negative"])}))}),
    {"sentiment": "positive", "confidence": 0.93, "aspects": [{"aspect": "battery", "sentiment": "positive"}]},
    {"sentiment": "neutral", "confidence": 0.5, "aspects": []})

add("extract_invoice", "openai-strict",
    strict({"invoice_number": s(), "issue_date": s(format="date"), "due_date": nullable(s(format="date")),
            "vendor": strict({"name": s(), "tax_id": nullable(s()), "email": nullable(s(format="email"))}),
            "line_items": arr(strict({"description": s(), "quantity": n(exclusiveMinimum=0),
                                      "unit_price": n(minimum=0), "total": n(minimum=0)})),
            "currency": s(pattern="^[A-Z]{3}$"), "total": n(minimum=0)}),
    {"invoice_number": "INV-2025-0042", "issue_date": "2025-01-15", "due_date": "2025-02-14",
     "vendor": {"name": "Acme GmbH", "tax_id": "DE123456789", "email": "billing@acme.de"},
     "line_items": [{"description": "Widgets", "quantity": 10, "unit_price": 2.5, "total": 25},
                    {"description": "Shipping", "quantity": 1, "unit_price": 7.99, "total": 7.99}],
     "currency": "EUR", "total": 32.99})

add("math_reasoning", "openai-strict",
    strict({"steps": arr(strict({"explanation": s(), "output": s()})), "final_answer": s()}),
    {"steps": [{"explanation": "Subtract 7 from both sides", "output": "8x = -30"},
               {"explanation": "Divide by 8", "output": "x = -3.75"}], "final_answer": "x = -3.75"},
    {"steps": [], "final_answer": "42"})

add("ui_component", "openai-strict-recursive",
    {"type": "object", "properties": {
        "type": e(["div", "button", "header", "section", "field", "form"]),
        "label": s(),
        "children": arr({"$ref": "#"}),
        "attributes": arr(strict({"name": s(), "value": s()}))},
     "required": ["type", "label", "children", "attributes"], "additionalProperties": False},
    {"type": "form", "label": "Sign up", "children": [
        {"type": "field", "label": "Email", "children": [], "attributes": [{"name": "type", "value": "email"}]},
        {"type": "button", "label": "Submit", "children": [], "attributes": []}], "attributes": []})

add("linked_list", "openai-strict-recursive",
    {"type": "object", "properties": {"linked_list": {"$ref": "#/$defs/linked_list_node"}},
     "$defs": {"linked_list_node": {"type": "object", "properties": {
         "value": {"type": "number"}, "next": {"anyOf": [{"$ref": "#/$defs/linked_list_node"}, {"type": "null"}]}},
         "additionalProperties": False, "required": ["next", "value"]}},
     "additionalProperties": False, "required": ["linked_list"]},
    {"linked_list": {"value": 1, "next": {"value": 2.5, "next": None}}},
    {"linked_list": {"value": -3, "next": None}})

add("moderation_result", "openai-strict",
    strict({"flagged": b(), "categories": arr(e(["hate", "harassment", "self-harm", "sexual", "violence"])),
            "explanation": nullable(s(maxLength=500))}),
    {"flagged": False, "categories": [], "explanation": None},
    {"flagged": True, "categories": ["harassment"], "explanation": "Insults directed at a person."})

add("github_create_issue", "openai-strict",
    strict({"owner": s(pattern="^[A-Za-z0-9-]+$"), "repo": s(pattern="^[A-Za-z0-9._-]+$"), "title": s(),
            "body": nullable(s()), "labels": arr(s()), "assignees": arr(s(), maxItems=10),
            "milestone": nullable(i(minimum=1))}),
    {"owner": "octocat", "repo": "hello-world", "title": "Crash on start", "body": "Trace attached.",
     "labels": ["bug"], "assignees": [], "milestone": None})

add("slack_post_message", "openai-strict",
    strict({"channel": s(pattern="^[#@]?[a-z0-9_-]+$"), "text": s(maxLength=4000), "thread_ts": nullable(s()),
            "unfurl_links": b()}),
    {"channel": "#general", "text": "Deploy finished :rocket:", "thread_ts": None, "unfurl_links": False},
    {"channel": "ops-alerts", "text": "Disk at 91%", "thread_ts": "1712345678.000100", "unfurl_links": True})

add("kubectl_scale", "openai-strict",
    strict({"namespace": s(pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", maxLength=63),
            "deployment": s(pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", maxLength=63),
            "replicas": i(minimum=0, maximum=500), "dry_run": b()}),
    {"namespace": "prod", "deployment": "api-server", "replicas": 12, "dry_run": True})

add("geocode", "openai-strict",
    strict({"address": s(), "country_code": nullable(s(pattern="^[A-Z]{2}$"))}),
    {"address": "10 Downing Street, London", "country_code": "GB"}, {"address": "Shibuya", "country_code": None})

add("reverse_geocode", "openai-strict",
    strict({"latitude": n(minimum=-90, maximum=90), "longitude": n(minimum=-180, maximum=180),
            "language": s(pattern="^[a-z]{2}$")}),
    {"latitude": 48.8584, "longitude": 2.2945, "language": "fr"},
    {"latitude": -33.8688, "longitude": 151.2093, "language": "en"})

# ---- Pydantic v2 model_json_schema -----------------------------------------

add("pydantic_user", "pydantic",
    {"properties": {"id": {"title": "Id", "type": "integer"}, "name": {"title": "Name", "type": "string"},
                    "email": {"format": "email", "title": "Email", "type": "string"},
                    "age": opt({"type": "integer", "minimum": 0, "maximum": 150}, "Age"),
                    "tags": {"items": {"type": "string"}, "title": "Tags", "type": "array"}},
     "required": ["id", "name", "email"], "title": "User", "type": "object"},
    {"id": 1, "name": "Ada", "email": "ada@example.com"},
    {"id": 2, "name": "Linus", "email": "l@kernel.org", "age": 54, "tags": ["admin", "git"]},
    {"id": 3, "name": "Grace", "email": "grace@navy.mil", "age": None, "tags": []})

add("pydantic_order", "pydantic",
    {"$defs": {
        "Address": {"properties": {"street": {"title": "Street", "type": "string"},
                                   "city": {"title": "City", "type": "string"},
                                   "postal_code": {"pattern": "^[0-9]{5}(-[0-9]{4})?$", "title": "Postal Code",
                                                   "type": "string"},
                                   "country": {"default": "US", "title": "Country", "type": "string"}},
                    "required": ["street", "city", "postal_code"], "title": "Address", "type": "object"},
        "LineItem": {"properties": {"sku": {"title": "Sku", "type": "string"},
                                    "quantity": {"exclusiveMinimum": 0, "title": "Quantity", "type": "integer"},
                                    "price": {"minimum": 0, "title": "Price", "type": "number"}},
                     "required": ["sku", "quantity", "price"], "title": "LineItem", "type": "object"},
        "Status": {"enum": ["pending", "paid", "shipped", "cancelled"], "title": "Status", "type": "string"}},
     "properties": {"order_id": {"format": "uuid", "title": "Order Id", "type": "string"},
                    "status": {"$ref": "#/$defs/Status"},
                    "items": {"items": {"$ref": "#/$defs/LineItem"}, "minItems": 1, "title": "Items",
                              "type": "array"},
                    "shipping": {"$ref": "#/$defs/Address"},
                    "billing": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": None},
                    "created_at": {"format": "date-time", "title": "Created At", "type": "string"}},
     "required": ["order_id", "status", "items", "shipping", "created_at"], "title": "Order", "type": "object"},
    {"order_id": "0f8fad5b-d9cb-469f-a165-70867728950e", "status": "paid",
     "items": [{"sku": "A-1", "quantity": 2, "price": 9.99}],
     "shipping": {"street": "1 Infinite Loop", "city": "Cupertino", "postal_code": "95014"},
     "created_at": "2025-01-02T03:04:05Z"},
    {"order_id": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "status": "shipped",
     "items": [{"sku": "B", "quantity": 1, "price": 0}, {"sku": "C", "quantity": 3, "price": 120.5}],
     "shipping": {"street": "Hauptstr. 5", "city": "Berlin", "postal_code": "10115", "country": "DE"},
     "billing": None, "created_at": "2024-12-31T23:59:59.999+01:00"})

add("pydantic_tree", "pydantic-recursive",
    {"$defs": {"Node": {"properties": {"name": {"title": "Name", "type": "string"},
                                       "children": {"items": {"$ref": "#/$defs/Node"}, "title": "Children",
                                                    "type": "array"}},
                        "required": ["name"], "title": "Node", "type": "object"}},
     "$ref": "#/$defs/Node"},
    {"name": "root", "children": [{"name": "a"}, {"name": "b", "children": [{"name": "c", "children": []}]}]},
    {"name": "leaf"})

add("pydantic_discriminated_pet", "pydantic-oneOf",
    {"$defs": {
        "Cat": {"properties": {"pet_type": {"const": "cat", "title": "Pet Type", "type": "string"},
                               "meows": {"title": "Meows", "type": "integer"}},
                "required": ["pet_type", "meows"], "title": "Cat", "type": "object"},
        "Dog": {"properties": {"pet_type": {"const": "dog", "title": "Pet Type", "type": "string"},
                               "barks": {"title": "Barks", "type": "number"}},
                "required": ["pet_type", "barks"], "title": "Dog", "type": "object"},
        "Lizard": {"properties": {"pet_type": {"const": "reptile", "title": "Pet Type", "type": "string"},
                                  "scales": {"title": "Scales", "type": "boolean"}},
                   "required": ["pet_type", "scales"], "title": "Lizard", "type": "object"}},
     "properties": {"pet": {"discriminator": {"mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog",
                                                          "reptile": "#/$defs/Lizard"}, "propertyName": "pet_type"},
                            "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}, {"$ref": "#/$defs/Lizard"}],
                            "title": "Pet"},
                    "n": {"title": "N", "type": "integer"}},
     "required": ["pet", "n"], "title": "Model", "type": "object"},
    {"pet": {"pet_type": "cat", "meows": 3}, "n": 1}, {"pet": {"pet_type": "dog", "barks": 0.5}, "n": 2},
    {"pet": {"pet_type": "reptile", "scales": True}, "n": 0})

add("pydantic_literal_and_bounds", "pydantic",
    {"properties": {"mode": {"enum": ["fast", "accurate"], "title": "Mode", "type": "string"},
                    "temperature": {"default": 0.7, "maximum": 2, "minimum": 0, "title": "Temperature",
                                    "type": "number"},
                    "max_tokens": {"default": 256, "exclusiveMaximum": 32768, "exclusiveMinimum": 0,
                                   "title": "Max Tokens", "type": "integer"},
                    "stop": {"anyOf": [{"type": "string"}, {"items": {"type": "string"}, "maxItems": 4,
                                                             "type": "array"}, {"type": "null"}],
                             "default": None, "title": "Stop"}},
     "required": ["mode"], "title": "GenerationConfig", "type": "object"},
    {"mode": "fast"}, {"mode": "accurate", "temperature": 0, "max_tokens": 1024, "stop": ["\n\n", "END"]},
    {"mode": "fast", "temperature": 1.25, "stop": "###"})

add("pydantic_resume", "pydantic",
    {"$defs": {
        "Job": {"properties": {"company": {"title": "Company", "type": "string"},
                               "title": {"title": "Title", "type": "string"},
                               "start": {"format": "date", "title": "Start", "type": "string"},
                               "end": {"anyOf": [{"format": "date", "type": "string"}, {"type": "null"}],
                                       "title": "End"}},
                "required": ["company", "title", "start", "end"], "title": "Job", "type": "object"},
        "Skill": {"properties": {"name": {"title": "Name", "type": "string"},
                                 "level": {"maximum": 5, "minimum": 1, "title": "Level", "type": "integer"}},
                  "required": ["name", "level"], "title": "Skill", "type": "object"}},
     "properties": {"full_name": {"title": "Full Name", "type": "string"},
                    "email": {"anyOf": [{"format": "email", "type": "string"}, {"type": "null"}], "default": None,
                              "title": "Email"},
                    "jobs": {"items": {"$ref": "#/$defs/Job"}, "title": "Jobs", "type": "array"},
                    "skills": {"items": {"$ref": "#/$defs/Skill"}, "title": "Skills", "type": "array"}},
     "required": ["full_name", "jobs", "skills"], "title": "Resume", "type": "object"},
    {"full_name": "Jane Doe", "email": "jane@doe.dev",
     "jobs": [{"company": "Initech", "title": "Engineer", "start": "2019-09-01", "end": None}],
     "skills": [{"name": "C++", "level": 5}, {"name": "SQL", "level": 3}]},
    {"full_name": "John Roe", "jobs": [], "skills": []})

add("pydantic_event_union", "pydantic-anyOf",
    {"$defs": {
        "Click": {"properties": {"kind": {"const": "click", "title": "Kind", "type": "string"},
                                 "x": {"title": "X", "type": "integer"}, "y": {"title": "Y", "type": "integer"}},
                  "required": ["kind", "x", "y"], "title": "Click", "type": "object"},
        "KeyPress": {"properties": {"kind": {"const": "key", "title": "Kind", "type": "string"},
                                    "key": {"maxLength": 20, "title": "Key", "type": "string"},
                                    "modifiers": {"items": {"enum": ["ctrl", "alt", "shift", "meta"],
                                                            "type": "string"}, "title": "Modifiers",
                                                  "type": "array"}},
                     "required": ["kind", "key"], "title": "KeyPress", "type": "object"}},
     "properties": {"events": {"items": {"anyOf": [{"$ref": "#/$defs/Click"}, {"$ref": "#/$defs/KeyPress"}]},
                               "title": "Events", "type": "array"}},
     "required": ["events"], "title": "Session", "type": "object"},
    {"events": [{"kind": "click", "x": 10, "y": 20}, {"kind": "key", "key": "Enter", "modifiers": ["ctrl"]}]},
    {"events": []})

add("pydantic_settings_nested", "pydantic",
    {"$defs": {"Db": {"properties": {"host": {"default": "localhost", "title": "Host", "type": "string"},
                                     "port": {"default": 5432, "maximum": 65535, "minimum": 1, "title": "Port",
                                              "type": "integer"},
                                     "ssl": {"default": False, "title": "Ssl", "type": "boolean"}},
                      "title": "Db", "type": "object"}},
     "properties": {"app_name": {"title": "App Name", "type": "string"}, "db": {"$ref": "#/$defs/Db"},
                    "debug": {"default": False, "title": "Debug", "type": "boolean"},
                    "allowed_hosts": {"items": {"type": "string"}, "title": "Allowed Hosts", "type": "array"}},
     "required": ["app_name", "db"], "title": "Settings", "type": "object"},
    {"app_name": "svc", "db": {}}, {"app_name": "svc", "db": {"host": "db.internal", "port": 6543, "ssl": True},
                                    "debug": True, "allowed_hosts": ["*.example.com"]})

add("pydantic_allof_description", "pydantic-allOf",
    {"$defs": {"Color": {"enum": ["red", "green", "blue"], "title": "Color", "type": "string"}},
     "properties": {"primary": {"allOf": [{"$ref": "#/$defs/Color"}], "description": "Main color"},
                    "secondary": {"anyOf": [{"$ref": "#/$defs/Color"}, {"type": "null"}], "default": None}},
     "required": ["primary"], "title": "Palette", "type": "object"},
    {"primary": "red"}, {"primary": "blue", "secondary": "green"})

add("pydantic_dict_field", "pydantic",
    {"properties": {"counts": {"additionalProperties": {"type": "integer"}, "title": "Counts", "type": "object"},
                    "labels": {"additionalProperties": {"type": "string"}, "title": "Labels", "type": "object"}},
     "required": ["counts"], "title": "Stats", "type": "object"},
    {"counts": {"a": 1, "b": 2}}, {"counts": {}, "labels": {"env": "prod", "team": "ml"}})

add("pydantic_tuple", "pydantic",
    {"properties": {"point": {"maxItems": 2, "minItems": 2, "prefixItems": [{"type": "number"}, {"type": "number"}],
                              "title": "Point", "type": "array"},
                    "rgb": {"maxItems": 3, "minItems": 3,
                            "prefixItems": [{"maximum": 255, "minimum": 0, "type": "integer"},
                                            {"maximum": 255, "minimum": 0, "type": "integer"},
                                            {"maximum": 255, "minimum": 0, "type": "integer"}],
                            "title": "Rgb", "type": "array"}},
     "required": ["point", "rgb"], "title": "Shape", "type": "object"},
    {"point": [1.5, -2], "rgb": [255, 128, 0]})

add("pydantic_comment_thread", "pydantic-recursive",
    {"$defs": {"Comment": {"properties": {"author": {"title": "Author", "type": "string"},
                                          "text": {"maxLength": 1000, "title": "Text", "type": "string"},
                                          "score": {"default": 0, "title": "Score", "type": "integer"},
                                          "replies": {"items": {"$ref": "#/$defs/Comment"}, "title": "Replies",
                                                      "type": "array"}},
                           "required": ["author", "text"], "title": "Comment", "type": "object"}},
     "properties": {"post_id": {"title": "Post Id", "type": "integer"},
                    "comments": {"items": {"$ref": "#/$defs/Comment"}, "title": "Comments", "type": "array"}},
     "required": ["post_id", "comments"], "title": "Thread", "type": "object"},
    {"post_id": 7, "comments": [{"author": "a", "text": "first", "replies": [{"author": "b", "text": "re",
                                                                             "score": -1}]}]})

add("pydantic_json_value", "pydantic-recursive",
    {"$defs": {"JsonValue": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"},
                                       {"type": "null"},
                                       {"items": {"$ref": "#/$defs/JsonValue"}, "type": "array"},
                                       {"additionalProperties": {"$ref": "#/$defs/JsonValue"}, "type": "object"}]}},
     "properties": {"payload": {"$ref": "#/$defs/JsonValue"}}, "required": ["payload"], "title": "Envelope",
     "type": "object"},
    {"payload": {"a": [1, "two", None, {"b": False}]}}, {"payload": 3.14})

# ---- zod-to-json-schema (Vercel AI SDK, MCP servers written in TypeScript) ----

add("mcp_read_file", "zod-mcp",
    zod({"path": s("Absolute path"), "encoding": {"type": "string", "enum": ["utf8", "base64"], "default": "utf8"},
         "offset": i(minimum=0), "length": i(minimum=1, maximum=1048576)}, ["path"]),
    {"path": "/etc/hosts"}, {"path": "/var/log/syslog", "encoding": "utf8", "offset": 1024, "length": 4096})

add("mcp_write_file", "zod-mcp",
    zod({"path": s(), "content": s(), "create_dirs": {"type": "boolean", "default": False}}, ["path", "content"]),
    {"path": "/tmp/a.txt", "content": "hello\n"}, {"path": "notes/todo.md", "content": "- [ ] ship", "create_dirs": True})

add("mcp_list_directory", "zod-mcp",
    zod({"path": s(), "recursive": b(), "pattern": s("glob")}, ["path"]),
    {"path": "."}, {"path": "/src", "recursive": True, "pattern": "**/*.cc"})

add("mcp_search_files", "zod-mcp",
    zod({"root": s(), "query": s(minLength=1), "exclude": arr(s()), "max_results": i(minimum=1, maximum=1000)},
        ["root", "query"]),
    {"root": "/repo", "query": "TODO", "exclude": ["build", ".git"], "max_results": 50})

add("mcp_git_commit", "zod-mcp",
    zod({"repo_path": s(), "message": s(minLength=1, maxLength=500), "files": arr(s(), minItems=1),
         "amend": b()}, ["repo_path", "message", "files"]),
    {"repo_path": "/work", "message": "fix: off-by-one in parser", "files": ["src/parser.c"]},
    {"repo_path": ".", "message": "wip", "files": ["a", "b"], "amend": True})

add("mcp_browser_navigate", "zod-mcp",
    zod({"url": s(format="uri"), "wait_until": e(["load", "domcontentloaded", "networkidle"]),
         "timeout": n(minimum=0)}, ["url"]),
    {"url": "https://example.org"}, {"url": "https://news.ycombinator.com/item?id=1", "wait_until": "load",
                                     "timeout": 30000})

add("mcp_browser_click", "zod-mcp",
    zod({"selector": s(), "button": e(["left", "right", "middle"]), "click_count": i(minimum=1, maximum=3)},
        ["selector"]),
    {"selector": "#submit"}, {"selector": "button.primary", "button": "left", "click_count": 2})

add("mcp_fetch", "zod-mcp",
    zod({"url": s(format="uri"), "max_length": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 1000000,
                                                "default": 5000},
         "start_index": {"type": "integer", "minimum": 0, "default": 0}, "raw": {"type": "boolean", "default": False}},
        ["url"]),
    {"url": "https://modelcontextprotocol.io/", "max_length": 20000}, {"url": "http://127.0.0.1:3000/health"})

add("mcp_memory_create_entities", "zod-mcp",
    zod({"entities": arr({"type": "object", "properties": {"name": s(), "entityType": s(),
                                                           "observations": arr(s())},
                          "required": ["name", "entityType", "observations"], "additionalProperties": False})},
        ["entities"]),
    {"entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]})

add("mcp_sqlite_query", "zod-mcp",
    zod({"sql": s(), "params": arr({"type": ["string", "number", "boolean", "null"]})}, ["sql"]),
    {"sql": "SELECT * FROM t WHERE id = ?", "params": [5]}, {"sql": "PRAGMA table_info(users)"})

add("mcp_time_convert", "zod-mcp",
    zod({"source_timezone": s(), "time": s(pattern="^([01][0-9]|2[0-3]):[0-5][0-9]$"), "target_timezone": s()},
        ["source_timezone", "time", "target_timezone"]),
    {"source_timezone": "America/New_York", "time": "16:30", "target_timezone": "Asia/Tokyo"})

add("vercel_weather", "zod-ai-sdk",
    zod({"city": s(), "units": {"type": "string", "enum": ["metric", "imperial"], "default": "metric"}}, ["city"]),
    {"city": "Berlin"}, {"city": "Austin", "units": "imperial"})

add("vercel_generate_image", "zod-ai-sdk",
    zod({"prompt": s(maxLength=1000), "size": e(["256x256", "512x512", "1024x1024"]), "n": i(minimum=1, maximum=4),
         "style": e(["vivid", "natural"])}, ["prompt", "size"]),
    {"prompt": "a lighthouse at dusk, oil painting", "size": "1024x1024", "n": 1, "style": "vivid"})

add("vercel_recipe", "zod-ai-sdk",
    zod({"recipe": {"type": "object", "properties": {
        "name": s(), "ingredients": arr({"type": "object", "properties": {"name": s(), "amount": s()},
                                         "required": ["name", "amount"], "additionalProperties": False}),
        "steps": arr(s())}, "required": ["name", "ingredients", "steps"], "additionalProperties": False}},
        ["recipe"]),
    {"recipe": {"name": "Pancakes", "ingredients": [{"name": "flour", "amount": "200 g"},
                                                    {"name": "milk", "amount": "300 ml"}],
                "steps": ["Mix", "Fry", "Serve"]}})

add("zod_nullable_union", "zod-ai-sdk",
    zod({"id": {"anyOf": [{"type": "string"}, {"type": "number"}]}, "note": {"type": ["string", "null"]},
         "status": {"anyOf": [{"type": "string", "enum": ["open", "closed"]}, {"type": "null"}]}},
        ["id", "note", "status"]),
    {"id": "abc", "note": None, "status": "open"}, {"id": 12, "note": "x", "status": None})

add("zod_record", "zod-ai-sdk",
    zod({"headers": {"type": "object", "additionalProperties": {"type": "string"}},
         "retries": {"type": "integer", "minimum": 0, "maximum": 10}}, ["headers"]),
    {"headers": {"accept": "application/json"}, "retries": 3}, {"headers": {}})

add("zod_discriminated", "zod-ai-sdk",
    zod({"action": {"anyOf": [
        {"type": "object", "properties": {"type": {"type": "string", "const": "move"}, "dx": {"type": "number"},
                                          "dy": {"type": "number"}},
         "required": ["type", "dx", "dy"], "additionalProperties": False},
        {"type": "object", "properties": {"type": {"type": "string", "const": "say"}, "text": {"type": "string"}},
         "required": ["type", "text"], "additionalProperties": False},
        {"type": "object", "properties": {"type": {"type": "string", "const": "stop"}}, "required": ["type"],
         "additionalProperties": False}]}}, ["action"]),
    {"action": {"type": "move", "dx": 1, "dy": -1}}, {"action": {"type": "say", "text": "hi"}},
    {"action": {"type": "stop"}})

# ---- LangChain / LlamaIndex / plain JSON Schema tools ------------------------

add("langchain_tavily_search", "langchain",
    obj({"query": s("search query to look up"),
         "max_results": i("Max search results to return", default=5, minimum=1, maximum=20),
         "search_depth": e(["basic", "advanced"], "The depth of the search"),
         "include_domains": arr(s(), "A list of domains to include"),
         "include_answer": b("Include a short answer")}, ["query"]),
    {"query": "who won the 2022 world cup"}, {"query": "vLLM release notes", "max_results": 3,
                                               "search_depth": "advanced", "include_domains": ["github.com"],
                                               "include_answer": True})

add("langchain_wikipedia", "langchain",
    obj({"query": s("query to look up on wikipedia"), "lang": s(pattern="^[a-z]{2,3}$", default="en")},
        ["query"]),
    {"query": "Alan Turing"}, {"query": "Kyoto", "lang": "ja"})

add("langchain_python_repl", "langchain",
    obj({"code": s("valid python code")}, ["code"]), {"code": "print(sum(range(10)))"},
    {"code": "import math\nmath.sqrt(2)"})

add("langchain_calculator", "langchain",
    obj({"expression": s(pattern="^[0-9+*/(). -]+$", maxLength=200)}, ["expression"], False),
    {"expression": "(3 + 4) * 2"}, {"expression": "1/3"})

add("langchain_requests_get", "langchain",
    obj({"url": s(format="uri"), "params": {"type": "object", "additionalProperties": {"type": "string"}}},
        ["url"]),
    {"url": "https://api.github.com/repos/python/cpython"}, {"url": "https://x.org/s", "params": {"q": "a b"}})

add("llamaindex_query_engine", "llamaindex",
    obj({"input": s("the question"), "top_k": i(minimum=1, maximum=50),
         "filters": arr(obj({"key": s(), "value": {"type": ["string", "number", "boolean"]},
                             "operator": e(["==", "!=", ">", "<", ">=", "<=", "in"])},
                            ["key", "value"], False))}, ["input"]),
    {"input": "What did the CEO say about margins?", "top_k": 4,
     "filters": [{"key": "year", "value": 2024, "operator": ">="}]})

add("plain_rag_answer", "structured-output",
    obj({"answer": s(), "citations": arr(obj({"doc_id": s(), "quote": s(maxLength=300)}, ["doc_id", "quote"], False),
                                         maxItems=5),
         "confidence": e(["low", "medium", "high"])}, ["answer", "citations", "confidence"], False),
    {"answer": "The warranty lasts two years.", "citations": [{"doc_id": "policy-7", "quote": "two (2) years"}],
     "confidence": "high"})

add("plain_intent", "structured-output",
    obj({"intent": e(["book", "cancel", "modify", "question", "other"]), "slots": obj(
        {"date": s(format="date"), "party_size": i(minimum=1, maximum=20), "name": s()}, [], False)},
        ["intent", "slots"], False),
    {"intent": "book", "slots": {"date": "2025-05-05", "party_size": 4}}, {"intent": "other", "slots": {}})

add("plain_entities", "structured-output",
    obj({"entities": arr(obj({"text": s(), "type": e(["PERSON", "ORG", "LOC", "DATE", "MONEY"]),
                              "start": i(minimum=0), "end": i(minimum=0)}, ["text", "type", "start", "end"], False))},
        ["entities"], False),
    {"entities": [{"text": "Ada Lovelace", "type": "PERSON", "start": 0, "end": 12},
                  {"text": "London", "type": "LOC", "start": 25, "end": 31}]},
    {"entities": []})

add("plain_product", "structured-output",
    obj({"name": s(), "brand": {"type": ["string", "null"]}, "price": obj({"amount": n(minimum=0),
                                                                            "currency": s(pattern="^[A-Z]{3}$")},
                                                                           ["amount", "currency"], False),
         "in_stock": b(), "rating": {"type": ["number", "null"], "minimum": 0, "maximum": 5},
         "categories": arr(s(), maxItems=5)},
        ["name", "brand", "price", "in_stock", "rating", "categories"], False),
    {"name": "Noise-cancelling headphones", "brand": "Sonic", "price": {"amount": 199.99, "currency": "USD"},
     "in_stock": True, "rating": 4.6, "categories": ["audio", "electronics"]},
    {"name": "Mystery box", "brand": None, "price": {"amount": 0, "currency": "EUR"}, "in_stock": False,
     "rating": None, "categories": []})

add("plain_meeting_notes", "structured-output",
    obj({"summary": s(maxLength=1000), "decisions": arr(s()),
         "action_items": arr(obj({"owner": s(), "task": s(), "due": {"type": ["string", "null"], "format": "date"}},
                                 ["owner", "task", "due"], False))},
        ["summary", "decisions", "action_items"], False),
    {"summary": "Agreed on the Q2 roadmap.", "decisions": ["Ship v2 in May"],
     "action_items": [{"owner": "Kim", "task": "Draft the spec", "due": "2025-04-01"},
                      {"owner": "Lee", "task": "Hire", "due": None}]})

add("plain_sql_generation", "structured-output",
    obj({"dialect": e(["postgres", "mysql", "sqlite", "bigquery"]), "sql": s(), "tables_used": arr(s(), minItems=1),
         "explanation": s(maxLength=500)}, ["dialect", "sql", "tables_used", "explanation"], False),
    {"dialect": "postgres", "sql": "SELECT 1", "tables_used": ["dual"], "explanation": "trivial"})

add("plain_code_review", "structured-output",
    obj({"verdict": e(["approve", "request_changes", "comment"]),
         "comments": arr(obj({"file": s(), "line": i(minimum=1), "severity": e(["nit", "minor", "major"]),
                              "message": s()}, ["file", "line", "severity", "message"], False))},
        ["verdict", "comments"], False),
    {"verdict": "request_changes", "comments": [{"file": "src/a.cc", "line": 42, "severity": "major",
                                                  "message": "Use-after-free when the map rehashes."}]},
    {"verdict": "approve", "comments": []})

add("plain_chain_of_thought", "structured-output",
    obj({"reasoning": arr(s(), minItems=1, maxItems=10), "answer": {"type": ["string", "number"]}},
        ["reasoning", "answer"], False),
    {"reasoning": ["12 eggs per dozen", "3 dozen is 36"], "answer": 36},
    {"reasoning": ["Paris is the capital"], "answer": "Paris"})

add("plain_json_patch", "structured-output",
    arr(obj({"op": e(["add", "remove", "replace", "move", "copy", "test"]), "path": s(format="json-pointer"),
             "from": s(format="json-pointer"), "value": {}}, ["op", "path"], False), minItems=1),
    [{"op": "replace", "path": "/a/b", "value": 3}],
    [{"op": "remove", "path": "/x"}, {"op": "move", "path": "/y", "from": "/z"}])

add("plain_geojson_point", "structured-output",
    obj({"type": {"const": "Feature"}, "geometry": obj({"type": {"const": "Point"},
                                                        "coordinates": arr(n(), minItems=2, maxItems=3)},
                                                       ["type", "coordinates"], False),
         "properties": obj({"name": s()}, [], True)}, ["type", "geometry", "properties"], False),
    {"type": "Feature", "geometry": {"type": "Point", "coordinates": [2.35, 48.85]},
     "properties": {"name": "Paris", "pop": 2100000}})

add("plain_calendar_free_slots", "structured-output",
    obj({"slots": arr(obj({"start": s(format="date-time"), "end": s(format="date-time")}, ["start", "end"], False),
                      maxItems=10), "timezone": s()}, ["slots", "timezone"], False),
    {"slots": [{"start": "2025-02-03T10:00:00Z", "end": "2025-02-03T10:30:00Z"}], "timezone": "UTC"})

add("plain_address_validation", "structured-output",
    obj({"valid": b(), "normalized": {"type": ["object", "null"], "properties": {
        "line1": s(), "line2": {"type": ["string", "null"]}, "city": s(), "region": s(),
        "postal_code": s(), "country": s(pattern="^[A-Z]{2}$")},
        "required": ["line1", "line2", "city", "region", "postal_code", "country"], "additionalProperties": False},
         "issues": arr(s())}, ["valid", "normalized", "issues"], False),
    {"valid": True, "normalized": {"line1": "350 Fifth Ave", "line2": None, "city": "New York", "region": "NY",
                                   "postal_code": "10118", "country": "US"}, "issues": []},
    {"valid": False, "normalized": None, "issues": ["unknown street"]})

add("plain_log_event", "structured-output",
    obj({"timestamp": s(format="date-time"), "level": e(["DEBUG", "INFO", "WARN", "ERROR"]), "service": s(),
         "message": s(), "host_ip": s(format="ipv4"), "trace_id": s(pattern="^[0-9a-f]{32}$"),
         "attributes": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}},
        ["timestamp", "level", "service", "message"], False),
    {"timestamp": "2025-01-01T00:00:00.001Z", "level": "ERROR", "service": "api", "message": "timeout",
     "host_ip": "10.0.3.17", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "attributes": {"retry": 2}})

add("plain_network_rule", "structured-output",
    obj({"action": e(["allow", "deny"]), "protocol": e(["tcp", "udp", "icmp", "any"]),
         "source": s(format="ipv4"), "destination": {"anyOf": [{"type": "string", "format": "ipv4"},
                                                               {"type": "string", "format": "ipv6"}]},
         "port_range": obj({"from": i(minimum=1, maximum=65535), "to": i(minimum=1, maximum=65535)},
                           ["from", "to"], False)}, ["action", "protocol", "source", "destination"], False),
    {"action": "allow", "protocol": "tcp", "source": "192.168.1.10", "destination": "2001:db8::1",
     "port_range": {"from": 443, "to": 443}},
    {"action": "deny", "protocol": "any", "source": "0.0.0.0", "destination": "10.0.0.1"})

add("plain_dns_record", "structured-output",
    obj({"name": s(format="hostname"), "type": e(["A", "AAAA", "CNAME", "TXT", "MX"]), "ttl": i(minimum=60,
                                                                                                maximum=86400),
         "value": s()}, ["name", "type", "ttl", "value"], False),
    {"name": "www.example.com", "type": "CNAME", "ttl": 300, "value": "example.com."})

add("plain_color_palette", "structured-output",
    obj({"colors": arr(s(pattern="^#[0-9a-fA-F]{6}$"), minItems=2, maxItems=8), "name": s(maxLength=40)},
        ["colors", "name"], False),
    {"colors": ["#1a2b3c", "#FFFFFF"], "name": "Night"})

add("plain_version_bump", "structured-output",
    obj({"version": s(pattern="^(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)$"),
         "bump": e(["major", "minor", "patch"]), "changelog": arr(s(), minItems=1)},
        ["version", "bump", "changelog"], False),
    {"version": "1.12.0", "bump": "minor", "changelog": ["Add --json flag"]})

add("plain_quiz", "structured-output",
    obj({"questions": arr(obj({"question": s(), "choices": arr(s(), minItems=2, maxItems=6),
                               "answer_index": i(minimum=0, maximum=5), "difficulty": i(minimum=1, maximum=3)},
                              ["question", "choices", "answer_index"], False), minItems=1, maxItems=10)},
        ["questions"], False),
    {"questions": [{"question": "2+2?", "choices": ["3", "4"], "answer_index": 1, "difficulty": 1}]})

add("plain_matrix", "structured-output",
    obj({"rows": i(minimum=1, maximum=4), "cols": i(minimum=1, maximum=4),
         "data": arr(arr(n(), minItems=1, maxItems=4), minItems=1, maxItems=4)}, ["rows", "cols", "data"], False),
    {"rows": 2, "cols": 2, "data": [[1, 0], [0, 1]]})

add("plain_filesystem_tree", "structured-output-recursive",
    {"$defs": {"entry": {"type": "object", "properties": {
        "name": {"type": "string"}, "kind": {"enum": ["file", "dir"]},
        "size": {"type": "integer", "minimum": 0},
        "children": {"type": "array", "items": {"$ref": "#/$defs/entry"}}},
        "required": ["name", "kind"], "additionalProperties": False}},
     "$ref": "#/$defs/entry"},
    {"name": "/", "kind": "dir", "children": [{"name": "a.txt", "kind": "file", "size": 12},
                                              {"name": "sub", "kind": "dir", "children": []}]})

add("plain_org_chart", "structured-output-recursive",
    {"definitions": {"employee": {"type": "object", "properties": {
        "name": {"type": "string"}, "title": {"type": "string"},
        "reports": {"type": "array", "items": {"$ref": "#/definitions/employee"}, "maxItems": 10}},
        "required": ["name", "title", "reports"], "additionalProperties": False}},
     "type": "object", "properties": {"ceo": {"$ref": "#/definitions/employee"}}, "required": ["ceo"],
     "additionalProperties": False},
    {"ceo": {"name": "Ann", "title": "CEO", "reports": [{"name": "Bo", "title": "CTO", "reports": []}]}})

add("plain_expression_ast", "structured-output-recursive",
    {"$defs": {"expr": {"oneOf": [
        {"type": "object", "properties": {"num": {"type": "number"}}, "required": ["num"],
         "additionalProperties": False},
        {"type": "object", "properties": {"op": {"enum": ["+", "-", "*", "/"]},
                                          "left": {"$ref": "#/$defs/expr"}, "right": {"$ref": "#/$defs/expr"}},
         "required": ["op", "left", "right"], "additionalProperties": False}]}},
     "$ref": "#/$defs/expr"},
    {"op": "+", "left": {"num": 1}, "right": {"op": "*", "left": {"num": 2}, "right": {"num": 3.5}}}, {"num": -1})

add("plain_feature_flags", "structured-output",
    obj({"flags": {"type": "object", "additionalProperties": obj({"enabled": b(), "rollout": i(minimum=0,
                                                                                                 maximum=100)},
                                                                 ["enabled"], False)}}, ["flags"], False),
    {"flags": {"new_ui": {"enabled": True, "rollout": 25}, "beta": {"enabled": False}}})

add("plain_health_metrics", "structured-output",
    obj({"date": s(format="date"), "steps": i(minimum=0, maximum=200000),
         "heart_rate": obj({"resting": i(minimum=20, maximum=220), "max": i(minimum=20, maximum=250)}, ["resting"],
                           False),
         "sleep_hours": n(minimum=0, maximum=24), "weight_kg": {"type": ["number", "null"], "exclusiveMinimum": 0,
                                                                 "maximum": 500}},
        ["date", "steps"], False),
    {"date": "2025-03-03", "steps": 8123, "heart_rate": {"resting": 58, "max": 171}, "sleep_hours": 7.25,
     "weight_kg": 71.4}, {"date": "2025-03-04", "steps": 0})

add("plain_invoice_totals_strict_numbers", "structured-output",
    obj({"subtotal_cents": i(minimum=0), "tax_rate_percent": n(minimum=0, maximum=100),
         "discount_cents": i(minimum=0, maximum=1000000), "total_cents": i(minimum=0)},
        ["subtotal_cents", "tax_rate_percent", "discount_cents", "total_cents"], False),
    {"subtotal_cents": 12000, "tax_rate_percent": 8.25, "discount_cents": 0, "total_cents": 12990})

add("plain_multiple_of_quantities", "structured-output",
    obj({"pack_size": i(minimum=0, maximum=120, multipleOf=6), "percent": i(minimum=0, maximum=100, multipleOf=5),
         "unit": {"const": "boxes"}}, ["pack_size", "percent", "unit"], False),
    {"pack_size": 24, "percent": 35, "unit": "boxes"})

add("plain_uri_list", "structured-output",
    obj({"links": arr(obj({"href": s(format="uri"), "rel": e(["self", "next", "prev", "related"]),
                           "title": s()}, ["href", "rel"], False), maxItems=20)}, ["links"], False),
    {"links": [{"href": "https://api.example.com/items?page=3", "rel": "next"},
               {"href": "urn:isbn:0451450523", "rel": "related", "title": "A book"}]})

add("plain_uuid_refs", "structured-output",
    obj({"ids": arr(s(format="uuid"), minItems=1, uniqueItems=False), "primary": s(format="uuid")},
        ["ids", "primary"], False),
    {"ids": ["123e4567-e89b-12d3-a456-426614174000"], "primary": "123e4567-e89b-12d3-a456-426614174000"})

add("plain_tagged_union_oneof", "structured-output",
    {"oneOf": [obj({"shape": {"const": "circle"}, "radius": n(exclusiveMinimum=0)}, ["shape", "radius"], False),
               obj({"shape": {"const": "rect"}, "w": n(exclusiveMinimum=0), "h": n(exclusiveMinimum=0)},
                   ["shape", "w", "h"], False),
               obj({"shape": {"const": "polygon"}, "points": arr(arr(n(), minItems=2, maxItems=2), minItems=3)},
                   ["shape", "points"], False)]},
    {"shape": "circle", "radius": 2}, {"shape": "rect", "w": 3, "h": 4.5},
    {"shape": "polygon", "points": [[0, 0], [1, 0], [0, 1]]})

add("plain_type_list_scalars", "structured-output",
    obj({"value": {"type": ["string", "integer", "boolean", "null"]}, "unit": {"type": ["string", "null"],
                                                                               "maxLength": 10}},
        ["value", "unit"], False),
    {"value": 5, "unit": "kg"}, {"value": None, "unit": None}, {"value": "n/a", "unit": None},
    {"value": True, "unit": "flag"})

add("plain_const_version", "structured-output",
    obj({"schema_version": {"const": 2}, "kind": {"const": "report"}, "payload": obj({"rows": arr(
        arr({"type": ["string", "number", "null"]}))}, ["rows"], False)}, ["schema_version", "kind", "payload"],
        False),
    {"schema_version": 2, "kind": "report", "payload": {"rows": [["a", 1, None], []]}})

add("plain_allof_mixin", "structured-output-allOf",
    {"$defs": {"Timestamps": {"type": "object", "properties": {"created_at": {"type": "string",
                                                                              "format": "date-time"},
                                                               "updated_at": {"type": "string",
                                                                              "format": "date-time"}},
                              "required": ["created_at"]},
               "Named": {"type": "object", "properties": {"name": {"type": "string", "minLength": 1}},
                         "required": ["name"]}},
     "allOf": [{"$ref": "#/$defs/Named"}, {"$ref": "#/$defs/Timestamps"},
               {"properties": {"id": {"type": "integer", "minimum": 1}}, "required": ["id"]}]},
    {"name": "widget", "created_at": "2025-01-01T00:00:00Z", "id": 7},
    {"name": "gadget", "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-02T00:00:00Z", "id": 8,
     "extra": True})

add("plain_anyof_required_variants", "structured-output-anyOf",
    {"type": "object", "properties": {"email": {"type": "string", "format": "email"},
                                      "phone": {"type": "string", "pattern": "^\\+[1-9][0-9]{6,14}$"},
                                      "name": {"type": "string"}},
     "additionalProperties": False, "anyOf": [{"required": ["email"]}, {"required": ["phone"]}]},
    {"email": "a@b.io"}, {"phone": "+4915112345678", "name": "Max"},
    {"email": "x@y.co", "phone": "+12025550123"})

add("draft07_mcp_style_full", "zod-mcp",
    {"$schema": DRAFT7, "type": "object", "properties": {
        "owner": {"type": "string", "description": "Repository owner"},
        "repo": {"type": "string"}, "state": {"type": "string", "enum": ["open", "closed", "all"]},
        "labels": {"type": "array", "items": {"type": "string"}},
        "sort": {"type": "string", "enum": ["created", "updated", "comments"]},
        "direction": {"type": "string", "enum": ["asc", "desc"]},
        "since": {"type": "string", "format": "date-time"},
        "page": {"type": "number", "minimum": 1}, "perPage": {"type": "number", "minimum": 1, "maximum": 100}},
     "required": ["owner", "repo"], "additionalProperties": False},
    {"owner": "rust-lang", "repo": "rust", "state": "open", "labels": ["C-bug"], "page": 1, "perPage": 50},
    {"owner": "a", "repo": "b"})

add("draft2020_explicit", "plain-2020",
    {"$schema": DRAFT2020, "$id": "https://example.com/schemas/shipment", "type": "object",
     "properties": {"tracking": {"type": "string", "pattern": "^[A-Z0-9]{10,22}$"},
                    "carrier": {"enum": ["ups", "fedex", "dhl", "usps"]},
                    "weight": {"$ref": "#/$defs/weight"},
                    "dims": {"type": "array", "prefixItems": [{"$ref": "#/$defs/cm"}, {"$ref": "#/$defs/cm"},
                                                              {"$ref": "#/$defs/cm"}], "items": False,
                             "minItems": 3}},
     "required": ["tracking", "carrier"], "additionalProperties": False,
     "$defs": {"weight": {"type": "object", "properties": {"value": {"type": "number", "exclusiveMinimum": 0},
                                                           "unit": {"enum": ["kg", "lb"]}},
                          "required": ["value", "unit"], "additionalProperties": False},
               "cm": {"type": "number", "minimum": 0, "maximum": 300}}},
    {"tracking": "1Z999AA10123456784", "carrier": "ups", "weight": {"value": 2.2, "unit": "kg"},
     "dims": [30, 20, 10.5]},
    {"tracking": "ABCDEFGHIJ", "carrier": "dhl"})

add("draft2020_anchor", "plain-2020",
    {"$schema": DRAFT2020, "type": "array", "items": {"$ref": "#money"}, "maxItems": 5,
     "$defs": {"money": {"$anchor": "money", "type": "object",
                         "properties": {"amount": {"type": "string", "pattern": "^-?[0-9]+\\.[0-9]{2}$"},
                                        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"}},
                         "required": ["amount", "currency"], "additionalProperties": False}}},
    [{"amount": "10.00", "currency": "USD"}, {"amount": "-3.50", "currency": "EUR"}], [])

# ---- many small real-world tool shapes -------------------------------------

SMALL = [
    ("get_current_time", obj({"timezone": s("IANA timezone name")}, ["timezone"], False),
     [{"timezone": "Europe/Paris"}]),
    ("get_user_profile", obj({"user_id": s(pattern="^u_[0-9a-z]{8}$")}, ["user_id"], False),
     [{"user_id": "u_1a2b3c4d"}]),
    ("list_files", obj({"directory": s(), "show_hidden": b()}, ["directory"], False),
     [{"directory": "~"}, {"directory": "/", "show_hidden": True}]),
    ("delete_file", obj({"path": s(), "force": b()}, ["path", "force"], False), [{"path": "/tmp/x", "force": False}]),
    ("rename_file", obj({"from": s(), "to": s()}, ["from", "to"], False), [{"from": "a.txt", "to": "b.txt"}]),
    ("create_todo", obj({"title": s(maxLength=100), "due": s(format="date"), "priority": i(minimum=1, maximum=4)},
                        ["title"], False), [{"title": "Buy milk"}, {"title": "Taxes", "due": "2025-04-15",
                                                                    "priority": 1}]),
    ("complete_todo", obj({"id": i(minimum=1)}, ["id"], False), [{"id": 99}]),
    ("add_note", obj({"text": s(minLength=1), "tags": arr(s(maxLength=20), maxItems=5), "pinned": b()},
                     ["text"], False), [{"text": "Call mom"}, {"text": "idea", "tags": ["work"], "pinned": True}]),
    ("set_alarm", obj({"time": s(pattern="^([01][0-9]|2[0-3]):[0-5][0-9]$"), "label": s(),
                       "repeat": arr(e(["mon", "tue", "wed", "thu", "fri", "sat", "sun"]), maxItems=7)},
                      ["time"], False), [{"time": "06:45", "repeat": ["mon", "fri"]}]),
    ("set_timer", obj({"seconds": i(minimum=1, maximum=86400), "label": s()}, ["seconds"], False),
     [{"seconds": 300, "label": "tea"}]),
    ("toggle_light", obj({"room": s(), "on": b(), "brightness": i(minimum=0, maximum=100),
                          "color_temp_k": i(minimum=2000, maximum=6500)}, ["room", "on"], False),
     [{"room": "kitchen", "on": True, "brightness": 80}, {"room": "hall", "on": False}]),
    ("lock_door", obj({"door": e(["front", "back", "garage"]), "locked": b()}, ["door", "locked"], False),
     [{"door": "front", "locked": True}]),
    ("get_directions", obj({"origin": s(), "destination": s(), "mode": e(["driving", "walking", "bicycling",
                                                                          "transit"]),
                            "avoid": arr(e(["tolls", "highways", "ferries"]))}, ["origin", "destination"], False),
     [{"origin": "Union Square", "destination": "SFO", "mode": "transit"}]),
    ("find_restaurants", obj({"near": s(), "cuisine": s(), "price_level": i(minimum=1, maximum=4),
                              "open_now": b(), "min_rating": n(minimum=0, maximum=5)}, ["near"], False),
     [{"near": "Soho, London", "cuisine": "thai", "min_rating": 4.2}]),
    ("book_table", obj({"restaurant": s(), "date": s(format="date"), "time": s(pattern="^[0-2][0-9]:[0-5][0-9]$"),
                        "party_size": i(minimum=1, maximum=20), "phone": s(pattern="^\\+?[0-9 ()-]{7,20}$")},
                       ["restaurant", "date", "time", "party_size"], False),
     [{"restaurant": "Chez Nous", "date": "2025-02-14", "time": "19:30", "party_size": 2,
       "phone": "+1 (555) 010-9999"}]),
    ("hotel_search", obj({"city": s(), "check_in": s(format="date"), "check_out": s(format="date"),
                          "guests": i(minimum=1, maximum=10), "max_price": n(minimum=0),
                          "amenities": arr(e(["wifi", "pool", "gym", "parking", "breakfast"]))},
                         ["city", "check_in", "check_out"], False),
     [{"city": "Rome", "check_in": "2025-07-01", "check_out": "2025-07-05", "guests": 2,
       "amenities": ["wifi", "breakfast"]}]),
    ("ride_request", obj({"pickup": obj({"lat": n(minimum=-90, maximum=90), "lng": n(minimum=-180, maximum=180)},
                                        ["lat", "lng"], False),
                          "dropoff": obj({"lat": n(minimum=-90, maximum=90), "lng": n(minimum=-180, maximum=180)},
                                         ["lat", "lng"], False),
                          "tier": e(["economy", "comfort", "xl"])}, ["pickup", "dropoff"], False),
     [{"pickup": {"lat": 40.7128, "lng": -74.006}, "dropoff": {"lat": 40.6413, "lng": -73.7781}, "tier": "xl"}]),
    ("transfer_money", obj({"from_account": s(pattern="^[0-9]{8,12}$"), "to_iban": s(pattern="^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$"),
                            "amount": n(exclusiveMinimum=0, maximum=100000), "currency": e(["EUR", "USD", "GBP"]),
                            "reference": s(maxLength=140)}, ["from_account", "to_iban", "amount", "currency"], False),
     [{"from_account": "12345678", "to_iban": "DE89370400440532013000", "amount": 250.5, "currency": "EUR",
       "reference": "Rent March"}]),
    ("get_balance", obj({"account_id": s()}, ["account_id"], False), [{"account_id": "chk-001"}]),
    ("crypto_price", obj({"symbol": s(pattern="^[A-Z]{2,6}$"), "vs_currency": s(pattern="^[a-z]{3}$")},
                         ["symbol"], False), [{"symbol": "BTC", "vs_currency": "usd"}]),
    ("news_headlines", obj({"topic": e(["world", "business", "technology", "sports", "science", "health"]),
                            "country": s(pattern="^[a-z]{2}$"), "page_size": i(minimum=1, maximum=100)}, [], False),
     [{}, {"topic": "science", "country": "us", "page_size": 10}]),
    ("sports_scores", obj({"league": e(["nba", "nfl", "mlb", "nhl", "epl"]), "date": s(format="date"),
                           "team": s()}, ["league"], False), [{"league": "epl", "date": "2025-03-15"}]),
    ("movie_search", obj({"title": s(), "year": i(minimum=1888, maximum=2100), "genre": s()}, ["title"], False),
     [{"title": "Arrival", "year": 2016}]),
    ("podcast_episodes", obj({"feed_url": s(format="uri"), "limit": i(minimum=1, maximum=50)}, ["feed_url"], False),
     [{"feed_url": "https://feeds.example.com/show.xml", "limit": 5}]),
    ("spotify_queue", obj({"track_uri": s(pattern="^spotify:track:[A-Za-z0-9]{22}$")}, ["track_uri"], False),
     [{"track_uri": "spotify:track:4uLU6hMCjMI75M1A2tKUQC"}]),
    ("youtube_search", obj({"q": s(), "max_results": i(minimum=1, maximum=50), "order": e(["relevance", "date",
                                                                                           "viewCount"])},
                           ["q"], False), [{"q": "cmake tutorial", "order": "viewCount"}]),
    ("jira_transition", obj({"issue_key": s(pattern="^[A-Z][A-Z0-9]+-[0-9]+$"),
                             "transition": e(["To Do", "In Progress", "In Review", "Done"]), "comment": s()},
                            ["issue_key", "transition"], False), [{"issue_key": "PROJ-123", "transition": "Done"}]),
    ("confluence_page", obj({"space": s(pattern="^[A-Z]+$"), "title": s(), "body_markdown": s(),
                             "parent_id": {"type": ["string", "null"]}}, ["space", "title", "body_markdown"], False),
     [{"space": "ENG", "title": "Runbook", "body_markdown": "# Steps\n1. ...", "parent_id": None}]),
    ("notion_query", obj({"database_id": s(format="uuid"), "filter": obj({"property": s(), "equals": s()},
                                                                        ["property", "equals"], False),
                          "page_size": i(minimum=1, maximum=100)}, ["database_id"], False),
     [{"database_id": "a1b2c3d4-e5f6-4789-a0b1-c2d3e4f5a6b7", "filter": {"property": "Status", "equals": "Done"}}]),
    ("salesforce_lead", obj({"first_name": s(), "last_name": s(minLength=1), "company": s(minLength=1),
                             "email": s(format="email"), "lead_source": e(["Web", "Phone", "Partner", "Other"]),
                             "annual_revenue": n(minimum=0)}, ["last_name", "company"], False),
     [{"first_name": "Ana", "last_name": "Silva", "company": "Loja", "email": "ana@loja.br", "lead_source": "Web"}]),
    ("hubspot_deal", obj({"name": s(), "amount": n(minimum=0), "stage": e(["appointmentscheduled",
                                                                           "qualifiedtobuy", "closedwon",
                                                                           "closedlost"]),
                          "close_date": s(format="date")}, ["name", "stage"], False),
     [{"name": "Enterprise renewal", "amount": 120000, "stage": "closedwon", "close_date": "2025-06-30"}]),
    ("stripe_refund", obj({"charge_id": s(pattern="^ch_[A-Za-z0-9]{14,}$"), "amount": i(minimum=1),
                           "reason": e(["duplicate", "fraudulent", "requested_by_customer"])}, ["charge_id"], False),
     [{"charge_id": "ch_3MmlLrLkdIwHu7ix0snN0B15", "amount": 500, "reason": "requested_by_customer"}]),
    ("aws_s3_put", obj({"bucket": s(pattern="^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"), "key": s(minLength=1,
                                                                                           maxLength=1024),
                        "content_type": s(), "acl": e(["private", "public-read"])}, ["bucket", "key"], False),
     [{"bucket": "my-logs", "key": "2025/01/01/app.log", "content_type": "text/plain", "acl": "private"}]),
    ("gcp_vm_create", obj({"name": s(pattern="^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"), "zone": s(),
                           "machine_type": s(), "disk_gb": i(minimum=10, maximum=65536), "preemptible": b()},
                          ["name", "zone", "machine_type"], False),
     [{"name": "worker-1", "zone": "us-central1-a", "machine_type": "e2-standard-4", "disk_gb": 100}]),
    ("docker_run", obj({"image": s(), "name": s(), "ports": arr(s(pattern="^[0-9]{1,5}:[0-9]{1,5}(/(tcp|udp))?$")),
                        "env": {"type": "object", "additionalProperties": {"type": "string"}},
                        "detach": b()}, ["image"], False),
     [{"image": "nginx:1.27", "ports": ["8080:80"], "env": {"TZ": "UTC"}, "detach": True}]),
    ("terraform_plan", obj({"workspace": s(), "vars": {"type": "object", "additionalProperties": {
        "type": ["string", "number", "boolean"]}}, "target": arr(s())}, ["workspace"], False),
     [{"workspace": "staging", "vars": {"replicas": 3, "region": "eu-west-1"}}]),
    ("prometheus_query", obj({"query": s(minLength=1), "start": s(format="date-time"), "end": s(format="date-time"),
                              "step": s(pattern="^[0-9]+[smhd]$")}, ["query"], False),
     [{"query": "rate(http_requests_total[5m])", "start": "2025-01-01T00:00:00Z", "end": "2025-01-01T01:00:00Z",
       "step": "30s"}]),
    ("pagerduty_ack", obj({"incident_id": s(pattern="^P[A-Z0-9]{6}$"), "note": s()}, ["incident_id"], False),
     [{"incident_id": "PT4KHLK", "note": "looking"}]),
    ("send_sms", obj({"to": s(pattern="^\\+[1-9][0-9]{7,14}$"), "body": s(maxLength=160)}, ["to", "body"], False),
     [{"to": "+14155552671", "body": "Your code is 123456"}]),
    ("whatsapp_template", obj({"to": s(), "template": s(), "language": s(pattern="^[a-z]{2}(_[A-Z]{2})?$"),
                               "params": arr(s(), maxItems=10)}, ["to", "template", "language"], False),
     [{"to": "+447700900123", "template": "order_update", "language": "en_GB", "params": ["#123", "shipped"]}]),
    ("summarize_document", obj({"document_id": s(), "max_words": i(minimum=10, maximum=1000),
                                "style": e(["bullet", "paragraph", "tl;dr"])}, ["document_id"], False),
     [{"document_id": "doc-42", "max_words": 120, "style": "tl;dr"}]),
    ("image_caption", obj({"image_url": s(format="uri"), "detail": e(["low", "high", "auto"])}, ["image_url"], False),
     [{"image_url": "https://cdn.example.com/cat.jpg", "detail": "low"}]),
    ("ocr_document", obj({"file_id": s(), "pages": arr(i(minimum=1), maxItems=100), "language_hints": arr(s())},
                         ["file_id"], False), [{"file_id": "f-9", "pages": [1, 2, 3]}]),
    ("speech_to_text", obj({"audio_url": s(format="uri"), "language": s(), "diarize": b(),
                            "speakers": i(minimum=1, maximum=10)}, ["audio_url"], False),
     [{"audio_url": "https://x.io/a.mp3", "diarize": True, "speakers": 2}]),
    ("text_to_speech", obj({"text": s(maxLength=5000), "voice": e(["alloy", "echo", "fable", "onyx", "nova",
                                                                   "shimmer"]),
                            "speed": n(minimum=0.25, maximum=4)}, ["text", "voice"], False),
     [{"text": "Hello!", "voice": "nova", "speed": 1.25}]),
    ("embedding_search", obj({"collection": s(), "query": s(), "k": i(minimum=1, maximum=100),
                              "score_threshold": n(minimum=0, maximum=1)}, ["collection", "query"], False),
     [{"collection": "docs", "query": "refund policy", "k": 8, "score_threshold": 0.35}]),
    ("unit_convert", obj({"value": n(), "from_unit": s(), "to_unit": s()}, ["value", "from_unit", "to_unit"], False),
     [{"value": -40, "from_unit": "C", "to_unit": "F"}, {"value": 1e-3, "from_unit": "km", "to_unit": "m"}]),
    ("random_number", obj({"min": i(), "max": i(), "count": i(minimum=1, maximum=100)}, ["min", "max"], False),
     [{"min": 1, "max": 6, "count": 2}]),
    ("dice_roll", obj({"notation": s(pattern="^[1-9][0-9]?d(4|6|8|10|12|20|100)([+-][0-9]+)?$")}, ["notation"],
                      False), [{"notation": "3d6+2"}]),
    ("timezone_meeting", obj({"participants": arr(obj({"name": s(), "timezone": s()}, ["name", "timezone"], False),
                                                  minItems=2, maxItems=20),
                              "duration_minutes": e([15, 30, 45, 60], typ="integer")},
                             ["participants", "duration_minutes"], False),
     [{"participants": [{"name": "A", "timezone": "UTC"}, {"name": "B", "timezone": "Asia/Kolkata"}],
       "duration_minutes": 30}]),
    ("grade_essay", obj({"score": i(minimum=0, maximum=10), "rubric": obj({"clarity": i(minimum=0, maximum=5),
                                                                           "evidence": i(minimum=0, maximum=5),
                                                                           "grammar": i(minimum=0, maximum=5)},
                                                                          ["clarity", "evidence", "grammar"], False),
                         "feedback": s(maxLength=2000)}, ["score", "rubric", "feedback"], False),
     [{"score": 8, "rubric": {"clarity": 4, "evidence": 4, "grammar": 5}, "feedback": "Strong thesis."}]),
    ("flashcards", obj({"deck": s(), "cards": arr(obj({"front": s(), "back": s()}, ["front", "back"], False),
                                                  minItems=1, maxItems=50)}, ["deck", "cards"], False),
     [{"deck": "Spanish", "cards": [{"front": "perro", "back": "dog"}]}]),
    ("workout_plan", obj({"days": arr(obj({"day": e(["mon", "tue", "wed", "thu", "fri", "sat", "sun"]),
                                          "exercises": arr(obj({"name": s(), "sets": i(minimum=1, maximum=10),
                                                                "reps": i(minimum=1, maximum=100)},
                                                               ["name", "sets", "reps"], False))},
                                         ["day", "exercises"], False), maxItems=7)}, ["days"], False),
     [{"days": [{"day": "mon", "exercises": [{"name": "squat", "sets": 5, "reps": 5}]}]}]),
    ("meal_log", obj({"meal": e(["breakfast", "lunch", "dinner", "snack"]), "foods": arr(obj({
        "name": s(), "calories": i(minimum=0, maximum=5000), "protein_g": n(minimum=0)}, ["name", "calories"],
        False))}, ["meal", "foods"], False),
     [{"meal": "lunch", "foods": [{"name": "salad", "calories": 320, "protein_g": 12.5}]}]),
    ("legal_clause_extract", obj({"clauses": arr(obj({"type": e(["termination", "liability", "confidentiality",
                                                                 "payment", "governing_law"]),
                                                      "text": s(), "page": i(minimum=1)}, ["type", "text"],
                                                     False))}, ["clauses"], False),
     [{"clauses": [{"type": "governing_law", "text": "laws of Delaware", "page": 12}]}]),
    ("support_triage", obj({"category": e(["billing", "bug", "feature_request", "account", "other"]),
                            "urgency": e(["low", "medium", "high", "critical"]),
                            "language": s(pattern="^[a-z]{2}$"), "summary": s(maxLength=280),
                            "needs_human": b()}, ["category", "urgency", "summary", "needs_human"], False),
     [{"category": "billing", "urgency": "high", "language": "de", "summary": "Double charge", "needs_human": True}]),
    ("ab_test_result", obj({"variant_a": obj({"visitors": i(minimum=0), "conversions": i(minimum=0)},
                                             ["visitors", "conversions"], False),
                            "variant_b": obj({"visitors": i(minimum=0), "conversions": i(minimum=0)},
                                             ["visitors", "conversions"], False),
                            "p_value": n(minimum=0, maximum=1), "winner": {"enum": ["a", "b", None]}},
                           ["variant_a", "variant_b", "p_value", "winner"], False),
     [{"variant_a": {"visitors": 1000, "conversions": 50}, "variant_b": {"visitors": 1000, "conversions": 72},
       "p_value": 0.031, "winner": "b"}]),
    ("chart_spec", obj({"kind": e(["line", "bar", "pie", "scatter"]), "title": s(),
                        "series": arr(obj({"name": s(), "points": arr(arr(n(), minItems=2, maxItems=2))},
                                          ["name", "points"], False), minItems=1)}, ["kind", "series"], False),
     [{"kind": "line", "title": "Latency", "series": [{"name": "p50", "points": [[0, 1.5], [1, 1.7]]}]}]),
]

for name, schema, instances in SMALL:
    add(name, "tool", schema, *instances)


def main():
    names = set()
    for entry in CORPUS:
        assert entry["name"] not in names, entry["name"]
        names.add(entry["name"])
        sys.stdout.write(json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"{len(CORPUS)} schemas, {sum(len(c['instances']) for c in CORPUS)} instances", file=sys.stderr)


if __name__ == "__main__":
    main()

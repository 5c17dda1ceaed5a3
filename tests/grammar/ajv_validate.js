// Validates JSON texts against JSON Schemas with ajv (and ajv-formats), for
// tests/grammar/json_schema_walk_test.cc: the independent validator of what
// the grammars generate.
//
//   node ajv_validate.js NODE_MODULES INPUT.jsonl > OUTPUT.jsonl
//
// Each input line: {"schema": <schema>, "text": "<the generated JSON text>"}.
// Each output line: {"ok": true} or {"ok": false, "error": "..."}. The draft
// follows the schema's $schema: draft-04 (ajv-draft-04), draft-06/07 (Ajv),
// anything else 2020-12 (Ajv2020). Formats are asserted (ajv-formats, full).
"use strict";
const fs = require("fs");
const path = require("path");

const modules = process.argv[2];
const load = (name) => require(path.join(modules, name));
const Ajv2020 = load("ajv/dist/2020").default;
const Ajv07 = load("ajv").default;
const AjvDraft04 = load("ajv-draft-04").default;
const addFormats = load("ajv-formats").default;

const options = { strict: false, allErrors: false, validateSchema: false };
const ajvs = {
  "2020": addFormats(new Ajv2020(options)),
  "07": addFormats(new Ajv07(options)),
  "04": addFormats(new AjvDraft04(options)),
};

function draftOf(schema) {
  const s = schema && typeof schema === "object" ? String(schema.$schema || "") : "";
  if (s.includes("draft-04")) return "04";
  if (s.includes("draft-06") || s.includes("draft-07")) return "07";
  return "2020";
}

const compiled = new Map();
const out = [];
for (const line of fs.readFileSync(process.argv[3], "utf8").split("\n")) {
  if (!line) continue;
  const { schema, text } = JSON.parse(line);
  const key = JSON.stringify(schema);
  let validate = compiled.get(key);
  try {
    if (!validate) {
      validate = ajvs[draftOf(schema)].compile(schema);
      compiled.set(key, validate);
    }
  } catch (e) {
    out.push(JSON.stringify({ ok: false, error: "ajv cannot compile the schema: " + e.message }));
    continue;
  }
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    out.push(JSON.stringify({ ok: false, error: "not JSON: " + e.message }));
    continue;
  }
  if (validate(value)) {
    out.push(JSON.stringify({ ok: true }));
  } else {
    out.push(JSON.stringify({ ok: false, error: JSON.stringify(validate.errors) }));
  }
}
process.stdout.write(out.join("\n") + "\n");

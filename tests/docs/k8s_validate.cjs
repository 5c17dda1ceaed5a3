// Validates Kubernetes objects against the Kubernetes API's published OpenAPI
// schemas, as the npm package kubernetes-models carries them (one JSON schema
// per definition, registered with its own ajv; scripts/fetch-k8s-schemas.sh).
// Strict as `kubectl --validate=strict` is: a field the schema does not define
// is an error (the package's schemas allow them, as the API server does).
//
//   node k8s_validate.cjs NODE_MODULES < objects.json
//
// stdin: [{"where": "file:doc 1", "object": {...}}, or with "schema":
// "io.k8s.api.core.v1.PodTemplateSpec" for a fragment]. stdout: one JSON list,
// [{"where", "schema", "errors": ["/spec/x: must NOT have additional properties (x)", ...]}].
"use strict";
const fs = require("fs");
const path = require("path");

const modules = process.argv[2];
const validateModule = require(path.join(modules, "@kubernetes-models/validate"));

// Every object schema that lists its properties admits no others.
function strict(schema) {
  if (Array.isArray(schema)) return schema.map(strict);
  if (schema === null || typeof schema !== "object") return schema;
  const out = {};
  for (const [k, v] of Object.entries(schema)) out[k] = k === "properties" ? mapValues(v, strict) : strict(v);
  if (out.properties && !("additionalProperties" in out)) out.additionalProperties = false;
  return out;
}
function mapValues(o, f) {
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, f(v)]));
}
const register = validateModule.register;
validateModule.register = (id, schema) => register(id, strict(schema));

// "io.k8s.api.apps.v1.Deployment" from apiVersion "apps/v1" and kind "Deployment".
function schemaId(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["core", apiVersion];
  if (group.includes(".") && !group.endsWith(".k8s.io")) return null;  // a custom resource
  return `io.k8s.api.${group.split(".")[0]}.${version}.${kind}`;
}

// IoK8sApiAppsV1Deployment.js, in kubernetes-models or @kubernetes-models/apimachinery.
function addSchema(id) {
  const file = id.split(".").map((w) => w[0].toUpperCase() + w.slice(1)).join("") + ".js";
  for (const pkg of ["kubernetes-models", "@kubernetes-models/apimachinery"]) {
    const p = path.join(modules, pkg, "_schemas", file);
    if (fs.existsSync(p)) {
      require(p).addSchema();
      return true;
    }
  }
  return false;
}

function check(item) {
  const obj = item.object || {};
  const id = item.schema || (obj.apiVersion && obj.kind ? schemaId(obj.apiVersion, obj.kind) : null);
  if (!id) return {where: item.where, schema: null, errors: [`no Kubernetes schema for apiVersion ${obj.apiVersion} kind ${obj.kind}`]};
  if (!addSchema(id)) return {where: item.where, schema: id, errors: [`kubernetes-models has no schema ${id}`]};
  try {
    validateModule.validate(id, obj);
    return {where: item.where, schema: id, errors: []};
  } catch (e) {
    const errors = (e.errors || [{instancePath: "", message: String(e)}]).map((x) => {
      const extra = x.params && x.params.additionalProperty ? ` (${x.params.additionalProperty})` : "";
      return `${x.instancePath || "/"}: ${x.message}${extra}`;
    });
    return {where: item.where, schema: id, errors};
  }
}

const items = JSON.parse(fs.readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(items.map(check)) + "\n");

// Node half of bench/tokenizer_bench: encodes the same documents with
// @lenml/tokenizers (the reference) and prints {"seconds": [...], "tokens": N}.
//
//   node tokenizer_bench.js NODE_MODULES TOKENIZER_JSON TOKENIZER_CONFIG_JSON DOCS_JSON PASSES
"use strict";
const fs = require("fs");
const path = require("path");

const [nodeModules, tokenizerJson, tokenizerConfig, docsFile, passesArg] = process.argv.slice(2);
const { TokenizerLoader } = require(path.join(nodeModules, "@lenml/tokenizers"));
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(tokenizerJson, "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(tokenizerConfig, "utf8")),
});
const docs = JSON.parse(fs.readFileSync(docsFile, "utf8"));
const seconds = [];
let tokens = 0;
for (let pass = 0; pass < Number(passesArg || 3); ++pass) {
  tokens = 0;
  const start = process.hrtime.bigint();
  for (const d of docs) tokens += tokenizer.encode(d, { add_special_tokens: false }).length;
  seconds.push(Number(process.hrtime.bigint() - start) / 1e9);
}
process.stdout.write(JSON.stringify({ seconds, tokens }) + "\n");

// Reference tokenization with @lenml/tokenizers (transformers.js's port of the
// Hugging Face tokenizers), for the conformance test.
//
//   node reference_tokenize.js NODE_MODULES TOKENIZER_JSON TOKENIZER_CONFIG_JSON CORPUS_JSONL
//
// For each corpus line {"text": ...} prints one JSON line:
//   {"plain": ids without special tokens, "special": ids with special tokens,
//    "decoded": decode(plain) without skipping special tokens or cleaning spaces}
"use strict";
const fs = require("fs");
const path = require("path");

const [nodeModules, tokenizerJson, tokenizerConfig, corpus] = process.argv.slice(2);
if (!corpus) {
  console.error("usage: node reference_tokenize.js NODE_MODULES TOKENIZER_JSON TOKENIZER_CONFIG_JSON CORPUS_JSONL");
  process.exit(2);
}
const { TokenizerLoader } = require(path.join(nodeModules, "@lenml/tokenizers"));
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(tokenizerJson, "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(tokenizerConfig, "utf8")),
});
const lines = fs.readFileSync(corpus, "utf8").split("\n").filter((l) => l.length > 0);
const out = [];
for (const line of lines) {
  const text = JSON.parse(line).text;
  const plain = tokenizer.encode(text, { add_special_tokens: false });
  const special = tokenizer.encode(text, { add_special_tokens: true });
  const decoded = tokenizer.decode(plain, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  out.push(JSON.stringify({ plain, special, decoded }));
}
process.stdout.write(out.join("\n") + "\n");

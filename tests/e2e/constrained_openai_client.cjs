// Constrained output through tpserve-http as the official OpenAI Node client
// sees it (driven by tests/e2e/constrained_http_test.cc, which starts the
// servers on a random-weight model whose chat template teaches Hermes tool
// calls): response_format json_schema / json_object, vLLM's
// structured_outputs, tool_choice required / named / auto / none, parallel
// calls, streaming deltas reassembled equal to the non-streamed answer,
// finish_reason "tool_calls", and a hostile schema answered 400 while the
// server keeps serving. Schemas validated by ajv (from the npm cache, beside
// `openai`). Exit 1 on the first failure.
//
// Environment: OPENAI_MODULE (the installed `openai` package), HTTP_BASE, MODEL.
'use strict';
const assert = require('assert');
const path = require('path');
const OpenAI = require(process.env.OPENAI_MODULE);
const Ajv = require(path.join(path.dirname(process.env.OPENAI_MODULE), 'ajv'));

const client = new OpenAI({ baseURL: process.env.HTTP_BASE, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const model = process.env.MODEL;
const ajv = new Ajv({ strict: false });

// Every property an enum or a bounded integer: the grammar ends after a few
// tokens, so even a random model finishes (finish_reason "stop").
const kSchema = {
  type: 'object',
  properties: { color: { enum: ['red', 'green', 'blue'] }, n: { type: 'integer', minimum: 0, maximum: 9 } },
  required: ['color', 'n'], additionalProperties: false,
};
const kTools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: {
    type: 'object', properties: { city: { enum: ['Paris', 'Oslo'] }, unit: { enum: ['c', 'f'] } },
    required: ['city', 'unit'], additionalProperties: false } } },
  { type: 'function', function: { name: 'add', description: 'a + b', parameters: {
    type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 9 }, b: { type: 'integer', minimum: 0, maximum: 9 } },
    required: ['a', 'b'], additionalProperties: false } } },
];
const kMessages = [{ role: 'user', content: 'Call a tool, or answer.' }];

function validCall(call) {
  assert.strictEqual(call.type, 'function');
  assert.match(call.id, /.+/);
  const tool = kTools.find((t) => t.function.name === call.function.name);
  assert.ok(tool, `unknown function ${call.function.name}`);
  const args = JSON.parse(call.function.arguments);
  assert.ok(ajv.validate(tool.function.parameters, args), `${call.function.arguments}: ${ajv.errorsText()}`);
}

// The streamed chunks of a chat completion put together: content, finish, and
// the tool calls assembled from their deltas by index (OpenAI's rule).
async function assemble(stream) {
  const out = { content: '', finish: null, calls: [] };
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (c.delta.content) out.content += c.delta.content;
      for (const d of c.delta.tool_calls || []) {
        if (!out.calls[d.index]) out.calls[d.index] = { id: '', type: 'function', function: { name: '', arguments: '' } };
        const call = out.calls[d.index];
        if (d.id) call.id += d.id;
        if (d.type) call.type = d.type;
        if (d.function && d.function.name) call.function.name += d.function.name;
        if (d.function && d.function.arguments) call.function.arguments += d.function.arguments;
      }
      if (c.finish_reason) out.finish = c.finish_reason;
    }
  }
  return out;
}

async function chat(extra) {
  return client.chat.completions.create({ model, messages: kMessages, temperature: 0, max_tokens: 96, ...extra });
}

const checks = {
  async jsonSchemaStrict() {
    const format = { type: 'json_schema', json_schema: { name: 'pick', strict: true, schema: kSchema } };
    const r = await chat({ response_format: format });
    const c = r.choices[0];
    assert.strictEqual(c.finish_reason, 'stop');
    assert.ok(ajv.validate(kSchema, JSON.parse(c.message.content)), `${c.message.content}: ${ajv.errorsText()}`);
    const s = await assemble(await chat({ response_format: format, stream: true }));
    assert.strictEqual(s.content, c.message.content);
    assert.strictEqual(s.finish, 'stop');
  },
  async jsonObject() {
    const r = await chat({ response_format: { type: 'json_object' }, max_tokens: 64 });
    const c = r.choices[0];
    if (c.finish_reason === 'stop') assert.strictEqual(typeof JSON.parse(c.message.content), 'object');
    else assert.strictEqual(c.finish_reason, 'length');
    assert.strictEqual(c.message.content[0], '{');
  },
  async structuredOutputsRegexAndChoice() {
    const r = await chat({ structured_outputs: { regex: '(yes|no)' } });
    assert.match(r.choices[0].message.content, /^(yes|no)$/);
    assert.strictEqual(r.choices[0].finish_reason, 'stop');
    const c = await client.completions.create({ model, prompt: 'Pick a color:', max_tokens: 16, temperature: 1, seed: 3,
                                                 structured_outputs: { choice: ['red', 'blue', 'light blue'] } });
    assert.ok(['red', 'blue', 'light blue'].includes(c.choices[0].text), c.choices[0].text);
    assert.strictEqual(c.choices[0].finish_reason, 'stop');
  },
  async toolChoiceRequiredOneCall() {
    const r = await chat({ tools: kTools, tool_choice: 'required', parallel_tool_calls: false });
    const c = r.choices[0];
    assert.strictEqual(c.finish_reason, 'tool_calls');
    assert.strictEqual(c.message.tool_calls.length, 1);
    validCall(c.message.tool_calls[0]);
    assert.ok(!c.message.content, `content beside the call: ${c.message.content}`);
    const s = await assemble(await chat({ tools: kTools, tool_choice: 'required', parallel_tool_calls: false, stream: true }));
    assert.strictEqual(s.finish, 'tool_calls');
    assert.strictEqual(s.calls.length, 1);
    assert.strictEqual(s.calls[0].function.name, c.message.tool_calls[0].function.name);
    assert.strictEqual(s.calls[0].function.arguments, c.message.tool_calls[0].function.arguments);
    assert.strictEqual(s.content, '');
  },
  async toolChoiceNamed() {
    const r = await chat({ tools: kTools, tool_choice: { type: 'function', function: { name: 'add' } } });
    const c = r.choices[0];
    assert.strictEqual(c.finish_reason, 'tool_calls');
    assert.ok(c.message.tool_calls.length >= 1);
    for (const call of c.message.tool_calls) {
      assert.strictEqual(call.function.name, 'add');
      validCall(call);
    }
  },
  async parallelCallsSampled() {
    // Sampling (seeded) lets the model make one call or several; each is valid,
    // and streaming gives the same calls.
    for (const seed of [1, 2, 3, 4]) {
      const req = { tools: kTools, tool_choice: 'required', temperature: 1, seed, max_tokens: 160 };
      const c = (await chat(req)).choices[0];
      const s = await assemble(await chat({ ...req, stream: true }));
      if (c.finish_reason === 'length') continue;  // cut mid-call: no call to check
      assert.strictEqual(c.finish_reason, 'tool_calls');
      c.message.tool_calls.forEach(validCall);
      assert.deepStrictEqual(s.calls.map((x) => [x.function.name, x.function.arguments]),
                             c.message.tool_calls.map((x) => [x.function.name, x.function.arguments]),
                             `seed ${seed}: streamed ${JSON.stringify(s)}, not streamed ${JSON.stringify(c)}`);
    }
  },
  async toolChoiceAutoAndNone() {
    const auto = (await chat({ tools: kTools, tool_choice: 'auto', max_tokens: 24 })).choices[0];
    assert.ok(['stop', 'length', 'tool_calls'].includes(auto.finish_reason), auto.finish_reason);
    const none = (await chat({ tools: kTools, tool_choice: 'none', max_tokens: 24 })).choices[0];
    assert.ok(!none.message.tool_calls || none.message.tool_calls.length === 0);
    assert.notStrictEqual(none.finish_reason, 'tool_calls');
  },
  async hostileSchemaIs400AndTheServerServes() {
    // Too long to enforce, a keyword the engine cannot enforce, unsatisfiable.
    for (const schema of [{ type: 'string', minLength: 5000000 }, { type: 'string', not: { const: 'a' } },
                          { type: 'integer', minimum: 5, maximum: 1 }]) {
      await assert.rejects(chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } }),
                           (e) => e.status === 400 && /json_schema|response_format/.test(e.message),
                           JSON.stringify(schema));
    }
    await assert.rejects(chat({ structured_outputs: { regex: '(a' } }), (e) => e.status === 400);
    await assert.rejects(chat({ tools: kTools, tool_choice: { type: 'function', function: { name: 'nope' } } }),
                         (e) => e.status === 400);
    const r = await chat({ structured_outputs: { choice: ['ok'] } });
    assert.strictEqual(r.choices[0].message.content, 'ok');
  },
};

(async () => {
  for (const [name, check] of Object.entries(checks)) {
    try {
      await check();
      console.log(`ok   ${name}`);
    } catch (e) {
      console.log(`FAIL ${name}: ${e.stack || e}`);
      process.exit(1);
    }
  }
})();

// The official OpenAI Node client against tpserve-http (driven by
// tests/e2e/http_test.cc, which starts the servers and computes the
// expectations over gRPC).
//
//   node http_openai_client.cjs checks   every check below; exit 1 on the first failure
//   node http_openai_client.cjs abort    streams a long request, prints STREAMING after 3
//                                        chunks, waits for the file $GO_FILE, aborts, prints ABORTED
//
// Environment: OPENAI_MODULE (the installed `openai` package), HTTP_BASE
// (http://HOST:PORT/v1), EXPECT (a JSON file of expectations), GO_FILE.
'use strict';
const fs = require('fs');
const assert = require('assert');
const OpenAI = require(process.env.OPENAI_MODULE);

const client = new OpenAI({ baseURL: process.env.HTTP_BASE, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
const expect = JSON.parse(fs.readFileSync(process.env.EXPECT, 'utf8'));
const model = expect.model;

function idsOf(tokens) {
  return tokens.map((t) => { assert.match(t, /^token_id:\d+$/); return Number(t.slice('token_id:'.length)); });
}

async function collect(stream) {
  const out = { text: '', chunks: [], finish: null, usage: null };
  for await (const chunk of stream) {
    out.chunks.push(chunk);
    if (chunk.usage) out.usage = chunk.usage;
    for (const c of chunk.choices) {
      out.text += c.delta ? (c.delta.content || '') : c.text;
      if (c.finish_reason) out.finish = c.finish_reason;
    }
  }
  return out;
}

const checks = {
  // lm-evaluation-harness's log-likelihood request: echo, logprobs 1, max_tokens 0
  // gives the prompt alone with its tokens' log-probs, the first null.
  async completionsEchoGivesThePromptsLogprobs() {
    const r = await client.completions.create({
      model, prompt: expect.echo_prompt, echo: true, logprobs: 1, max_tokens: 0, temperature: 0 });
    const c = r.choices[0];
    assert.strictEqual(c.text, expect.echo_prompt);
    assert.strictEqual(c.finish_reason, 'length');
    assert.strictEqual(r.usage.completion_tokens, 0);
    assert.strictEqual(r.usage.prompt_tokens, expect.echo_token_ids.length);
    const lp = c.logprobs;
    assert.strictEqual(lp.tokens.length, expect.echo_token_ids.length);
    assert.strictEqual(lp.tokens.join(''), expect.echo_prompt);
    assert.strictEqual(lp.token_logprobs[0], null);
    assert.strictEqual(lp.top_logprobs[0], null);
    assert.deepStrictEqual(lp.token_logprobs.slice(1), expect.echo_token_logprobs);
    let offset = 0;
    for (let i = 0; i < lp.tokens.length; i++) {
      assert.strictEqual(lp.text_offset[i], offset);
      offset += Buffer.byteLength(lp.tokens[i]);
      if (i > 0) assert.strictEqual(Object.keys(lp.top_logprobs[i]).length, 1);
    }
    const more = await client.completions.create({
      model, prompt: expect.echo_prompt, echo: true, logprobs: 1, max_tokens: 2, temperature: 0, ignore_eos: true });
    assert.ok(more.choices[0].text.startsWith(expect.echo_prompt));
    assert.strictEqual(more.choices[0].logprobs.tokens.length, expect.echo_token_ids.length + 2);
    assert.strictEqual(more.usage.completion_tokens, 2);
  },
  // Greedy completions on token ids: the same tokens as gRPC Generate, usage counted.
  async completionsGreedyEqualsGrpc() {
    const r = await client.completions.create({
      model, prompt: expect.ids_prompt, max_tokens: expect.ids_greedy.length, temperature: 0,
      ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true });
    assert.strictEqual(r.object, 'text_completion');
    assert.deepStrictEqual(idsOf(r.choices[0].logprobs.tokens), expect.ids_greedy);
    assert.strictEqual(r.choices[0].text, expect.ids_text);
    assert.strictEqual(r.choices[0].finish_reason, 'length');
    assert.strictEqual(r.usage.prompt_tokens, expect.ids_prompt.length);
    assert.strictEqual(r.usage.completion_tokens, expect.ids_greedy.length);
    assert.strictEqual(r.usage.total_tokens, expect.ids_prompt.length + expect.ids_greedy.length);
  },
  async completionsStreamEqualsNonStreaming() {
    const s = await client.completions.create({
      model, prompt: expect.ids_prompt, max_tokens: expect.ids_greedy.length, temperature: 0, ignore_eos: true,
      stream: true, stream_options: { include_usage: true } });
    const out = await collect(s);
    assert.strictEqual(out.text, expect.ids_text);
    assert.strictEqual(out.finish, 'length');
    assert.strictEqual(out.usage.completion_tokens, expect.ids_greedy.length);
    assert.deepStrictEqual(out.chunks[out.chunks.length - 1].choices, []);
  },
  async chatGreedyEqualsGrpc() {
    const r = await client.chat.completions.create({
      model, messages: expect.chat_messages, max_completion_tokens: expect.chat_max_tokens, temperature: 0,
      ignore_eos: true });
    assert.strictEqual(r.object, 'chat.completion');
    assert.strictEqual(r.choices[0].message.role, 'assistant');
    assert.strictEqual(r.choices[0].message.content, expect.chat_text);
    assert.strictEqual(r.choices[0].finish_reason, 'length');
    assert.strictEqual(r.usage.prompt_tokens, expect.chat_prompt_tokens);
    assert.strictEqual(r.usage.completion_tokens, expect.chat_max_tokens);
  },
  async chatStreamEqualsGrpc() {
    const s = await client.chat.completions.create({
      model, messages: expect.chat_messages, max_tokens: expect.chat_max_tokens, temperature: 0,
      ignore_eos: true, stream: true });
    const out = await collect(s);
    assert.strictEqual(out.text, expect.chat_text);
    assert.strictEqual(out.finish, 'length');
    assert.strictEqual(out.chunks[0].choices[0].delta.role, 'assistant');
    assert.strictEqual(out.usage, null, 'no usage without stream_options.include_usage');
  },
  // A stop string cuts the text before it and finishes with "stop".
  async stopString() {
    const stop = expect.stop_string;
    const r = await client.completions.create({
      model, prompt: expect.ids_prompt, max_tokens: expect.ids_greedy.length, temperature: 0, ignore_eos: true,
      stop: [stop] });
    assert.strictEqual(r.choices[0].finish_reason, 'stop');
    assert.strictEqual(r.choices[0].text, expect.ids_text.slice(0, expect.ids_text.indexOf(stop)));
  },
  async maxTokens() {
    const r = await client.completions.create({ model, prompt: expect.ids_prompt, max_tokens: 2, temperature: 0,
                                                ignore_eos: true });
    assert.strictEqual(r.usage.completion_tokens, 2);
    assert.strictEqual(r.choices[0].finish_reason, 'length');
  },
  // Sampling with a seed: the tokens gRPC Generate gave for the same seed.
  async seedEqualsGrpc() {
    for (let i = 0; i < 2; ++i) {
      const r = await client.completions.create({
        model, prompt: expect.ids_prompt, max_tokens: expect.seeded_ids.length, temperature: 1, seed: expect.seed,
        ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true });
      assert.deepStrictEqual(idsOf(r.choices[0].logprobs.tokens), expect.seeded_ids);
    }
  },
  async chatLogprobs() {
    const r = await client.chat.completions.create({
      model, messages: expect.chat_messages, max_tokens: 4, temperature: 0, ignore_eos: true, logprobs: true,
      top_logprobs: 2 });
    const content = r.choices[0].logprobs.content;
    assert.strictEqual(content.length, 4);
    for (const lp of content) {
      assert.ok(lp.logprob <= 0 && typeof lp.token === 'string', JSON.stringify(lp));
      assert.strictEqual(lp.top_logprobs.length, 2);
      assert.ok(lp.top_logprobs[0].logprob >= lp.top_logprobs[1].logprob);
      assert.strictEqual(lp.top_logprobs[0].token, lp.token, 'greedy: the chosen token is the likeliest');
      assert.deepStrictEqual(lp.bytes, [...Buffer.from(lp.token, 'utf8')]);
    }
  },
  async completionLogprobsStream() {
    const s = await client.completions.create({
      model, prompt: expect.ids_prompt, max_tokens: 3, temperature: 0, ignore_eos: true, logprobs: 1, stream: true });
    let tokens = 0;
    for await (const chunk of s) {
      for (const c of chunk.choices) if (c.logprobs) tokens += c.logprobs.tokens.length;
    }
    assert.strictEqual(tokens, 3);
  },
  async badRequestNamesTheField() {
    for (const [body, field] of [[{ temperature: 'hot' }, 'temperature'], [{ top_p: 7 }, 'top_p'],
                                 [{ n: 0 }, 'n'], [{ best_of: 3 }, 'best_of'], [{ frobnicate: 1 }, 'frobnicate']]) {
      try {
        await client.chat.completions.create({ model, messages: expect.chat_messages, max_tokens: 2, ...body });
        assert.fail(`${JSON.stringify(body)} was accepted`);
      } catch (e) {
        assert.ok(e instanceof OpenAI.BadRequestError, `${JSON.stringify(body)}: ${e}`);
        assert.strictEqual(e.status, 400);
        assert.strictEqual(e.param, field);
        assert.ok(e.message.includes(field), e.message);
      }
    }
  },
  async unknownModelIsNotFound() {
    try {
      await client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 1 });
      assert.fail('accepted');
    } catch (e) {
      assert.ok(e instanceof OpenAI.NotFoundError, String(e));
      assert.strictEqual(e.code, 'model_not_found');
    }
  },
  async modelsList() {
    const list = await client.models.list();
    assert.deepStrictEqual(list.data.map((m) => m.id), [model]);
  },
};

async function abort() {
  const s = await client.chat.completions.create({
    model, messages: expect.chat_messages, max_tokens: expect.abort_max_tokens, temperature: 0, ignore_eos: true,
    stream: true });
  let n = 0;
  for await (const chunk of s) {
    if (++n < 3) continue;
    console.log('STREAMING');
    while (!fs.existsSync(process.env.GO_FILE)) await new Promise((r) => setTimeout(r, 10));
    s.controller.abort();
    break;
  }
  console.log('ABORTED');
}

async function main() {
  if (process.argv[2] === 'abort') return abort();
  for (const [name, check] of Object.entries(checks)) {
    try {
      await check();
      console.log(`PASS ${name}`);
    } catch (e) {
      console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
      process.exitCode = 1;
    }
  }
}

main().catch((e) => { console.log(`FAIL: ${e && e.stack ? e.stack : e}`); process.exit(1); });

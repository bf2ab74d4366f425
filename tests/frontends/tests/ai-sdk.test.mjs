// The AI SDK UI message stream of `POST /v1/ai-sdk/chat` and its resume, read by the `ai`
// package itself: `DefaultChatTransport` (which parses every part with `uiMessageChunkSchema`)
// and `readUIMessageStream` (which builds the `UIMessage` a `useChat` page shows). Every part is
// also validated on its own with `uiMessageChunkSchema`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DefaultChatTransport, readUIMessageStream, uiMessageChunkSchema } from 'ai';
import { AUTH_BASE, AUTH_KEY, BASE, LLM_BASE, eventually, getJson, newChatId, sessionNamed } from './helpers.mjs';

const schema = uiMessageChunkSchema();

/** A transport whose fetch records each answer's headers. */
function transport(base = BASE, options = {}) {
  const responses = [];
  const recordingFetch = async (url, init) => {
    const response = await fetch(url, init);
    responses.push(response);
    return response;
  };
  const t = new DefaultChatTransport({ api: `${base}/v1/ai-sdk/chat`, fetch: recordingFetch, ...options });
  t.responses = responses;
  return t;
}

function userMessage(text) {
  return { id: `u-${Math.random().toString(36).slice(2)}`, role: 'user', parts: [{ type: 'text', text }] };
}

/**
 * Reads a stream of parts to its end: every part (each checked against the AI SDK's schema)
 * and the last `UIMessage` `readUIMessageStream` built from them. `onChunk` sees each part
 * as it arrives (and may stop reading by answering true).
 */
async function read(stream, { onChunk } = {}) {
  const [forParts, forMessage] = stream.tee();
  const chunks = [];
  const errors = [];
  const collecting = (async () => {
    const reader = forParts.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      const checked = await schema.validate(value);
      assert.equal(checked.success, true, `a valid part: ${JSON.stringify(value)}`);
      chunks.push(value);
      if (onChunk && (await onChunk(value, chunks))) {
        await reader.cancel();
        return;
      }
    }
  })();
  let message;
  const building = (async () => {
    try {
      for await (const m of readUIMessageStream({ stream: forMessage, onError: (e) => errors.push(e) })) message = m;
    } catch (e) {
      // The stream was cancelled by onChunk: keep what was built.
      errors.push(e);
    }
  })();
  await collecting;
  await building;
  return { chunks, message, errors };
}

async function send(t, chatId, text, extra = {}) {
  const stream = await t.sendMessages({
    chatId,
    messages: [userMessage(text)],
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal: extra.abortSignal,
    body: extra.body,
  });
  return stream;
}

const texts = (message) => message.parts.filter((p) => p.type === 'text').map((p) => p.text);
const tools = (message) => message.parts.filter((p) => p.type.startsWith('tool-'));
const types = (chunks) => chunks.map((c) => c.type);

test('a steps: 3 run is a message with its steps, tool calls, outputs and answer', async () => {
  const t = transport();
  const chatId = newChatId();
  const { chunks, message, errors } = await read(await send(t, chatId, 'steps: 3'));
  assert.deepEqual(errors, []);
  assert.equal(t.responses[0].headers.get('x-vercel-ai-ui-message-stream'), 'v1');
  assert.equal(t.responses[0].headers.get('content-type'), 'text/event-stream');
  assert.equal(chunks[0].type, 'start');
  assert.equal(chunks.at(-1).type, 'finish');
  assert.equal(chunks.at(-1).finishReason, 'stop');
  // Four steps (three actions, the final answer), each opened and closed.
  assert.equal(types(chunks).filter((t) => t === 'start-step').length, 4);
  assert.equal(types(chunks).filter((t) => t === 'finish-step').length, 4);
  assert.equal(message.role, 'assistant');
  assert.deepEqual(texts(message), ['Step 1 of 3: computing 1.', 'Step 2 of 3: computing 2.', 'Step 3 of 3: computing 3.', 'Done: 3 steps']);
  const calls = tools(message);
  assert.deepEqual(calls.map((p) => [p.type, p.state, p.input, p.output]), [
    ['tool-calculator', 'output-available', { expression: '1' }, '1'],
    ['tool-calculator', 'output-available', { expression: '2' }, '2'],
    ['tool-calculator', 'output-available', { expression: '3' }, '3'],
  ]);
  // The chat is a session of that name, and the message id is its user message's.
  const session = await sessionNamed(BASE, chatId);
  const messages = await getJson(BASE, `/v1/sessions/${session.id}/messages?roles=user,assistant`);
  assert.deepEqual(messages.items.map((m) => [m.role, m.content]), [['user', 'steps: 3'], ['assistant', 'Done: 3 steps']]);
  assert.equal(message.id, messages.items[0].id);
  // Nothing runs any more: the resume URL answers 204 (the transport reads null).
  assert.equal(await t.reconnectToStream({ chatId }), null);
});

test('the tool-calling agent with a fake model: streamed tokens and a tool call with its result', async () => {
  const t = transport(LLM_BASE);
  const { chunks, message, errors } = await read(await send(t, newChatId(), 'what is six times seven?'));
  assert.deepEqual(errors, []);
  assert.equal(chunks.at(-1).finishReason, 'stop');
  const calls = tools(message);
  assert.equal(calls.length, 1);
  assert.equal(calls[0].type, 'tool-calculator');
  assert.equal(calls[0].state, 'output-available');
  assert.deepEqual(calls[0].input, { expression: '6*7' });
  assert.equal(calls[0].output, '42');
  assert.equal(texts(message).join(''), 'The answer is 42.');
  // The answer came as tokens (live deltas), not in one piece.
  assert.ok(chunks.filter((c) => c.type === 'text-delta').length >= 3, JSON.stringify(types(chunks)));
});

test('a pause asks its question; the next turn answers it and the same execution finishes', async () => {
  const t = transport();
  const chatId = newChatId();
  const first = await read(await send(t, chatId, 'please ask me something'));
  assert.deepEqual(first.errors, []);
  assert.equal(first.chunks.at(-1).type, 'finish');
  assert.equal(first.chunks.at(-1).finishReason, 'other');
  const pause = first.message.parts.find((p) => p.type === 'data-stepwise-pause');
  assert.equal(pause.data.question, 'What should I use?');
  assert.equal(texts(first.message).at(-1), 'What should I use?');
  const ask = tools(first.message);
  assert.deepEqual(ask.map((p) => [p.type, p.state, p.input]), [['tool-user_input', 'input-available', { question: 'What should I use?' }]]);

  const second = await read(await send(t, chatId, 'a hammer'));
  assert.deepEqual(second.errors, []);
  assert.equal(second.chunks.at(-1).finishReason, 'stop');
  assert.equal(texts(second.message).at(-1), 'You said: a hammer');
  assert.equal(second.chunks[0].messageMetadata.sessionExecutionId, pause.data.executionId, 'the paused execution resumed');
  const execution = await getJson(BASE, `/v1/executions/${pause.data.executionId}`);
  assert.equal(execution.status, 'completed');
});

test('cancel: the stream ends with abort and the execution is cancelled', async () => {
  const t = transport();
  const chatId = newChatId();
  let cancelled;
  const { chunks } = await read(await send(t, chatId, 'steps: 200'), {
    onChunk: async (chunk) => {
      if (chunk.type === 'finish-step' && !cancelled) {
        cancelled = await fetch(`${BASE}/v1/ai-sdk/chat/${chatId}/cancel`, { method: 'POST' });
      }
    },
  });
  assert.equal(cancelled.status, 202);
  const execution = await cancelled.json();
  assert.equal(chunks.at(-1).type, 'abort');
  assert.ok(!types(chunks).includes('finish'));
  const after = await eventually(async () => {
    const e = await getJson(BASE, `/v1/executions/${execution.id}`);
    return e.status === 'cancelled' && e;
  }, 'the execution to be cancelled');
  assert.ok(after.step_count < 200);
  // Nothing runs: a second cancel is a 409 with the error shape, the resume a 204.
  const again = await fetch(`${BASE}/v1/ai-sdk/chat/${chatId}/cancel`, { method: 'POST' });
  assert.equal(again.status, 409);
  assert.equal((await again.json()).error.code, 'conflict');
  assert.equal(await t.reconnectToStream({ chatId }), null);
});

test('a failure is an error part with the reason, and a tool error on the tool part', async () => {
  const t = transport();
  const { chunks, message, errors } = await read(await send(t, newChatId(), 'this will fail'));
  const error = chunks.find((c) => c.type === 'error');
  assert.ok(error, JSON.stringify(types(chunks)));
  assert.match(error.errorText, /division by zero|divide by zero|zero/i);
  assert.equal(errors.length, 1, 'readUIMessageStream reported the error');
  assert.equal(chunks.at(-1).type, 'finish');
  assert.equal(chunks.at(-1).finishReason, 'error');
  const [call] = tools(message);
  assert.equal(call.state, 'output-error');
  assert.equal(call.errorText, error.errorText);
});

test('resume after the connection drops mid-run: the run from its start, to its end, once', async () => {
  const t = transport();
  const chatId = newChatId();
  const abort = new AbortController();
  const dropped = await read(await send(t, chatId, 'steps: 30', { abortSignal: abort.signal }), {
    onChunk: (chunk, chunks) => {
      if (chunks.filter((c) => c.type === 'finish-step').length === 2) {
        abort.abort();
        return true;
      }
      return false;
    },
  });
  assert.ok(!types(dropped.chunks).includes('finish'), 'dropped before the end');
  const resumed = await t.reconnectToStream({ chatId });
  assert.notEqual(resumed, null, 'the run still runs');
  const { chunks, message, errors } = await read(resumed);
  assert.deepEqual(errors, []);
  assert.equal(chunks[0].type, 'start');
  assert.equal(chunks[0].messageId, dropped.chunks[0].messageId, 'the same assistant message');
  assert.equal(chunks.at(-1).finishReason, 'stop');
  const calls = tools(message);
  assert.deepEqual(calls.map((p) => p.input.expression), Array.from({ length: 30 }, (_, i) => String(i + 1)));
  assert.equal(new Set(calls.map((p) => p.toolCallId)).size, 30, 'no duplicate');
  assert.equal(texts(message).at(-1), 'Done: 30 steps');
});

test('keys: a chat needs the API key like every /v1 path', async () => {
  const without = transport(AUTH_BASE);
  await assert.rejects(send(without, newChatId(), 'hello'), (e) => {
    assert.match(String(e.message ?? e), /unauthorized|API key|401/i);
    return true;
  });
  const t = transport(AUTH_BASE, { headers: { Authorization: `Bearer ${AUTH_KEY}` } });
  const { message, errors } = await read(await send(t, newChatId(), 'hello'));
  assert.deepEqual(errors, []);
  assert.equal(texts(message).at(-1), 'Echo: hello');
});

test('bad input: a clear 400; the resume of an unknown chat is 204', async () => {
  const response = await fetch(`${BASE}/v1/ai-sdk/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ id: newChatId(), messages: [{ id: 'a', role: 'assistant', parts: [{ type: 'text', text: 'hi' }] }] }),
  });
  assert.equal(response.status, 400);
  const body = await response.json();
  assert.equal(body.error.code, 'invalid_request');
  assert.equal(body.error.field, 'messages');
  const badId = await fetch(`${BASE}/v1/ai-sdk/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ id: 'no spaces allowed', messages: [userMessage('hi')] }),
  });
  assert.equal(badId.status, 400);
  assert.equal((await badId.json()).error.field, 'id');
  assert.equal(await transport().reconnectToStream({ chatId: newChatId() }), null);
});

// AG-UI over `POST /v1/ag-ui` and `/v1/ag-ui/connect`, run by `@ag-ui/client` itself:
// `HttpAgent.runAgent` checks every event against the protocol's schemas and its verifier
// (which rejects out-of-order streams: anything before RUN_STARTED, a run ending with a
// step, text message or tool call still open, anything after the run's end) and applies
// them to the agent's messages, which each test checks.
import http from 'node:http';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HttpAgent } from '@ag-ui/client';
import { BASE, LLM_BASE, eventually, getJson, newChatId, sessionNamed } from './helpers.mjs';

/** An HttpAgent for a thread that records every event it accepted. */
function agent(threadId, base = BASE) {
  const a = new HttpAgent({ url: `${base}/v1/ag-ui`, threadId });
  a.seen = [];
  a.subscribe({ onEvent: ({ event }) => { a.seen.push(event); } });
  return a;
}

/** A client that reconnects to a thread: `connectAgent` posts to /v1/ag-ui/connect. */
class ConnectingAgent extends HttpAgent {
  connect(input) {
    return this.run(input);
  }
}

function say(a, text) {
  a.addMessage({ id: `u-${Math.random().toString(36).slice(2)}`, role: 'user', content: text });
}

const kinds = (events) => events.map((e) => e.type);
const assistantTexts = (a) => a.messages.filter((m) => m.role === 'assistant' && m.content).map((m) => m.content);
const toolCalls = (a) => a.messages.filter((m) => m.role === 'assistant').flatMap((m) => m.toolCalls ?? []);
const toolResults = (a) => a.messages.filter((m) => m.role === 'tool');

test('a steps: 3 run: steps, text messages, tool calls and results, success', async () => {
  const threadId = newChatId('thread');
  const a = agent(threadId);
  say(a, 'steps: 3');
  const { result } = await a.runAgent({ runId: 'run-1' });
  assert.equal(result, 'Done: 3 steps');
  assert.equal(a.seen[0].type, 'RUN_STARTED');
  assert.equal(a.seen[0].runId, 'run-1');
  const finished = a.seen.at(-1);
  assert.equal(finished.type, 'RUN_FINISHED');
  assert.equal(finished.outcome.type, 'success');
  assert.equal(kinds(a.seen).filter((k) => k === 'STEP_STARTED').length, 4);
  assert.deepEqual(assistantTexts(a), ['Step 1 of 3: computing 1.', 'Step 2 of 3: computing 2.', 'Step 3 of 3: computing 3.', 'Done: 3 steps']);
  assert.deepEqual(toolCalls(a).map((c) => [c.function.name, JSON.parse(c.function.arguments)]), [
    ['calculator', { expression: '1' }], ['calculator', { expression: '2' }], ['calculator', { expression: '3' }],
  ]);
  assert.deepEqual(toolResults(a).map((m) => m.content), ['1', '2', '3']);
  const session = await sessionNamed(BASE, threadId);
  assert.equal(a.seen[0].metadata.stepwise.sessionId, session.id);
});

test('the tool-calling agent with a fake model: streamed text and the tool call', async () => {
  const a = agent(newChatId('thread'), LLM_BASE);
  say(a, 'what is six times seven?');
  const { result } = await a.runAgent();
  assert.equal(result, 'The answer is 42.');
  assert.deepEqual(toolCalls(a).map((c) => c.function.name), ['calculator']);
  assert.deepEqual(toolResults(a).map((m) => m.content), ['42']);
  assert.deepEqual(assistantTexts(a), ['The answer is 42.']);
  assert.ok(kinds(a.seen).filter((k) => k === 'TEXT_MESSAGE_CONTENT').length >= 3, 'tokens streamed');
});

test('a pause ends with an interrupt; the next run resumes the same execution', async () => {
  const a = agent(newChatId('thread'));
  say(a, 'please ask me something');
  await a.runAgent();
  const finished = a.seen.at(-1);
  assert.equal(finished.type, 'RUN_FINISHED');
  assert.equal(finished.outcome.type, 'interrupt');
  const [interrupt] = finished.outcome.interrupts;
  assert.equal(interrupt.message, 'What should I use?');
  assert.equal(interrupt.id, a.seen[0].metadata.stepwise.executionId);
  assert.equal(assistantTexts(a).at(-1), 'What should I use?');

  a.seen = [];
  const { result } = await a.runAgent({ resume: [{ interruptId: interrupt.id, status: 'resolved', payload: 'a hammer' }] });
  assert.equal(result, 'You said: a hammer');
  assert.equal(a.seen[0].metadata.stepwise.executionId, interrupt.id, 'the paused execution resumed');
  assert.equal(a.seen.at(-1).outcome.type, 'success');
});

test('cancel: the run finishes with outcome cancelled', async () => {
  const a = agent(newChatId('thread'));
  say(a, 'steps: 200');
  let cancel;
  a.subscribe({
    onStepFinishedEvent: () => {
      const started = a.seen[0];
      cancel ??= fetch(`${BASE}/v1/executions/${started.metadata.stepwise.executionId}/cancel`, { method: 'POST' });
    },
  });
  await a.runAgent();
  assert.equal((await cancel).status, 202);
  const finished = a.seen.at(-1);
  assert.equal(finished.type, 'RUN_FINISHED');
  assert.equal(finished.outcome.type, 'cancelled');
  const execution = await getJson(BASE, `/v1/executions/${a.seen[0].metadata.stepwise.executionId}`);
  assert.equal(execution.status, 'cancelled');
});

test('a failure ends the run with RUN_ERROR', async () => {
  const a = agent(newChatId('thread'));
  say(a, 'this will fail');
  const errors = [];
  a.subscribe({ onRunErrorEvent: ({ event }) => { errors.push(event); } });
  const { result } = await a.runAgent();
  assert.equal(result, undefined, 'no result');
  assert.equal(errors.length, 1);
  const error = a.seen.at(-1);
  assert.equal(error.type, 'RUN_ERROR');
  assert.equal(error.code, 'execution_failed');
  assert.match(error.message, /zero/i);
  assert.match(toolResults(a)[0].content, /^Error: .*zero/i);
});

test('connect: a reconnecting client gets the thread and the running turn to its end', async () => {
  const threadId = newChatId('thread');
  // A first client starts a run and goes away after its first step.
  const first = new AbortController();
  const response = await fetch(`${BASE}/v1/ag-ui`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ threadId, runId: 'run-a', messages: [{ id: 'm1', role: 'user', content: 'steps: 30' }] }),
    signal: first.signal,
  });
  const reader = response.body.getReader();
  let text = '';
  while (!text.includes('STEP_FINISHED')) {
    const { value, done } = await reader.read();
    assert.equal(done, false);
    text += new TextDecoder().decode(value);
  }
  first.abort();

  const b = new ConnectingAgent({ url: `${BASE}/v1/ag-ui/connect`, threadId });
  const seen = [];
  b.subscribe({ onEvent: ({ event }) => { seen.push(event); } });
  await b.connectAgent({ runId: 'run-b' });
  assert.deepEqual(kinds(seen).slice(0, 2), ['RUN_STARTED', 'MESSAGES_SNAPSHOT']);
  assert.deepEqual(seen[1].messages.map((m) => [m.role, m.content]), [['user', 'steps: 30']]);
  assert.equal(seen.at(-1).type, 'RUN_FINISHED');
  assert.equal(seen.at(-1).outcome.type, 'success');
  const calls = b.messages.filter((m) => m.role === 'assistant').flatMap((m) => m.toolCalls ?? []);
  assert.equal(calls.length, 30, 'every step, from the start, once');
  assert.equal(b.messages.filter((m) => m.role === 'assistant' && m.content).at(-1).content, 'Done: 30 steps');

  // Connecting again once the run is over: the snapshot alone, then the end.
  const c = new ConnectingAgent({ url: `${BASE}/v1/ag-ui/connect`, threadId });
  const again = [];
  c.subscribe({ onEvent: ({ event }) => { again.push(event); } });
  await c.connectAgent();
  assert.deepEqual(kinds(again), ['RUN_STARTED', 'MESSAGES_SNAPSHOT', 'RUN_FINISHED']);
  assert.deepEqual(again[1].messages.map((m) => [m.role, m.content]), [['user', 'steps: 30'], ['assistant', 'Done: 30 steps']]);
  assert.deepEqual(c.messages.map((m) => m.content), ['steps: 30', 'Done: 30 steps']);
});

test('connect to a paused thread: RUN_FINISHED with the interrupt', async () => {
  const threadId = newChatId('thread');
  const a = agent(threadId);
  say(a, 'ask me');
  await a.runAgent();
  const c = new ConnectingAgent({ url: `${BASE}/v1/ag-ui/connect`, threadId });
  const seen = [];
  c.subscribe({ onEvent: ({ event }) => { seen.push(event); } });
  await c.connectAgent();
  assert.equal(seen.at(-1).outcome.type, 'interrupt');
  assert.equal(seen.at(-1).outcome.interrupts[0].message, 'What should I use?');
});

test('bad input: a clear 400 with the field', async () => {
  const response = await fetch(`${BASE}/v1/ag-ui`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ threadId: newChatId('thread'), runId: 'r', messages: [] }),
  });
  assert.equal(response.status, 400);
  assert.equal((await response.json()).error.field, 'messages');
  const noRun = await fetch(`${BASE}/v1/ag-ui`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ threadId: newChatId('thread'), messages: [{ id: 'm', role: 'user', content: 'hi' }] }),
  });
  assert.equal(noRun.status, 400);
  const agentProps = await fetch(`${BASE}/v1/ag-ui`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ threadId: newChatId('thread'), runId: 'r', messages: [{ id: 'm', role: 'user', content: 'hi' }], forwardedProps: { agent: { type: 'no such agent!' } } }),
  });
  assert.equal(agentProps.status, 400);
  assert.equal((await agentProps.json()).error.field, 'agent.type');
});

test('forwardedProps.agent picks the agent, and the thread keeps it', async () => {
  const threadId = newChatId('thread');
  const a = agent(threadId);
  say(a, 'hello');
  await a.runAgent({ forwardedProps: { agent: { type: 'demo', config: { note: 'x' } } } });
  const session = await sessionNamed(BASE, threadId);
  const executions = await getJson(BASE, `/v1/sessions/${session.id}/executions`);
  assert.deepEqual(executions.items.map((e) => [e.agent_type, e.agent_config]), [['demo', { note: 'x' }]]);
  say(a, 'hello again');
  await a.runAgent();
  const after = await eventually(async () => {
    const list = await getJson(BASE, `/v1/sessions/${session.id}/executions`);
    return list.items.length === 2 && list;
  }, 'two executions');
  assert.deepEqual(after.items.map((e) => e.agent_config), [{ note: 'x' }, { note: 'x' }]);
});

test('the client really verifies: an out-of-order stream is refused', async () => {
  // The same client against a server that sends a step after the run ended: runAgent fails,
  // so the runs above were accepted by the verifier, not merely read.
  const server = http.createServer((req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/event-stream' });
    res.write(`data: ${JSON.stringify({ type: 'RUN_STARTED', threadId: 't', runId: 'r' })}\n\n`);
    res.write(`data: ${JSON.stringify({ type: 'RUN_FINISHED', threadId: 't', runId: 'r' })}\n\n`);
    res.end(`data: ${JSON.stringify({ type: 'STEP_STARTED', stepName: 'late' })}\n\n`);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  try {
    const a = new HttpAgent({ url: `http://127.0.0.1:${server.address().port}/`, threadId: 't' });
    say(a, 'hi');
    await assert.rejects(a.runAgent({ runId: 'r' }), /already finished/);
  } finally {
    server.close();
  }
});

// The TypeScript client against live servers: its types and operations against the server's
// /openapi.json, every endpoint, list iterators, errors, and the event stream across a restart.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { Stepwise, StepwiseError, OPERATIONS } from '../dist/index.js';
import { generate } from '../scripts/generate.mjs';
import { server } from './server.mjs';

let srv;
let client;
before(async () => {
  srv = await server();
  client = new Stepwise({ baseUrl: srv.url });
});
after(async () => {
  await srv?.stop();
});

/** The client method of each operation of /openapi.json. */
const METHODS = {
  healthz: 'healthz', readyz: 'readyz', metrics: 'metrics', openapi: 'openapi',
  create_session: 'createSession', list_sessions: 'listSessions', get_session: 'getSession',
  update_session: 'updateSession', delete_session: 'deleteSession', import_session: 'importSession',
  export_session: 'exportSession', memory: 'memory', list_messages: 'listMessages', post_message: 'postMessage',
  post_message_new_session: 'postMessageNewSession', events: 'events', list_executions: 'listExecutions',
  open_execution: 'openExecution', get_execution: 'getExecution', cancel_execution: 'cancelExecution',
  list_steps: 'listSteps', append_step: 'appendStep', list_snapshots: 'listSnapshots', save_snapshot: 'saveSnapshot',
  complete_execution: 'completeExecution', fail_execution: 'failExecution', pause_execution: 'pauseExecution',
  get_snapshot: 'getSnapshot', list_items: 'listItems', append_items: 'appendItems', pop_item: 'popItem',
  clear_items: 'clearItems', put_checkpoint: 'putCheckpoint', put_checkpoint_writes: 'putCheckpointWrites',
  get_latest_checkpoint: 'getLatestCheckpoint', get_checkpoint: 'getCheckpoint', list_checkpoints: 'listCheckpoints',
  list_all_checkpoints: 'listAllCheckpoints', get_thread: 'getThread', delete_thread: 'deleteThread',
  copy_thread: 'copyThread', delete_checkpoints_for_runs: 'deleteCheckpointsForRuns', prune_checkpoints: 'pruneCheckpoints',
  ai_sdk_chat: 'aiSdkChat', ai_sdk_resume: 'aiSdkResume', ai_sdk_cancel: 'aiSdkCancel', ag_ui_run: 'agUiRun',
  ag_ui_connect: 'agUiConnect', list_agents: 'agents', claim_executions: 'claim', heartbeat: 'heartbeat',
  send_delta: 'sendDelta', release_execution: 'release', append_steps: 'appendSteps',
  create_token: 'createToken', create_key: 'createKey', list_keys: 'listKeys', delete_key: 'deleteKey',
  get_limits: 'limits', post_execution_message: 'postExecutionMessage', stop_worker: 'stopWorker',
  get_retention: 'retention', put_retention: 'setRetention', fork_session: 'forkSession',
};

/** Reads a session's events until `done(event)` (with the stream's own reconnects). */
async function until(sessionId, done, options = {}) {
  const seen = [];
  for await (const event of client.events(sessionId, options)) {
    seen.push(event);
    if (done(event)) break;
  }
  return seen;
}

test('the generated types match the server\'s /openapi.json, and every operation has one method', async () => {
  const doc = await client.openapi();
  const checkedIn = await readFile(new URL('../src/schema.gen.ts', import.meta.url), 'utf8');
  assert.equal(generate(doc), checkedIn, 'src/schema.gen.ts is stale: npm run generate -- <server>/openapi.json');
  const operations = Object.values(doc.paths).flatMap((item) => Object.values(item).map((op) => op.operationId)).filter(Boolean);
  assert.deepEqual([...operations].sort(), Object.keys(METHODS).sort(), 'a method for every operation, and no other');
  assert.deepEqual(Object.keys(OPERATIONS).sort(), [...operations].sort());
  for (const [operation, method] of Object.entries(METHODS)) {
    assert.equal(typeof client[method], 'function', `${operation}: client.${method}`);
  }
});

test('sessions: create, get, update, list pages and the iterator that follows next_cursor, delete', async () => {
  const tag = `t${Date.now()}`;
  const created = [];
  for (let i = 0; i < 7; i++) created.push(await client.createSession({ title: `s${i}`, related_type: 'iter', related_id: tag }));
  const one = await client.getSession(created[0].id);
  assert.equal(one.title, 's0');
  const updated = await client.updateSession(created[0].id, { title: 'renamed', status: 'completed' });
  assert.equal(updated.title, 'renamed');
  assert.equal(updated.status, 'completed');
  const page = await client.listSessions({ related_type: 'iter', related_id: tag, limit: 3 });
  assert.equal(page.items.length, 3);
  assert.ok(page.next_cursor);
  let requests = 0;
  const counting = new Stepwise({ baseUrl: srv.url, fetch: (url, init) => { requests += 1; return fetch(url, init); } });
  const all = [];
  for await (const s of counting.sessions({ related_type: 'iter', related_id: tag, limit: 3 })) all.push(s.id);
  assert.equal(requests, 3, 'three pages');
  assert.deepEqual([...all].sort(), created.map((s) => s.id).sort());
  await client.deleteSession(created[1].id);
  assert.equal((await client.getSession(created[1].id)).status, 'deleted');
  const named = await client.createSession({ name: `named-${tag}` });
  assert.deepEqual((await client.listSessions({ name: `named-${tag}` })).items.map((s) => s.id), [named.id]);
});

test('messages, executions, steps, memory, events, export and import', async () => {
  const accepted = await client.postMessageNewSession({ content: 'steps: 2', session: { title: 'runs' } });
  const sessionId = accepted.session_id;
  const events = await until(sessionId, (e) => e.event_type === 'execution.completed');
  assert.ok(events.every((e) => e.id === null || Number.isInteger(e.id)));
  const stored = events.filter((e) => e.id !== null).map((e) => e.id);
  assert.deepEqual(stored, stored.map((_, i) => i + 1), 'ids 1..N in order');
  const execution = await client.getExecution(accepted.execution.id);
  assert.equal(execution.status, 'completed');
  const steps = [];
  for await (const step of client.steps(execution.id, { limit: 1 })) steps.push(step.step_number);
  assert.deepEqual(steps, [1, 2, 3]);
  assert.equal((await client.listSteps(execution.id)).items.length, 3);
  assert.equal((await client.listExecutions(sessionId)).items.length, 1);
  const executions = [];
  for await (const e of client.executions(sessionId)) executions.push(e.id);
  assert.deepEqual(executions, [execution.id]);
  const memory = await client.memory(sessionId);
  assert.equal(memory.steps.length, 3);
  const second = await client.postMessage(sessionId, { content: 'hello' });
  await until(sessionId, (e) => e.event_type === 'execution.completed' && e.execution_id === second.execution.id, { after: stored.at(-1) });
  const texts = [];
  for await (const m of client.messages(sessionId, { roles: ['user', 'assistant'], limit: 1 })) texts.push(m.content);
  assert.deepEqual(texts, ['steps: 2', 'Done: 2 steps', 'hello', 'Echo: hello']);
  assert.equal((await client.listMessages(sessionId, { roles: 'user' })).items.length, 2);
  const document = await client.exportSession(sessionId);
  assert.equal(document.session.id, sessionId);
  const imported = await client.importSession(document);
  assert.notEqual(imported.id, sessionId);
  assert.equal(imported.message_count, document.session.message_count);
  // Finished: a cancel is a conflict.
  await assert.rejects(client.cancelExecution(execution.id), (e) => e instanceof StepwiseError && e.status === 409 && e.code === 'conflict');
});

test('on_busy: reject is 409 session_busy, rollback removes the busy run; a fork at a step', async () => {
  const busy = await client.postMessageNewSession({ content: 'steps: 1000', session: { title: 'busy' } });
  const sessionId = busy.session_id;
  await until(sessionId, (e) => e.event_type === 'step.completed');
  await assert.rejects(
    client.postMessage(sessionId, { content: '2+2', on_busy: 'reject' }),
    (e) => e instanceof StepwiseError && e.status === 409 && e.code === 'session_busy',
  );
  const next = await client.postMessage(sessionId, { content: '2+2', on_busy: 'rollback' });
  await assert.rejects(client.getExecution(busy.execution.id), (e) => e instanceof StepwiseError && e.status === 404);
  let done = await client.getExecution(next.execution.id);
  while (done.status !== 'completed') done = await client.getExecution(next.execution.id);
  const users = [];
  for await (const m of client.messages(sessionId, { roles: 'user' })) users.push(m.content);
  assert.deepEqual(users, ['2+2']);

  const counted = await client.postMessageNewSession({ content: 'steps: 3', session: { title: 'to fork' } });
  let run = await client.getExecution(counted.execution.id);
  while (run.status !== 'completed') run = await client.getExecution(counted.execution.id);
  const fork = await client.forkSession(counted.session_id, { execution_id: run.id, step_number: 2 });
  assert.notEqual(fork.id, counted.session_id);
  const [cut] = (await client.listExecutions(fork.id)).items;
  assert.equal(cut.status, 'cancelled');
  assert.deepEqual((await client.listSteps(cut.id)).items.map((s) => s.step_number), [1, 2]);
  const whole = await client.forkSession(counted.session_id);
  assert.equal(whole.message_count, (await client.getSession(counted.session_id)).message_count);
});

test('an external agent: its execution, steps, snapshots, pause, complete and fail', async () => {
  const session = await client.createSession({ title: 'external' });
  const execution = await client.openExecution(session.id, { agent_type: 'external', input: { task: 'x' } });
  assert.equal(execution.status, 'running');
  const step = await client.appendStep(execution.id, { step_number: 1, kind: 'action', model_output: 'thinking', tool_calls: [] });
  assert.equal(step.step_number, 1);
  const snapshot = await client.saveSnapshot(execution.id, { state: { n: 1 }, step_number: 1 });
  assert.deepEqual((await client.getSnapshot(snapshot.id)).state, { n: 1 });
  assert.equal((await client.listSnapshots(execution.id)).items.length, 1);
  const snapshots = [];
  for await (const s of client.snapshots(execution.id)) snapshots.push(s.id);
  assert.deepEqual(snapshots, [snapshot.id]);
  assert.equal((await client.pauseExecution(execution.id, { question: 'which?' })).status, 'paused');
  const running = await client.openExecution(session.id, { agent_type: 'external' });
  assert.equal((await client.completeExecution(running.id, { output: { ok: true }, final_message: 'done' })).status, 'completed');
  const failing = await client.openExecution(session.id, { agent_type: 'external' });
  assert.equal((await client.failExecution(failing.id, { error_message: 'broken' })).status, 'failed');
  const cancelled = await client.cancelExecution(execution.id);
  assert.equal(cancelled.id, execution.id);
});

test('steps in a batch: numbered in order, idempotent by step_number, a conflict stops the batch', async () => {
  const session = await client.createSession({ title: 'batch' });
  const execution = await client.openExecution(session.id, { agent_type: 'external' });
  const first = await client.appendSteps(execution.id, [{ kind: 'task', model_output: 'a' }, { model_output: 'b' }, { kind: 'action', model_output: 'c' }]);
  assert.equal(first.created, 3);
  assert.deepEqual(first.items.map((s) => s.step_number), [1, 2, 3]);
  assert.deepEqual(first.items.map((s) => s.kind), ['task', 'action', 'action']);
  const again = await client.appendSteps(execution.id, [{ step_number: 3, kind: 'action', model_output: 'c' }, { model_output: 'd' }]);
  assert.equal(again.created, 1);
  assert.deepEqual(again.items.map((s) => s.step_number), [3, 4]);
  const conflict = await client.appendSteps(execution.id, [{ step_number: 5, model_output: 'e' }, { step_number: 2, model_output: 'not b' }]).catch((e) => e);
  assert.ok(conflict instanceof StepwiseError);
  assert.equal(conflict.status, 409);
  assert.deepEqual((await client.listSteps(execution.id)).items.map((s) => s.model_output), ['a', 'b', 'c', 'd', 'e']);
  await assert.rejects(client.appendSteps(execution.id, []), (e) => e.status === 400 || e.status === 422);
});

/** A new worker agent type, its session (with the type as its default agent) and one queued message. */
async function queued(content) {
  const type = `ts-worker-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
  const session = await client.createSession({ title: 'worker', agent: { type } });
  const accepted = await client.postMessage(session.id, { content });
  return { type, session, execution: accepted.execution };
}

/** Claims one execution of `type` (waiting up to 5 s). */
async function claimOne(type, workerId = 'ts-worker-1') {
  const { items } = await client.claim({ worker_id: workerId, agents: [{ type, description: 'The TypeScript client tests' }], slots: 1, wait_s: 5 });
  assert.equal(items.length, 1, `a claim of ${type}`);
  return items[0];
}

test('workers: agents, a claim, heartbeat, deltas, steps and a snapshot with the lease, complete', async () => {
  const builtin = (await client.agents()).items.find((a) => a.type === 'demo');
  assert.equal(builtin.builtin, true);
  assert.equal(builtin.workers_online, null);
  const { type, session, execution } = await queued('hello worker');
  assert.deepEqual(session.agent, { type, config: null });
  assert.equal(execution.status, 'pending');
  assert.equal(execution.agent_type, type);
  assert.equal((await client.agents()).items.some((a) => a.type === type), false, 'not announced yet');

  const claim = await claimOne(type);
  assert.equal(claim.execution.id, execution.id);
  assert.equal(claim.execution.status, 'running');
  assert.equal(claim.session.id, session.id);
  assert.equal(claim.attempt, 1);
  assert.equal(claim.input_text, 'hello worker');
  assert.deepEqual(claim.steps, []);
  assert.equal(claim.resume_answer, null);
  assert.ok(claim.lease.length > 0);
  assert.ok(claim.heartbeat_interval_s > 0 && claim.heartbeat_interval_s < claim.lease_s);
  const announced = (await client.agents()).items.find((a) => a.type === type);
  assert.equal(announced.builtin, false);
  assert.equal(announced.workers_online, 1);
  assert.equal(announced.description, 'The TypeScript client tests');
  assert.ok(announced.last_seen_at);

  const { lease } = claim;
  const beat = await client.heartbeat(execution.id, lease, { worker_id: 'ts-worker-1' });
  assert.equal(beat.execution_id, execution.id);
  assert.equal(beat.cancel_requested, false);
  assert.ok(beat.lease_expires_at);

  // A delta reaches the session's live subscribers (and is never stored).
  const controller = new AbortController();
  const delta = (async () => {
    for await (const event of client.events(session.id, { signal: controller.signal })) {
      if (event.event_type === 'message.delta') return event;
    }
  })();
  let received;
  delta.then((event) => { received = event; });
  for (let i = 0; i < 100 && !received; i++) {
    await client.sendDelta(execution.id, 'Hel', { lease });
    await new Promise((r) => setTimeout(r, 50));
  }
  const event = await delta;
  controller.abort();
  assert.equal(event.id, null);
  assert.equal(event.content, 'Hel');
  assert.equal(event.execution_id, execution.id);

  const step = await client.appendStep(execution.id, { step_number: 1, kind: 'action', model_output: 'thinking' }, { lease });
  assert.equal(step.step_number, 1);
  const batch = await client.appendSteps(execution.id, [{ kind: 'action', model_output: 'a' }, { kind: 'action', model_output: 'b' }], { lease });
  assert.equal(batch.created, 2);
  assert.deepEqual(batch.items.map((s) => s.step_number), [2, 3]);
  const snapshot = await client.saveSnapshot(execution.id, { state: { n: 3 }, step_number: 3 }, { lease });
  assert.equal(snapshot.execution_id, execution.id);
  const completed = await client.completeExecution(execution.id, { output: 'Hello from TypeScript' }, { lease });
  assert.equal(completed.status, 'completed');
  assert.deepEqual((await client.listSteps(execution.id)).items.map((s) => s.model_output), ['thinking', 'a', 'b']);
  const answers = (await client.listMessages(session.id, { roles: 'assistant' })).items.map((m) => m.content);
  assert.deepEqual(answers, ['Hello from TypeScript']);
  // Finished: the lease is no longer current.
  await assert.rejects(client.heartbeat(execution.id, lease), (e) => e instanceof StepwiseError && e.status === 409 && e.code === 'lease_lost');
});

test('workers: a misspelled agent type is 422 unknown_agent; agent.wait queues it; a stopped worker is offline at once', async () => {
  const type = `ts-known-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
  const workerId = `ts-stopper-${Date.now()}`;
  // Announced by a claim that takes nothing.
  const none = await client.claim({ worker_id: workerId, agents: [{ type }], slots: 0, wait_s: 0 });
  assert.deepEqual(none.items, []);
  const misspelled = await client.postMessageNewSession({ content: 'hi', agent: { type: `${type}x` } }).catch((e) => e);
  assert.ok(misspelled instanceof StepwiseError);
  assert.equal(misspelled.status, 422);
  assert.equal(misspelled.code, 'unknown_agent');
  assert.match(misspelled.message, new RegExp(`did you mean ${type}\\?`));
  const queued = await client.postMessageNewSession({ content: 'hi', agent: { type: `${type}x`, wait: true } });
  assert.equal(queued.execution.status, 'pending');
  const known = await client.postMessageNewSession({ content: 'hi', agent: { type } });
  assert.equal(known.execution.agent_type, type);

  const online = async () => (await client.agents()).items.find((a) => a.type === type).workers_online;
  assert.equal(await online(), 1);
  await client.stopWorker(workerId);
  assert.equal(await online(), 0, 'offline at once, still listed');
  const again = await client.stopWorker('ts-never-seen').catch((e) => e);
  assert.equal(again.status, 404);
  await client.cancelExecution(queued.execution.id).catch(() => {});
  await client.cancelExecution(known.execution.id).catch(() => {});
});

test("events: include 'step' puts the whole Step in each step.completed", async () => {
  const accepted = await client.postMessageNewSession({ content: 'steps: 2' });
  const seen = await until(accepted.session_id, (e) => e.event_type === 'execution.completed', { include: 'step' });
  const completed = seen.filter((e) => e.event_type === 'step.completed');
  assert.ok(completed.length >= 2, JSON.stringify(completed));
  for (const event of completed) {
    assert.equal(event.metadata.step.step_number, event.metadata.step_number);
    assert.equal(event.metadata.step.execution_id, accepted.execution.id);
  }
});

test('workers: 409 lease_lost without the lease; release, fail with retry, pause and resume, a subagent', async () => {
  const { type, session, execution } = await queued('try me');
  const claim = await claimOne(type);
  const id = execution.id;
  const lost = (e) => e instanceof StepwiseError && e.status === 409 && e.code === 'lease_lost';
  await assert.rejects(client.appendStep(id, { step_number: 1, kind: 'action', model_output: 'no lease' }), lost);
  await assert.rejects(client.appendStep(id, { step_number: 1, kind: 'action', model_output: 'forged' }, { lease: 'lease_00000000000000000000000000000000' }), lost);
  await assert.rejects(client.appendSteps(id, [{ model_output: 'no lease' }]), lost);
  await assert.rejects(client.saveSnapshot(id, { state: {} }), lost);
  await assert.rejects(client.sendDelta(id, 'no lease'), lost);
  await assert.rejects(client.completeExecution(id, { output: 'no lease' }), lost);
  await assert.rejects(client.failExecution(id, { error_message: 'no lease' }), lost);
  await assert.rejects(client.pauseExecution(id, { question: 'no lease' }), lost);
  await assert.rejects(client.heartbeat(id, 'lease_00000000000000000000000000000000'), lost);
  assert.deepEqual((await client.listSteps(id)).items, [], 'nothing written');
  assert.equal((await client.getExecution(id)).status, 'running');

  // Released: back in the queue without spending an attempt; the old lease is lost.
  const released = await client.release(id, claim.lease);
  assert.equal(released.status, 'pending');
  const second = await claimOne(type, 'ts-worker-2');
  assert.equal(second.execution.id, id);
  assert.equal(second.attempt, 1);
  assert.notEqual(second.lease, claim.lease);
  await assert.rejects(client.appendStep(id, { step_number: 1, kind: 'action', model_output: 'old lease' }, { lease: claim.lease }), lost);
  await client.appendStep(id, { step_number: 1, kind: 'action', model_output: 'first try' }, { lease: second.lease });

  // fail {retry: true}: queued again; the next claim continues from the saved steps.
  const retried = await client.failExecution(id, { error_message: 'flaky', retry: true }, { lease: second.lease });
  assert.equal(retried.status, 'pending');
  const third = await claimOne(type);
  assert.equal(third.attempt, 2);
  assert.deepEqual(third.steps.map((s) => s.model_output), ['first try']);

  // pause: the user's answer queues it again, and the next claim carries it.
  assert.equal((await client.pauseExecution(id, { question: 'which colour?' }, { lease: third.lease })).status, 'paused');
  await assert.rejects(client.heartbeat(id, third.lease), lost);
  await client.postMessage(session.id, { content: 'blue' });
  const resumed = await claimOne(type);
  assert.equal(resumed.execution.id, id);
  assert.equal(resumed.resume_answer, 'blue');
  assert.equal(resumed.steps.at(-1).kind, 'user_input');

  // A subagent of the worker's own type: a pending execution its workers claim.
  const sub = await client.openExecution(session.id, { agent_type: type, input: { task: 'sub' }, parent_execution_id: id });
  assert.equal(sub.status, 'pending');
  const subClaim = await claimOne(type);
  assert.equal(subClaim.execution.id, sub.id);
  assert.equal(subClaim.execution.parent_execution_id, id);
  assert.equal((await client.completeExecution(sub.id, { output: { ok: true } }, { lease: subClaim.lease })).status, 'completed');
  assert.equal((await client.failExecution(id, { error_message: 'gave up' }, { lease: resumed.lease })).status, 'failed');

  // A built-in type cannot be claimed; slots 0 only says the worker is alive.
  await assert.rejects(client.claim({ worker_id: 'ts-worker-1', agents: [{ type: 'demo' }], slots: 1, wait_s: 0 }), (e) => e.status === 422 && e.code === 'invalid_state');
  assert.deepEqual((await client.claim({ worker_id: 'ts-worker-1', agents: [{ type }], slots: 0 })).items, []);
});

test('sessions: the default agent (create, change, drop)', async () => {
  const session = await client.createSession({ title: 'agent', agent: { type: 'demo', config: { x: 1 } } });
  assert.deepEqual(session.agent, { type: 'demo', config: { x: 1 } });
  const worker = await client.updateSession(session.id, { agent: { type: 'ts-someone' } });
  assert.equal(worker.agent.type, 'ts-someone');
  const dropped = await client.updateSession(session.id, { agent: null });
  assert.equal(dropped.agent, null);
  assert.equal((await client.getSession(session.id)).agent, null);
  const untouched = await client.updateSession(session.id, { title: 'renamed' });
  assert.equal(untouched.agent, null);
  await assert.rejects(client.createSession({ agent: { type: 'external' } }), (e) => e.status === 400);
});

test('conversation items', async () => {
  const session = await client.createSession();
  const added = await client.appendItems(session.id, { items: [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }] });
  assert.equal(added.added, 2);
  assert.deepEqual((await client.listItems(session.id)).items.map((i) => i.content), ['a', 'b']);
  assert.equal((await client.popItem(session.id)).item.content, 'b');
  const cleared = await client.clearItems(session.id);
  assert.equal(cleared.cleared, 1);
  assert.equal((await client.listItems(session.id, { limit: 0 })).version, cleared.version);
});

test('LangGraph checkpoints: put, writes, get, list and iterate, copy, delete', async () => {
  const thread = `thread-${Date.now()}`;
  const data = Buffer.from('{}').toString('base64');
  const first = await client.putCheckpoint(thread, 'c1', { checkpoint: { type: 'json', data }, metadata: { run_id: 'run-1' } });
  assert.equal(first.checkpoint_id, 'c1');
  await client.putCheckpoint(thread, 'c2', { checkpoint: { type: 'json', data }, parent_checkpoint_id: 'c1', metadata: { run_id: 'run-2' } });
  await client.putCheckpointWrites(thread, 'c2', { task_id: 't1', writes: [{ idx: 0, channel: 'x', type: 'json', data }] });
  const latest = await client.getLatestCheckpoint(thread);
  assert.equal(latest.checkpoint_id, 'c2');
  assert.equal(latest.pending_writes.length, 1);
  assert.equal((await client.getCheckpoint(thread, 'c1')).checkpoint_id, 'c1');
  assert.equal((await client.listCheckpoints(thread, { limit: 1 })).items.length, 1);
  const ids = [];
  for await (const c of client.checkpoints(thread, { limit: 1 })) ids.push(c.checkpoint_id);
  assert.deepEqual(ids, ['c2', 'c1']);
  const filtered = await client.listCheckpoints(thread, { filter: { run_id: 'run-1' } });
  assert.deepEqual(filtered.items.map((c) => c.checkpoint_id), ['c1']);
  assert.ok((await client.listAllCheckpoints()).items.length >= 2);
  const everywhere = [];
  for await (const c of client.allCheckpoints({ limit: 1 })) everywhere.push(c.checkpoint_id);
  assert.ok(everywhere.includes('c1') && everywhere.includes('c2'));
  assert.equal((await client.getThread(thread)).thread_id, thread);
  const copy = await client.copyThread(thread, { target_thread_id: `${thread}-copy` });
  assert.equal(copy.thread_id, `${thread}-copy`);
  assert.equal((await client.deleteCheckpointsForRuns({ run_ids: ['run-1'] })).deleted >= 1, true);
  assert.equal(typeof (await client.pruneCheckpoints({ thread_ids: [thread] })).deleted, 'number');
  await client.deleteThread(`${thread}-copy`);
  await assert.rejects(client.getThread(`${thread}-copy`), (e) => e.status === 404);
});

test('the AI SDK and AG-UI streams', async () => {
  const chatId = `chat-${Date.now()}`;
  const parts = [];
  for await (const part of client.aiSdkChat({ id: chatId, messages: [{ id: 'u', role: 'user', parts: [{ type: 'text', text: 'hello' }] }] })) parts.push(part);
  assert.equal(parts[0].type, 'start');
  assert.equal(parts.at(-1).type, 'finish');
  assert.equal(await client.aiSdkResume(chatId), null);
  await assert.rejects(client.aiSdkCancel(chatId), (e) => e.status === 409);
  const events = [];
  for await (const event of client.agUiRun({ threadId: chatId, runId: 'r1', messages: [{ id: 'm', role: 'user', content: 'hi again' }] })) events.push(event.type);
  assert.equal(events[0], 'RUN_STARTED');
  assert.equal(events.at(-1), 'RUN_FINISHED');
  const connected = [];
  for await (const event of client.agUiConnect({ threadId: chatId, runId: 'r2', messages: [] })) connected.push(event);
  assert.deepEqual(connected.map((e) => e.type), ['RUN_STARTED', 'MESSAGES_SNAPSHOT', 'RUN_FINISHED']);
  assert.equal(connected[1].messages.length, 4);
});

test('operations: health, readiness, metrics', async () => {
  await client.healthz();
  await client.readyz();
  assert.match(await client.metrics(), /^# (HELP|TYPE) /m);
  const limits = await client.limits();
  assert.equal(limits.max_content_chars, 100000);
  assert.ok(limits.max_body_bytes > 0);
  // The tenant's own retention: set, read back, and the server's again.
  const server = await client.retention();
  assert.equal(server.own.completed_days, null);
  const own = await client.setRetention({ completed_days: 7 });
  assert.equal(own.completed_days, 7);
  assert.equal(own.abandoned_days, server.abandoned_days);
  assert.deepEqual(await client.retention(), own);
  const back = await client.setRetention({});
  assert.equal(back.completed_days, server.server.completed_days);
  const refused = await client.setRetention({ completed_days: 0 }).catch((e) => e);
  assert.equal(refused.status, 400);
});

test('errors: one class with the API\'s code, message, field and status', async () => {
  const missing = await client.getSession('01890000-0000-7000-8000-000000000000').catch((e) => e);
  assert.ok(missing instanceof StepwiseError);
  assert.equal(missing.status, 404);
  assert.equal(missing.code, 'not_found');
  assert.ok(missing.message.length > 0);
  assert.ok(missing.requestId);
  const invalid = await client.createSession({ name: 'not a name' }).catch((e) => e);
  assert.equal(invalid.status, 400);
  assert.equal(invalid.code, 'invalid_request');
  assert.equal(invalid.field, 'name');
  const down = await new Stepwise({ baseUrl: 'http://127.0.0.1:9' }).healthz().catch((e) => e);
  assert.equal(down.status, 0);
  assert.equal(down.code, 'network_error');
  assert.throws(() => new Stepwise({ baseUrl: 'localhost:1' }), TypeError);
  // A server with a key: the key is sent, and its absence is a 401.
  const keyed = await server();
  try {
    const key = keyed.createKey();
    const unauthorized = await new Stepwise({ baseUrl: keyed.url }).listSessions().catch((e) => e);
    assert.equal(unauthorized.status, 401);
    assert.equal(unauthorized.code, 'unauthorized');
    assert.deepEqual((await new Stepwise({ baseUrl: keyed.url, apiKey: key }).listSessions()).items, []);
  } finally {
    await keyed.stop();
  }
});

test('events(): across a server restart, every stored event once, in order; an AbortSignal ends it', async () => {
  const restarting = await server({ stepMs: 40 });
  try {
    const c = new Stepwise({ baseUrl: restarting.url, reconnectDelayMs: 50 });
    const accepted = await c.postMessageNewSession({ content: 'steps: 25' });
    const seen = [];
    let restarted = false;
    for await (const event of c.events(accepted.session_id)) {
      seen.push(event);
      if (!restarted && seen.filter((e) => e.event_type === 'step.completed').length === 3) {
        restarted = true;
        await restarting.stop();
        await restarting.start();
      }
      if (event.event_type === 'execution.completed') break;
    }
    assert.ok(restarted);
    const stored = seen.filter((e) => e.id !== null).map((e) => e.id);
    // Read again from the start: the same events, none missing, none twice.
    const again = [];
    for await (const event of c.events(accepted.session_id)) {
      again.push(event.id);
      if (event.event_type === 'execution.completed') break;
    }
    assert.deepEqual(stored, again);
    assert.deepEqual(stored, stored.map((_, i) => i + 1));
    assert.equal(seen.filter((e) => e.event_type === 'step.completed').length, 26);
    // An AbortSignal ends the iteration of a live stream.
    const controller = new AbortController();
    const ended = [];
    for await (const event of c.events(accepted.session_id, { after: stored.at(-1) - 1, signal: controller.signal })) {
      ended.push(event.id);
      controller.abort();
    }
    assert.deepEqual(ended, [stored.at(-1)]);
  } finally {
    await restarting.stop();
  }
});

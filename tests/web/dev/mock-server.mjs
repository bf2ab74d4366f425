// A small in-memory stand-in for `stepwise serve`, for working on the UI without building the
// Rust server. It follows docs/api.md closely enough for the UI (sessions, messages, executions,
// steps, snapshots, SSE with replay, the agent list and sessions' agents, the limits) and runs
// the demo agent's rules; a message for the worker type `mock-worker` (listed, never online)
// waits in the queue, as for a worker that is not running, and one for a type no worker ever
// announced is 422 `unknown_agent`. The browser tests run
// against the real server (run.sh); this is only a development aid:
//   node tests/web/dev/mock-server.mjs [port]   (MOCK_API_KEY=secret to require a key)
// With a key, it is an admin key: POST /v1/tokens mints end-user tokens, and a token's user sees
// only its own sessions (the UI's `/#token=...` sign-in).
// With UPSTREAM=http://127.0.0.1:7777 it serves the UI files from disk and forwards everything
// else to that real server: edit the UI without rebuilding the binary.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';

const here = path.dirname(fileURLToPath(import.meta.url));
const uiDir = path.resolve(here, '../../../crates/server/ui');
const stepMs = Number(process.env.STEPWISE_DEMO_STEP_MS || 250);
// GET /v1/limits, as the server answers it by default.
const LIMITS = { max_content_chars: 100000, max_body_bytes: 4194304, max_title_chars: 500, max_metadata_bytes: 16384 };
// The worker agent type the mock lists (announced once, no worker online now).
const WORKER_TYPE = 'mock-worker';
const apiKey = process.env.MOCK_API_KEY || '';
// Minted end-user tokens: token -> {user_id, expires_at (ms)}.
const tokens = new Map();

const now = () => new Date().toISOString().replace('Z', '000Z').replace(/\.(\d{3})000Z$/, (_, ms) => `.${ms}000Z`);
const sessions = new Map();
const messages = new Map();
const executions = new Map();
const steps = new Map();
const snapshots = new Map();
const events = new Map();
const subscribers = new Map();
const cancelled = new Set();

function sessionOf(id) { return sessions.get(id); }

function publish(sessionId, type, fields) {
  const list = events.get(sessionId) || [];
  events.set(sessionId, list);
  const ev = { session_id: sessionId, message_id: null, execution_id: null, event_type: type, content: '', metadata: {}, timestamp: now(), ...fields };
  const live = type === 'message.delta';
  const id = live ? null : list.length + 1;
  if (!live) list.push({ id, ev });
  for (const sub of subscribers.get(sessionId) || []) sub(id, ev);
}

// The metadata the engine puts on a step's info message.
function stepMeta(stepNumber, tool, kind) {
  return { metadata: { step_number: stepNumber, ...(tool ? { tool } : {}), kind } };
}

function addMessage(sessionId, role, content, executionId, extra = {}) {
  const msg = { id: randomUUID(), session_id: sessionId, role, content, execution_id: executionId || null, related_type: null, related_id: null, context_url: null, metadata: {}, created_at: now(), ...extra };
  messages.get(sessionId).push(msg);
  const s = sessionOf(sessionId);
  s.message_count += 1;
  s.updated_at = now();
  // Like the engine: the event's metadata carries the message's own keys beside `role`.
  publish(sessionId, 'message.created', { message_id: msg.id, execution_id: msg.execution_id, content, metadata: { ...msg.metadata, role } });
  return msg;
}

// Who calls: the admin key (or no key at all), or an end user's unexpired token; null otherwise.
function callerOf(req, url) {
  if (!apiKey) return { role: 'admin', user_id: 'local' };
  const header = req.headers.authorization || '';
  const bearer = header.startsWith('Bearer ') ? header.slice(7) : url.searchParams.get('access_token');
  if (bearer === apiKey) return { role: 'admin', user_id: 'local' };
  const token = tokens.get(bearer);
  return token && token.expires_at > Date.now() ? { role: 'user', user_id: token.user_id } : null;
}

function visibleTo(caller, s) {
  return caller.role === 'admin' || s.user_id === caller.user_id;
}

function newSession(body, caller) {
  const s = { id: randomUUID(), tenant_id: 'local', user_id: caller.user_id, name: body.name || null, title: body.title || null, status: 'active', related_type: body.related_type || null, related_id: body.related_id || null, initial_context_url: body.initial_context_url || null, metadata: body.metadata || {}, agent: agentOf(body.agent), last_execution_id: null, last_snapshot_id: null, message_count: 0, created_at: now(), updated_at: now() };
  sessions.set(s.id, s);
  messages.set(s.id, []);
  events.set(s.id, []);
  return s;
}

// A session's or message's `agent` as stored: `{type, config}` or null.
function agentOf(agent) {
  if (agent == null) return null;
  if (typeof agent.type !== 'string' || !/^[A-Za-z0-9._-]{1,64}$/.test(agent.type)) throw new Error('agent.type must be 1-64 characters [A-Za-z0-9._-]');
  return { type: agent.type, config: agent.config ?? null };
}

function newExecution(sessionId, input, parent, agentType = 'demo') {
  const e = { id: randomUUID(), session_id: sessionId, parent_execution_id: parent || null, tenant_id: 'local', user_id: 'local', agent_type: agentType, agent_config: {}, status: 'pending', input, output: null, last_snapshot_id: null, step_count: 0, token_usage: { input: 0, output: 0, total: 0 }, metadata: {}, error_message: null, attempts: 0, started_at: null, completed_at: null, created_at: now(), updated_at: now() };
  executions.set(e.id, e);
  steps.set(e.id, []);
  snapshots.set(e.id, []);
  return e;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function addStep(e, kind, body) {
  const list = steps.get(e.id);
  const step = { id: randomUUID(), execution_id: e.id, session_id: e.session_id, step_number: list.length + 1, kind, model_output: null, tool_calls: [], code: null, observations: null, error: null, output: null, token_usage: { input: 0, output: 0, total: 0 }, started_at: now(), ended_at: now(), created_at: now(), ...body };
  list.push(step);
  e.step_count = list.length;
  return step;
}

function snapshot(e, isFinal) {
  const snap = { id: randomUUID(), execution_id: e.id, parent_snapshot_id: null, agent_id: null, agent_name: 'demo', step_number: e.step_count, is_final: isFinal, debug_mode: false, state: { steps: steps.get(e.id).map((s) => ({ n: s.step_number, kind: s.kind })), input: e.input, nested: { a: [1, 2, { b: 'c' }] } }, created_at: now() };
  snapshots.get(e.id).push(snap);
  e.last_snapshot_id = snap.id;
  return snap;
}

function finish(e, status, answer, error) {
  if (status === 'completed') {
    const step = addStep(e, 'final_answer', { output: answer });
    if (e.session_id) addMessage(e.session_id, 'info', `${e.parent_execution_id ? 'Subagent step' : 'Step'} ${step.step_number}: final answer`, e.id, stepMeta(step.step_number, null, 'final_answer'));
    publish(e.session_id, 'step.completed', { execution_id: e.id, content: `Completed step ${step.step_number}`, metadata: { step_number: step.step_number } });
  }
  e.status = status;
  e.completed_at = now();
  e.updated_at = now();
  if (status === 'completed') {
    e.output = { answer };
    snapshot(e, true);
    if (!e.parent_execution_id) {
      for (const word of answer.split(/(?<= )/)) publish(e.session_id, 'message.delta', { execution_id: e.id, content: word });
      addMessage(e.session_id, 'assistant', answer, e.id);
    }
    publish(e.session_id, 'execution.completed', { execution_id: e.id, content: 'Execution completed' });
  } else if (status === 'failed') {
    e.error_message = error;
    addMessage(e.session_id, 'info', `Execution failed: ${error}`, e.id);
    publish(e.session_id, 'execution.failed', { execution_id: e.id, content: error });
  } else if (status === 'cancelled') {
    addMessage(e.session_id, 'info', 'Execution cancelled', e.id);
    publish(e.session_id, 'execution.cancelled', { execution_id: e.id, content: 'Execution cancelled' });
  }
}

async function run(e) {
  const sid = e.session_id;
  e.status = 'running';
  e.started_at = e.started_at || now();
  e.attempts += 1;
  addMessage(sid, 'info', 'Execution started', e.id);
  publish(sid, 'execution.started', { execution_id: e.id, content: 'Execution started' });
  const text = String(e.input.content || '');
  const resumeAnswer = e.resumeAnswer;
  if (resumeAnswer != null) {
    e.resumeAnswer = null;
    addStep(e, 'user_input', { observations: resumeAnswer });
    return finish(e, 'completed', `You said: ${resumeAnswer}`);
  }
  let m;
  if ((m = text.match(/steps:\s*(\d+)/i))) {
    const n = Number(m[1]);
    for (let i = 1; i <= n; i += 1) {
      await sleep(stepMs);
      if (cancelled.has(e.id)) return finish(e, 'cancelled');
      publish(sid, 'step.started', { execution_id: e.id, content: `Step ${i}`, metadata: { step_number: i } });
      addStep(e, 'action', { model_output: `Step ${i} of ${n}: computing ${i}.`, tool_calls: [{ id: `call_${i}`, name: 'calculator', arguments: { expression: String(i) } }], observations: String(i), token_usage: { input: 10, output: 5, total: 15 } });
      addMessage(sid, 'info', `Step ${i}: called calculator`, e.id, stepMeta(i, 'calculator', 'action'));
      publish(sid, 'step.completed', { execution_id: e.id, content: `Completed step ${i}`, metadata: { step_number: i, tool: 'calculator' } });
    }
    return finish(e, 'completed', `Done: ${n} steps`);
  }
  if (/ask me/i.test(text)) {
    await sleep(stepMs);
    addStep(e, 'action', { tool_calls: [{ id: 'call_q', name: 'user_input', arguments: { question: 'What should I use?' } }] });
    e.status = 'paused';
    snapshot(e, false);
    addMessage(sid, 'assistant', 'What should I use?', e.id);
    publish(sid, 'execution.paused', { execution_id: e.id, content: 'What should I use?' });
    return undefined;
  }
  if ((m = text.match(/delegate:\s*(.*)/i))) {
    const child = newExecution(sid, { content: m[1] }, e.id);
    addStep(e, 'action', { tool_calls: [{ id: 'call_s', name: 'subagent', arguments: { task: m[1] } }] });
    await run(child);
    return finish(e, 'completed', child.output ? child.output.answer : 'no answer');
  }
  if (/^[\d\s+\-*/%().]+$/.test(text.trim()) && /\d/.test(text)) {
    await sleep(stepMs);
    // eslint-disable-next-line no-new-func
    const value = String(Function(`return (${text})`)());
    addStep(e, 'action', { tool_calls: [{ id: 'call_c', name: 'calculator', arguments: { expression: text } }], observations: value });
    addMessage(sid, 'info', 'Step 1: called calculator', e.id, stepMeta(1, 'calculator', 'action'));
    return finish(e, 'completed', value);
  }
  if (/\bfail\b/i.test(text)) {
    await sleep(stepMs);
    addStep(e, 'action', { tool_calls: [{ id: 'call_f', name: 'calculator', arguments: { expression: '1/0' } }], error: { kind: 'tool_error', message: 'division by zero' } });
    addMessage(sid, 'info', 'Step 1: called calculator', e.id, stepMeta(1, 'calculator', 'action'));
    return finish(e, 'failed', null, 'division by zero');
  }
  await sleep(stepMs);
  addStep(e, 'action', { model_output: 'I will echo the message.' });
  return finish(e, 'completed', `Echo: ${text}`);
}

// A request the server refuses, thrown to the handler with its status and error code.
class Refused extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function postMessage(sessionId, body) {
  const s = sessionOf(sessionId);
  if (typeof body.content !== 'string' || [...body.content].length > LIMITS.max_content_chars) {
    throw new Refused(413, 'payload_too_large', `content is longer than ${LIMITS.max_content_chars} characters`);
  }
  const named = (agentOf(body.agent) || s.agent || { type: 'demo' }).type;
  if (named !== 'demo' && named !== WORKER_TYPE) {
    throw new Refused(422, 'unknown_agent', `no worker ever announced agent type '${named}'; did you mean '${WORKER_TYPE}'?`);
  }
  const msg = addMessage(sessionId, 'user', body.content, null, { related_type: body.related_type || null, related_id: body.related_id || null, context_url: body.context_url || null });
  const latest = [...executions.values()].filter((x) => x.session_id === sessionId && !x.parent_execution_id).pop();
  if (latest && latest.status === 'paused') {
    latest.resumeAnswer = body.content;
    latest.status = 'pending';
    msg.execution_id = latest.id;
    addMessage(sessionId, 'info', 'Execution resumed', latest.id);
    publish(sessionId, 'execution.queued', { execution_id: latest.id, content: 'Execution resumed' });
    setTimeout(() => run(latest), 10);
    return { session_id: sessionId, message: msg, execution: latest };
  }
  // The message's agent, else the session's, else the server's default (the demo agent).
  const agentType = (agentOf(body.agent) || s.agent || { type: 'demo' }).type;
  const e = newExecution(sessionId, { content: body.content }, null, agentType);
  msg.execution_id = e.id;
  s.last_execution_id = e.id;
  // No workers here: another agent type's execution stays queued (cancel still works).
  const queued = agentType === 'demo' ? 'Execution queued' : `Execution queued for agent '${agentType}': no worker of it is online; it runs when one connects`;
  addMessage(sessionId, 'info', queued, e.id);
  publish(sessionId, 'execution.queued', { execution_id: e.id, content: queued });
  if (agentType === 'demo') setTimeout(() => run(e), 10);
  return { session_id: sessionId, message: msg, execution: { ...e } };
}

function send(res, status, body) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(body == null ? '' : JSON.stringify(body));
}
function error(res, status, code, message) {
  send(res, status, { error: { code, message, field: null } });
}
function page(res, items, url) {
  const limit = Number(url.searchParams.get('limit') || 50);
  const start = Number(url.searchParams.get('cursor') || 0);
  const slice = items.slice(start, start + limit);
  send(res, 200, { items: slice, next_cursor: start + limit < items.length ? String(start + limit) : null });
}

async function readBody(req) {
  let text = '';
  for await (const chunk of req) text += chunk;
  return text ? JSON.parse(text) : {};
}

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://x');
  const p = url.pathname;
  const files = { '/': ['index.html', 'text/html; charset=utf-8'], '/app.css': ['app.css', 'text/css; charset=utf-8'], '/favicon.svg': ['favicon.svg', 'image/svg+xml'] };
  // The UI's modules: ui/js/NAME.js, and nothing else.
  if (/^\/js\/[a-z]+\.js$/.test(p) && fs.existsSync(path.join(uiDir, p))) files[p] = [p.slice(1), 'text/javascript; charset=utf-8'];
  if (files[p]) {
    res.writeHead(200, { 'Content-Type': files[p][1], 'Cache-Control': 'no-cache', 'Content-Security-Policy': "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'" });
    res.end(fs.readFileSync(path.join(uiDir, files[p][0])));
    return;
  }
  if (process.env.UPSTREAM) {
    const upstream = new URL(req.url, process.env.UPSTREAM);
    const forward = http.request(upstream, { method: req.method, headers: { ...req.headers, host: upstream.host } }, (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    });
    forward.on('error', (err) => error(res, 502, 'bad_gateway', String(err.message)));
    res.on('close', () => forward.destroy());
    req.pipe(forward);
    return undefined;
  }
  if (p === '/healthz') return send(res, 200, { status: 'ok' });
  if (!p.startsWith('/v1/')) return error(res, 404, 'not_found', 'no such path');
  const caller = callerOf(req, url);
  if (!caller) return error(res, 401, 'unauthorized', 'API key required');
  let m;
  try {
    if (p === '/v1/agents' && req.method === 'GET') {
      return send(res, 200, { items: [
        { type: 'demo', description: "Stepwise's demo agent: `steps: N`, `ask me`, `delegate: TASK`, arithmetic, `time`", builtin: true, workers_online: null, last_seen_at: null, config_schema: null },
        { type: WORKER_TYPE, description: 'A worker agent whose worker is not running', builtin: false, workers_online: 0, last_seen_at: now(), config_schema: null },
      ] });
    }
    if (p === '/v1/limits' && req.method === 'GET') return send(res, 200, LIMITS);
    if (p === '/v1/tokens' && req.method === 'POST') {
      if (caller.role !== 'admin') return error(res, 403, 'forbidden', 'only an admin key mints tokens');
      const body = await readBody(req);
      const token = `mock-${randomUUID()}`;
      const expiresAt = Date.now() + 1000 * (body.ttl_s || 3600);
      tokens.set(token, { user_id: body.user_id, expires_at: expiresAt });
      return send(res, 201, { token, user_id: body.user_id, expires_at: new Date(expiresAt).toISOString() });
    }
    if (p === '/v1/sessions' && req.method === 'GET') {
      const status = url.searchParams.get('status');
      const list = [...sessions.values()].filter((s) => visibleTo(caller, s) && (status ? s.status === status : s.status !== 'deleted')).sort((a, b) => b.updated_at.localeCompare(a.updated_at));
      return page(res, list, url);
    }
    if (p === '/v1/sessions' && req.method === 'POST') return send(res, 201, newSession(await readBody(req), caller));
    if (p === '/v1/messages' && req.method === 'POST') {
      const body = await readBody(req);
      const s = newSession(body.session || {}, caller);
      return send(res, 202, postMessage(s.id, body));
    }
    if ((m = p.match(/^\/v1\/sessions\/([^/]+)(\/.*)?$/))) {
      const s = sessionOf(m[1]);
      if (!s || !visibleTo(caller, s)) return error(res, 404, 'not_found', 'no such session');
      const rest = m[2] || '';
      if (!rest && req.method === 'GET') return send(res, 200, s);
      if (!rest && req.method === 'PATCH') {
        const body = await readBody(req);
        if (body.title != null) s.title = body.title;
        if (body.status != null) s.status = body.status;
        if (body.agent !== undefined) s.agent = agentOf(body.agent);
        s.updated_at = now();
        return send(res, 200, s);
      }
      if (!rest && req.method === 'DELETE') {
        s.status = 'deleted';
        res.writeHead(204);
        return res.end();
      }
      if (rest === '/messages' && req.method === 'GET') {
        let list = messages.get(s.id);
        const after = url.searchParams.get('after');
        if (after) list = list.slice(list.findIndex((x) => x.id === after) + 1);
        return page(res, list, url);
      }
      if (rest === '/messages' && req.method === 'POST') return send(res, 202, postMessage(s.id, await readBody(req)));
      if (rest === '/executions' && req.method === 'GET') return page(res, [...executions.values()].filter((e) => e.session_id === s.id), url);
      if (rest === '/events') {
        res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
        const after = Number(req.headers['last-event-id'] || url.searchParams.get('after') || 0);
        const write = (id, ev) => res.write(`${id ? `id: ${id}\n` : ''}event: ${ev.event_type}\ndata: ${JSON.stringify(ev)}\n\n`);
        for (const { id, ev } of events.get(s.id)) if (id > after) write(id, ev);
        const subs = subscribers.get(s.id) || new Set();
        subscribers.set(s.id, subs);
        subs.add(write);
        const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), 15000);
        res.on('close', () => { subs.delete(write); clearInterval(keepAlive); });
        return undefined;
      }
    }
    if ((m = p.match(/^\/v1\/executions\/([^/]+)(\/.*)?$/))) {
      const e = executions.get(m[1]);
      if (!e || !visibleTo(caller, sessionOf(e.session_id))) return error(res, 404, 'not_found', 'no such execution');
      const rest = m[2] || '';
      if (!rest) return send(res, 200, e);
      if (rest === '/steps') return page(res, steps.get(e.id), url);
      if (rest === '/snapshots') return page(res, snapshots.get(e.id).map((x) => ({ ...x, state: null })), url);
      if (rest === '/cancel' && req.method === 'POST') {
        if (['completed', 'failed', 'cancelled'].includes(e.status)) return error(res, 409, 'conflict', 'already finished');
        if (e.status === 'paused' || e.status === 'pending') finish(e, 'cancelled');
        else cancelled.add(e.id);
        return send(res, 202, e);
      }
    }
    if ((m = p.match(/^\/v1\/snapshots\/([^/]+)$/))) {
      for (const [execId, list] of snapshots) {
        const snap = list.find((x) => x.id === m[1]);
        if (snap && visibleTo(caller, sessionOf(executions.get(execId).session_id))) return send(res, 200, snap);
      }
      return error(res, 404, 'not_found', 'no such snapshot');
    }
    return error(res, 404, 'not_found', 'no such path');
  } catch (err) {
    if (err instanceof Refused) return error(res, err.status, err.code, err.message);
    return error(res, 400, 'invalid_request', String(err.message));
  }
});

server.listen(Number(process.argv[2] || 0), '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});

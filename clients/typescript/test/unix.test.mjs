// The client over a Unix socket (`baseUrl: 'unix:PATH'`, through node:http): first its transport
// against a small Node HTTP server on a socket (bodies, headers, SSE and its reconnect, aborts),
// then a representative set of calls against `stepwise serve --listen unix:PATH`, twinned over
// TCP, and the event stream across a restart of the socket's server.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { Stepwise, StepwiseError } from '../dist/index.js';
import { server } from './server.mjs';

describe('unix: the transport, against a Node HTTP server on a socket', () => {
  let socket;
  let http;
  /** Each request's method, url and headers, in order. */
  const requests = [];
  /** How many event streams the server saw closed. */
  let streamsClosed = 0;
  /** The first event stream drops after this many events. */
  let dropAfter = 3;
  const big = 'x'.repeat(3_000_000);

  before(async () => {
    socket = join(mkdtempSync(join(tmpdir(), 'stepwise-ts-unix-')), 's.sock');
    http = createServer((req, res) => {
      requests.push({ method: req.method, url: req.url, headers: req.headers });
      let body = '';
      req.on('data', (d) => { body += d; });
      req.on('end', () => {
        const url = new URL(req.url, 'http://localhost');
        const json = (status, value) => {
          res.writeHead(status, { 'content-type': 'application/json', 'x-request-id': `r${requests.length}` });
          res.end(JSON.stringify(value));
        };
        if (url.pathname === '/v1/sessions' && req.method === 'POST') return json(201, { id: 's1', body: JSON.parse(body) });
        if (url.pathname === '/v1/sessions' && req.method === 'GET') {
          return json(200, url.searchParams.get('cursor') === 'c2' ? { items: [{ id: 'b' }], next_cursor: null } : { items: [{ id: 'a' }], next_cursor: 'c2' });
        }
        if (url.pathname === '/v1/sessions/s1' && req.method === 'DELETE') {
          res.writeHead(204);
          return res.end();
        }
        if (url.pathname === '/metrics') {
          res.writeHead(200, { 'content-type': 'text/plain' });
          return res.end(big);
        }
        if (url.pathname === '/v1/sessions/s1/events') {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          let id = Number(req.headers['last-event-id'] ?? url.searchParams.get('after') ?? 0);
          let sent = 0;
          const timer = setInterval(() => {
            id += 1;
            sent += 1;
            res.write(`id: ${id}\nevent: step.completed\ndata: ${JSON.stringify({ event_type: 'step.completed', n: id })}\n\n`);
            if (dropAfter && sent === dropAfter) {
              dropAfter = 0;
              clearInterval(timer);
              setTimeout(() => res.socket.destroy(), 20);
            }
          }, 5);
          res.on('close', () => {
            streamsClosed += 1;
            clearInterval(timer);
          });
          return;
        }
        if (url.pathname === '/v1/ai-sdk/chat') {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write('data: {"type":"start"}\n\n');
          setTimeout(() => res.end('data: {"type":"finish"}\n\ndata: [DONE]\n\n'), 20);
          return;
        }
        json(404, { error: { code: 'not_found', message: 'no such thing', field: null } });
      });
    });
    await new Promise((resolve) => http.listen(socket, resolve));
  });
  after(() => new Promise((resolve) => {
    http?.closeAllConnections();
    http ? http.close(resolve) : resolve();
  }));

  test('JSON calls: method, path, query, headers and body go over the socket; lists follow cursors; errors', async () => {
    const client = new Stepwise({ baseUrl: `unix:${socket}`, apiKey: 'k' });
    assert.equal(client.baseUrl, `unix:${socket}`);
    assert.deepEqual(await client.createSession({ title: 't' }), { id: 's1', body: { title: 't' } });
    const post = requests.at(-1);
    assert.equal(post.method, 'POST');
    assert.equal(post.headers.authorization, 'Bearer k');
    assert.equal(post.headers['content-type'], 'application/json');
    assert.equal(post.headers['content-length'], String(JSON.stringify({ title: 't' }).length));
    const ids = [];
    for await (const s of client.sessions({ limit: 1 })) ids.push(s.id);
    assert.deepEqual(ids, ['a', 'b']);
    assert.equal(requests.at(-1).url, '/v1/sessions?limit=1&cursor=c2');
    await client.deleteSession('s1'); // 204: no body
    assert.equal(requests.at(-1).headers['content-length'], '0');
    const missing = await client.getSession('none').catch((e) => e);
    assert.ok(missing instanceof StepwiseError);
    assert.equal(missing.status, 404);
    assert.equal(missing.code, 'not_found');
    assert.equal(missing.requestId, `r${requests.length}`);
    assert.equal((await client.metrics()).length, big.length, 'a body of many chunks, whole');
    const parts = [];
    for await (const part of client.aiSdkChat({ id: 'c', messages: [] })) parts.push(part.type);
    assert.deepEqual(parts, ['start', 'finish']);
    // A path relative to the working directory.
    const relativeClient = new Stepwise({ baseUrl: `unix:${relative(process.cwd(), socket)}` });
    assert.equal((await relativeClient.createSession()).id, 's1');
  });

  test('the event stream: reconnected with Last-Event-ID after a drop; break and an AbortSignal close it', async () => {
    const client = new Stepwise({ baseUrl: `unix:${socket}`, reconnectDelayMs: 20 });
    const ids = [];
    for await (const event of client.events('s1')) {
      ids.push(event.id);
      if (ids.length === 8) break;
    }
    assert.deepEqual(ids, [1, 2, 3, 4, 5, 6, 7, 8], 'no gap, no duplicate');
    const streams = requests.filter((r) => r.url.startsWith('/v1/sessions/s1/events'));
    assert.equal(streams.length, 2);
    assert.equal(streams[0].headers['last-event-id'], undefined);
    assert.equal(streams[1].headers['last-event-id'], '3');
    assert.equal(streams[1].headers.accept, 'text/event-stream');
    const closed = async (n) => {
      for (let i = 0; i < 100 && streamsClosed < n; i++) await new Promise((r) => setTimeout(r, 10));
      assert.equal(streamsClosed, n);
    };
    await closed(2);
    const controller = new AbortController();
    const live = [];
    for await (const event of client.events('s1', { after: 100, signal: controller.signal })) {
      live.push(event.id);
      if (live.length === 2) controller.abort();
    }
    assert.deepEqual(live, [101, 102]);
    await closed(3);
    // Aborted before any answer: the call rejects with the abort.
    const aborted = new AbortController();
    aborted.abort();
    await assert.rejects(client.claim({ worker_id: 'w', agents: [] }, { signal: aborted.signal }), (e) => e.name === 'AbortError');
  });

  test('no socket there is a network_error; a given fetch wins; without Node a unix: baseUrl is a TypeError', async () => {
    const down = await new Stepwise({ baseUrl: `unix:${socket}.none` }).healthz().catch((e) => e);
    assert.ok(down instanceof StepwiseError);
    assert.equal(down.status, 0);
    assert.equal(down.code, 'network_error');
    assert.match(down.message, /ENOENT/);
    assert.throws(() => new Stepwise({ baseUrl: 'unix:' }), TypeError);
    let asked;
    const given = new Stepwise({ baseUrl: `unix:${socket}`, fetch: async (url) => { asked = url; return new Response(null, { status: 200 }); } });
    await given.healthz();
    assert.equal(asked, 'http://localhost/healthz');
    // A browser: no `process`.
    const saved = Object.getOwnPropertyDescriptor(globalThis, 'process');
    let refused;
    let withFetch;
    Object.defineProperty(globalThis, 'process', { value: undefined, configurable: true, writable: true });
    try {
      try {
        new Stepwise({ baseUrl: `unix:${socket}` });
      } catch (error) {
        refused = error;
      }
      withFetch = new Stepwise({ baseUrl: `unix:${socket}`, fetch: async () => new Response(null) });
    } finally {
      Object.defineProperty(globalThis, 'process', saved);
    }
    assert.ok(refused instanceof TypeError);
    assert.match(refused.message, /needs Node/);
    assert.ok(withFetch);
  });
});

/** What every transport must carry: sessions, a message to the demo agent and its answer, lists with cursors, the event stream, an error. */
function representative(kind, options) {
  describe(`stepwise serve over ${kind}`, () => {
    let srv;
    let client;
    before(async () => {
      srv = await server(options);
      client = new Stepwise({ baseUrl: srv.url, reconnectDelayMs: 50 });
    });
    after(async () => {
      await srv?.stop();
    });

    test(`${kind}: sessions, a message to the demo agent and its answer, the event stream, lists with cursors, a 404`, async () => {
      assert.equal(client.baseUrl, srv.url);
      await client.healthz();
      await client.readyz();
      const session = await client.createSession({ title: kind });
      assert.equal((await client.getSession(session.id)).title, kind);
      const { execution } = await client.postMessage(session.id, { content: 'hello' });
      const seen = [];
      for await (const event of client.events(session.id)) {
        seen.push(event);
        if (event.event_type === 'execution.completed' && event.execution_id === execution.id) break;
      }
      const stored = seen.filter((e) => e.id !== null).map((e) => e.id);
      assert.deepEqual(stored, stored.map((_, i) => i + 1), 'ids 1..N in order');
      assert.equal((await client.getExecution(execution.id)).status, 'completed');
      const answers = (await client.listMessages(session.id, { roles: 'assistant' })).items.map((m) => m.content);
      assert.deepEqual(answers, ['Echo: hello']);
      // Replayed from a given event on.
      const replay = [];
      for await (const event of client.events(session.id, { after: stored.at(-2) })) {
        replay.push(event.id);
        break;
      }
      assert.deepEqual(replay, [stored.at(-1)]);

      const tag = `${kind}-${Date.now()}`;
      const created = [];
      for (let i = 0; i < 3; i++) created.push((await client.createSession({ title: `s${i}`, related_type: 'unix', related_id: tag })).id);
      const page = await client.listSessions({ related_type: 'unix', related_id: tag, limit: 2 });
      assert.equal(page.items.length, 2);
      assert.ok(page.next_cursor);
      const rest = await client.listSessions({ related_type: 'unix', related_id: tag, limit: 2, cursor: page.next_cursor });
      assert.equal(rest.items.length, 1);
      const all = [];
      for await (const s of client.sessions({ related_type: 'unix', related_id: tag, limit: 1 })) all.push(s.id);
      assert.deepEqual([...all].sort(), [...created].sort());
      await client.deleteSession(created[0]);
      assert.equal((await client.getSession(created[0])).status, 'deleted');

      const missing = await client.getSession('01890000-0000-7000-8000-000000000000').catch((e) => e);
      assert.ok(missing instanceof StepwiseError);
      assert.equal(missing.status, 404);
      assert.equal(missing.code, 'not_found');
      assert.ok(missing.requestId);
      assert.match(await client.metrics(), /^# (HELP|TYPE) /m);
      const parts = [];
      for await (const part of client.aiSdkChat({ id: `chat-${tag}`, messages: [{ id: 'u', role: 'user', parts: [{ type: 'text', text: 'hi' }] }] })) parts.push(part.type);
      assert.equal(parts[0], 'start');
      assert.equal(parts.at(-1), 'finish');
      if (srv.socket) {
        // The socket's path relative to the working directory.
        await new Stepwise({ baseUrl: `unix:${relative(process.cwd(), srv.socket)}` }).healthz();
      }
    });

    if (kind !== 'unix') return;
    test('unix: the event stream across a restart of the server, every stored event once, in order; an AbortSignal ends it', async () => {
      const accepted = await client.postMessageNewSession({ content: 'steps: 12' });
      const seen = [];
      let restarted = false;
      for await (const event of client.events(accepted.session_id)) {
        seen.push(event);
        if (!restarted && seen.filter((e) => e.event_type === 'step.completed').length === 3) {
          restarted = true;
          await srv.stop();
          await srv.start();
        }
        if (event.event_type === 'execution.completed') break;
      }
      assert.ok(restarted);
      const stored = seen.filter((e) => e.id !== null).map((e) => e.id);
      assert.deepEqual(stored, stored.map((_, i) => i + 1), 'no gap, no duplicate');
      assert.equal(seen.filter((e) => e.event_type === 'step.completed').length, 13);
      const controller = new AbortController();
      const ended = [];
      for await (const event of client.events(accepted.session_id, { after: stored.at(-1) - 1, signal: controller.signal })) {
        ended.push(event.id);
        controller.abort();
      }
      assert.deepEqual(ended, [stored.at(-1)]);
    });
  });
}

representative('unix', { unix: true, stepMs: 40 });
representative('TCP', {});

// End users against a live server with keys: tokens an admin mints, what a token sees, the roles
// of keys, and revoking one.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Stepwise, StepwiseError } from '../dist/index.js';
import { server } from './server.mjs';

// A revoked key reaches every running server within 5 s (docs/cli.md); waited on up to this.
const REVOKE_PATIENCE_MS = 10000;

let srv;
let admin;
before(async () => {
  srv = await server();
  admin = new Stepwise({ baseUrl: srv.url, apiKey: srv.createKey({ user: 'ops', role: 'admin' }) });
});
after(async () => {
  await srv?.stop();
});

const unique = (prefix) => `${prefix}-${Math.random().toString(16).slice(2, 10)}`;

/** The StepwiseError `promise` rejects with. */
async function failure(promise) {
  const error = await promise.then(() => null, (e) => e);
  assert.ok(error instanceof StepwiseError, `expected a StepwiseError, got ${error}`);
  return error;
}

test('token and apiKey are one credential: the bearer; both at once is a TypeError', async () => {
  const seen = [];
  const fetch = async (url, init) => {
    seen.push(init.headers.authorization);
    return new Response(JSON.stringify({ items: [], next_cursor: null }), { headers: { 'content-type': 'application/json' } });
  };
  await new Stepwise({ baseUrl: 'http://x.test', token: 'tok-1', fetch }).listSessions();
  await new Stepwise({ baseUrl: 'http://x.test', apiKey: 'key-1', fetch }).listSessions();
  assert.deepEqual(seen, ['Bearer tok-1', 'Bearer key-1']);
  assert.throws(() => new Stepwise({ baseUrl: 'http://x.test', apiKey: 'a', token: 'b' }), TypeError);
});

test('an end user\'s token sees only its own sessions; an admin operation is 403 forbidden', async () => {
  const aliceId = unique('alice');
  const bobId = unique('bob');
  const minted = await admin.createToken({ user_id: aliceId });
  assert.equal(minted.user_id, aliceId);
  assert.ok(typeof minted.token === 'string' && minted.token.length > 0);
  assert.ok(Date.parse(minted.expires_at) > Date.now());
  const bobToken = (await admin.createToken({ user_id: bobId, ttl_s: 600 })).token;
  const opsSession = await admin.createSession({ title: 'ops only' });

  const alice = new Stepwise({ baseUrl: srv.url, token: minted.token });
  const bob = new Stepwise({ baseUrl: srv.url, token: bobToken });
  const mine = await alice.createSession({ title: "alice's" });
  const bobs = await bob.createSession({ title: "bob's" });
  assert.deepEqual((await alice.listSessions()).items.map((s) => s.id), [mine.id]);
  assert.deepEqual((await bob.listSessions()).items.map((s) => s.id), [bobs.id]);
  assert.equal((await alice.getSession(mine.id)).title, "alice's");
  for (const other of [mine.id, opsSession.id]) {
    const hidden = await failure(bob.getSession(other));
    assert.equal(hidden.status, 404);
    assert.equal(hidden.code, 'not_found');
  }

  const everyone = new Set((await admin.listSessions({ limit: 500 })).items.map((s) => s.id));
  for (const id of [mine.id, bobs.id, opsSession.id]) assert.ok(everyone.has(id));
  assert.deepEqual((await admin.listSessions({ user_id: aliceId })).items.map((s) => s.id), [mine.id]);

  // One call at a time: a promise made before its turn could reject with no handler yet.
  for (const call of [() => alice.createToken({ user_id: bobId }), () => alice.listKeys(), () => alice.createKey({ user_id: aliceId, role: 'admin' })]) {
    const forbidden = await failure(call());
    assert.equal(forbidden.status, 403);
    assert.equal(forbidden.code, 'forbidden');
  }
  const invalid = await failure(admin.createToken({ user_id: aliceId, ttl_s: 10 }));
  assert.equal(invalid.status, 400);
  assert.equal(invalid.code, 'invalid_request');
  const stranger = await failure(new Stepwise({ baseUrl: srv.url, token: 'not-a-token' }).listSessions());
  assert.equal(stranger.status, 401);
  assert.equal(stranger.code, 'unauthorized');
});

test('events(): with a token in the header, or in ?access_token= (what an EventSource sends)', async () => {
  const token = (await admin.createToken({ user_id: unique('viewer') })).token;
  const viewer = new Stepwise({ baseUrl: srv.url, token });
  const session = await viewer.createSession({ title: 'streamed' });
  await viewer.postMessage(session.id, { content: '2+3' });
  for await (const event of viewer.events(session.id)) {
    assert.equal(event.id, 1);
    assert.equal(event.event_type, 'message.created');
    break;
  }
  const path = `${srv.url}/v1/sessions/${encodeURIComponent(session.id)}/events`;
  const controller = new AbortController();
  const streamed = await fetch(`${path}?access_token=${encodeURIComponent(token)}`, { signal: controller.signal });
  assert.equal(streamed.status, 200);
  assert.match(streamed.headers.get('content-type'), /^text\/event-stream/);
  controller.abort();
  await streamed.body?.cancel().catch(() => {});
  const refused = await fetch(`${path}?access_token=not-a-token`);
  assert.equal(refused.status, 401);
  await refused.body?.cancel();
});

test('keys: create (the secret once), list, delete; a deleted key is refused', async () => {
  const carolId = unique('carol');
  const made = await admin.createKey({ user_id: carolId, role: 'user', name: "carol's laptop" });
  assert.equal(made.user_id, carolId);
  assert.equal(made.role, 'user');
  assert.equal(made.name, "carol's laptop");
  assert.ok(made.key && made.id && made.created_at);
  const listed = (await admin.listKeys()).items;
  const entry = listed.find((k) => k.id === made.id);
  assert.equal(entry?.role, 'user');
  assert.equal(entry?.user_id, carolId);
  assert.ok(listed.every((k) => !('key' in k)), 'no secret in the list');

  const carol = new Stepwise({ baseUrl: srv.url, apiKey: made.key });
  const own = await carol.createSession({ title: "carol's" });
  assert.deepEqual((await carol.listSessions()).items.map((s) => s.id), [own.id]);
  assert.equal((await failure(carol.listKeys())).code, 'forbidden');

  await admin.deleteKey(made.id);
  assert.ok(!(await admin.listKeys()).items.some((k) => k.id === made.id));
  const deadline = Date.now() + REVOKE_PATIENCE_MS;
  for (;;) {
    const error = await carol.getSession(own.id).then(() => null, (e) => e);
    if (error) {
      assert.ok(error instanceof StepwiseError);
      assert.equal(error.status, 401);
      assert.equal(error.code, 'unauthorized');
      break;
    }
    assert.ok(Date.now() < deadline, `the deleted key still works after ${REVOKE_PATIENCE_MS} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const missing = await failure(admin.deleteKey('01890000-0000-7000-8000-000000000000'));
  assert.equal(missing.status, 404);
  assert.equal(missing.code, 'not_found');

  // An admin key made over the API mints tokens too.
  const second = await admin.createKey({ user_id: unique('ops'), role: 'admin' });
  const secondAdmin = new Stepwise({ baseUrl: srv.url, apiKey: second.key });
  assert.equal((await secondAdmin.createToken({ user_id: carolId })).user_id, carolId);
  await admin.deleteKey(second.id);
});

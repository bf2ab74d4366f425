// Shared by the front-end protocol tests: the servers run.sh started, and small helpers that
// poll with a deadline (never a fixed sleep).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';

export const BASE = process.env.STEPWISE_URL;
export const AUTH_BASE = process.env.STEPWISE_AUTH_URL;
export const AUTH_KEY = process.env.STEPWISE_AUTH_KEY;
export const LLM_BASE = process.env.STEPWISE_LLM_SERVER_URL;

/** A fresh chat / thread id (a new session's name). */
export function newChatId(prefix = 'chat') {
  return `${prefix}-${randomUUID()}`;
}

/** Polls `check` until it answers a truthy value, for at most `ms`. */
export async function eventually(check, what, ms = 20000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** GET a JSON document of the API. */
export async function getJson(base, path, headers = {}) {
  const response = await fetch(base + path, { headers });
  assert.equal(response.ok, true, `${path}: ${response.status}`);
  return response.json();
}

/** The session of a chat (by its name). */
export async function sessionNamed(base, name) {
  const page = await getJson(base, `/v1/sessions?name=${encodeURIComponent(name)}`);
  assert.equal(page.items.length, 1, `one session named ${name}`);
  return page.items[0];
}

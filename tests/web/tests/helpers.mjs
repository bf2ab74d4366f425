// Shared helpers of the browser tests: the browser, the server's URL, API calls, polling.
import { chromium } from 'playwright-core';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const BASE = (process.env.STEPWISE_URL || '').replace(/\/$/, '');
if (!BASE) throw new Error('STEPWISE_URL is not set: run the tests with tests/web/run.sh');

const here = path.dirname(fileURLToPath(import.meta.url));
export const ARTIFACTS = path.resolve(here, '..', 'artifacts');
fs.mkdirSync(ARTIFACTS, { recursive: true });

export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-quic',
  '--no-first-run',
  '--disable-component-update',
  '--disable-sync',
];

// Chromium now and then hangs at start on a busy machine; a fresh attempt gets through.
export async function launch() {
  let lastError;
  for (let attempt = 1; attempt <= 3; attempt += 1) {
    try {
      return await chromium.launch({
        executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
        args: CHROMIUM_ARGS,
        timeout: 60000,
      });
    } catch (err) {
      lastError = err;
      console.error(`chromium did not start (attempt ${attempt}): ${String(err.message).split('\n')[0]}`);
    }
  }
  throw lastError;
}

// A fresh page in its own context, with page errors collected so a test can assert none happened.
export async function openPage(browser, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1200, height: 820 }, ...options });
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (err) => page.errors.push(err.message));
  page.setDefaultTimeout(20000);
  return { context, page };
}

export async function screenshot(page, name) {
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: false });
}

export async function api(method, urlPath, body, key) {
  return apiAt(BASE, method, urlPath, body, key);
}

// An API call to the server at `base`, with `key` (an API key or a token) as the bearer.
export async function apiAt(base, method, urlPath, body, key) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (key) headers.Authorization = `Bearer ${key}`;
  const res = await fetch(`${base}${urlPath}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

// Polls `check` until it returns a truthy value or the deadline passes.
export async function waitFor(check, what, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await check();
      if (last) return last;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// Sends a message through the composer the way a user does: type, then Enter.
export async function send(page, text) {
  await page.locator('#input').fill(text);
  await page.locator('#input').press('Enter');
}

export function sessionIdOf(page) {
  return new URL(page.url()).searchParams.get('session');
}

// Texts of the step lines the chat shows for the agent's steps ("Step 3: ..." lines), in order.
export async function stepLineTexts(page) {
  return page.locator('#stream .step-line .step-text').allTextContents();
}

// The demo agent's `steps: N` makes N calculator steps, each shown as "Step K: called calculator".
export function countStepLines(texts) {
  return texts.filter((t) => /^step \d+: called calculator/i.test(t.trim())).length;
}

export async function assistantTexts(page) {
  return page.locator('#stream .msg-assistant:not(.streaming) .bubble-body').allTextContents();
}

export function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// The `stepwise` binary run.sh built or was given; empty when the tests run against a server
// started elsewhere (STEPWISE_URL), and the tests that start their own servers skip.
export const STEPWISE_BIN = process.env.STEPWISE_BIN || '';

/**
 * Starts a `stepwise serve` of its own (the demo agent, a fresh SQLite file, a free loopback
 * port, `args` added) with an admin API key of tenant `tenant` made first; its log lands in
 * artifacts/server-NAME.log. Answers {url, key, stop()}.
 */
export async function startServer(name, { tenant = 'webtest', args = [] } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `stepwise-web-${name}-`));
  const database = `sqlite://${dir}/${name}.db`;
  const env = { ...process.env, STEPWISE_DEMO_STEP_MS: '50' };
  for (const v of ['STEPWISE_LLM_BASE_URL', 'STEPWISE_LLM_MODEL', 'STEPWISE_LLM_API_KEY', 'STEPWISE_CONFIG']) delete env[v];
  const created = spawnSync(STEPWISE_BIN, ['keys', 'create', '--tenant', tenant, '--user', 'admin', '--role', 'admin', '--name', name, '--database', database], { env, encoding: 'utf8' });
  if (created.status !== 0) throw new Error(`stepwise keys create: ${created.stderr || created.error}`);
  const key = created.stdout.trim().split('\n').pop();
  const port = await freePort();
  const logPath = path.join(ARTIFACTS, `server-${name}.log`);
  const log = fs.openSync(logPath, 'w');
  const child = spawn(STEPWISE_BIN, ['serve', '--listen', `127.0.0.1:${port}`, '--database', database, ...args], { env, stdio: ['ignore', log, log] });
  fs.closeSync(log);
  let exited = null;
  child.on('exit', (code) => { exited = code; });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60000;
  for (;;) {
    if (exited !== null) throw new Error(`stepwise serve exited with ${exited}: ${fs.readFileSync(logPath, 'utf8')}`);
    try {
      if ((await fetch(`${url}/healthz`)).ok) break;
    } catch {}
    if (Date.now() > deadline) {
      child.kill('SIGTERM');
      throw new Error(`no answer from ${url}/healthz within 60 s: ${fs.readFileSync(logPath, 'utf8')}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    key,
    async stop() {
      if (exited === null) {
        child.kill('SIGTERM');
        await once(child, 'exit');
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

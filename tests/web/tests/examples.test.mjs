// The examples/ pages in Chromium: the useChat page and the AG-UI page, each started with its
// one command (`npm start`, which builds it and serves it), driven like a user: a run, a pause
// and its answer, and coming back to a chat (useChat resumes the running turn; AG-UI reconnects
// to the thread). Both ways the examples reach Stepwise: /v1 passed through to the open server
// under test (no STEPWISE_API_KEY), and end-user tokens (STEPWISE_API_KEY, an admin key): the
// page gets a token from the example's GET /api/token and calls a server of its own, started
// here with `--cors-origin` for the page, cross-origin.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { BASE, STEPWISE_BIN, apiAt, freePort, launch, openPage, screenshot, startServer, waitFor } from './helpers.mjs';

const examples = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../examples');

const started = [];
// Starts an example on `port` (a free one by default) for the Stepwise server at `stepwise`;
// `apiKey` puts it in token mode.
async function startExample(name, { stepwise = BASE, apiKey = '', port } = {}) {
  port = port || await freePort();
  const env = { ...process.env, STEPWISE_URL: stepwise, PORT: String(port) };
  delete env.STEPWISE_API_KEY;
  delete env.STEPWISE_PUBLIC_URL;
  if (apiKey) env.STEPWISE_API_KEY = apiKey;
  const child = spawn('npm', ['start', '--silent'], {
    cwd: path.join(examples, name),
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let log = '';
  child.stdout.on('data', (d) => { log += d; });
  child.stderr.on('data', (d) => { log += d; });
  started.push(child);
  const url = `http://127.0.0.1:${port}`;
  await waitFor(async () => (await fetch(url)).ok, `the ${name} example to serve (${log})`, 120000);
  return url;
}

let browser;
let stepwise;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
  for (const child of started) {
    // npm runs node under it: end the group this test started.
    try { process.kill(-child.pid, 'SIGTERM'); } catch {}
  }
  await stepwise?.stop();
});

const name = (prefix) => `${prefix}-${Math.random().toString(36).slice(2, 10)}`;

async function say(page, text) {
  await page.getByLabel('Message').fill(text);
  await page.getByLabel('Message').press('Enter');
}

async function assistantSays(page, text) {
  await page.locator('.message.assistant', { hasText: text }).first().waitFor();
}

test('the useChat page: a run with its tools, a pause and its answer, a resumed turn after a reload', async () => {
  const url = await startExample('use-chat');
  const { context, page } = await openPage(browser);
  try {
    const chat = name('usechat');
    await page.goto(`${url}/?chat=${chat}`);
    await say(page, 'steps: 2');
    await assistantSays(page, 'Done: 2 steps');
    const tools = await page.locator('.message.assistant .tool').allTextContents();
    assert.deepEqual(tools, ['calculator({"expression":"1"}) → "1"', 'calculator({"expression":"2"}) → "2"']);

    await say(page, 'ask me');
    await assistantSays(page, 'What should I use?');
    await page.locator('[data-status="ready"]').waitFor();
    await say(page, 'a hammer');
    await assistantSays(page, 'You said: a hammer');

    // A long turn, and the page reloaded in the middle of it: useChat resumes it.
    await say(page, 'steps: 100');
    await page.locator('.message.assistant .tool', { hasText: 'calculator({"expression":"2"})' }).nth(1).waitFor();
    await page.reload();
    await assistantSays(page, 'Done: 100 steps');
    const resumed = await page.locator('.message.assistant').last().locator('.tool').count();
    assert.equal(resumed, 100, 'the whole turn, from its start, once');
    await screenshot(page, 'example-use-chat');
    assert.deepEqual(page.errors, []);
  } finally {
    await context.close();
  }
});

test('the AG-UI page: a run, an interrupt answered by the next message, and the thread after a reload', async () => {
  const url = await startExample('ag-ui');
  const { context, page } = await openPage(browser);
  try {
    const thread = name('agui');
    await page.goto(`${url}/?thread=${thread}`);
    await page.locator('[data-status="ready"]').waitFor();
    await say(page, 'steps: 2');
    await assistantSays(page, 'Done: 2 steps');
    assert.deepEqual(await page.locator('.message.tool').allTextContents(), [
      'calculator({"expression":"1"})', '→ 1', 'calculator({"expression":"2"})', '→ 2',
    ]);
    await say(page, 'ask me');
    await page.locator('#question', { hasText: 'The agent asks: What should I use?' }).waitFor();
    await page.locator('[data-status="ready"]').waitFor();
    await say(page, 'glue');
    await assistantSays(page, 'You said: glue');
    await page.locator('[data-status="ready"]').waitFor();
    assert.equal(await page.locator('#question').isHidden(), true);

    // Back to the thread: connect brings its messages.
    await page.reload();
    await page.locator('[data-status="ready"]').waitFor();
    await assistantSays(page, 'You said: glue');
    const users = await page.locator('.message.user').allTextContents();
    assert.deepEqual(users, ['steps: 2', 'ask me', 'glue']);
    await screenshot(page, 'example-ag-ui');
    assert.deepEqual(page.errors, []);
  } finally {
    await context.close();
  }
});

// ---- Token mode: the page on its own origin, Stepwise on another.

async function mint(user) {
  const minted = await apiAt(stepwise.url, 'POST', '/v1/tokens', { user_id: user }, stepwise.key);
  assert.equal(minted.status, 201, JSON.stringify(minted.body));
  return minted.body.token;
}

// The names of the sessions `user` sees with a token of their own.
async function sessionNamesOf(user) {
  const listed = await apiAt(stepwise.url, 'GET', '/v1/sessions?limit=500', undefined, await mint(user));
  assert.equal(listed.status, 200, JSON.stringify(listed.body));
  return listed.body.items.map((s) => s.name);
}

// Records the page's requests, to tell where they went and with what.
function recordRequests(page) {
  const requests = [];
  page.on('request', (r) => requests.push(r));
  return requests;
}

async function bearerOf(request) {
  return (await request.allHeaders()).authorization || '';
}

describe('the examples with end-user tokens, cross-origin', { skip: STEPWISE_BIN ? false : 'no stepwise binary (STEPWISE_BIN) to start a server with --cors-origin' }, () => {
  const pages = {};
  before(async () => {
    // The pages' ports first: the server lets exactly their origins call it.
    pages.useChat = await freePort();
    pages.agUi = await freePort();
    stepwise = await startServer('examples-cors', {
      tenant: 'examples',
      args: ['--cors-origin', `http://127.0.0.1:${pages.useChat}`, '--cors-origin', `http://127.0.0.1:${pages.agUi}`],
    });
  });

  test('the useChat page: a token from /api/token, turns and their resume straight to Stepwise as that user', async () => {
    const url = await startExample('use-chat', { stepwise: stepwise.url, apiKey: stepwise.key, port: pages.useChat });
    const answer = await (await fetch(`${url}/api/token?user=carol`)).json();
    assert.equal(answer.user_id, 'carol');
    assert.equal(answer.stepwise_url, stepwise.url);
    assert.ok(answer.token && answer.token !== stepwise.key, 'an end-user token, never the admin key');
    assert.ok(Date.parse(answer.expires_at) > Date.now(), answer.expires_at);
    // Nothing passes through the page's origin: the admin key stays in the example's process.
    assert.equal((await fetch(`${url}/v1/sessions`)).status, 404);

    const { context, page } = await openPage(browser);
    try {
      const requests = recordRequests(page);
      const chat = name('usechat-token');
      await page.goto(`${url}/?chat=${chat}&user=carol`);
      await say(page, 'steps: 2');
      await assistantSays(page, 'Done: 2 steps');
      const turn = requests.find((r) => r.method() === 'POST' && r.url() === `${stepwise.url}/v1/ai-sdk/chat`);
      assert.ok(turn, `the turn went to ${stepwise.url}: ${requests.map((r) => r.url()).join(', ')}`);
      assert.match(await bearerOf(turn), /^Bearer \S+$/);
      assert.notEqual(await bearerOf(turn), `Bearer ${stepwise.key}`);
      assert.deepEqual(requests.filter((r) => r.url().startsWith(`${url}/v1/`)).map((r) => r.url()), []);

      // The chat is carol's session, and only carol's.
      assert.ok((await sessionNamesOf('carol')).includes(chat));
      assert.ok(!(await sessionNamesOf('dave')).includes(chat));

      // A reload in the middle of a turn: the resume goes to Stepwise with the token too.
      await say(page, 'steps: 40');
      await page.locator('.message.assistant .tool', { hasText: 'calculator({"expression":"2"})' }).nth(1).waitFor();
      await page.reload();
      await assistantSays(page, 'Done: 40 steps');
      const resume = requests.find((r) => r.method() === 'GET' && r.url() === `${stepwise.url}/v1/ai-sdk/chat/${chat}/stream`);
      assert.ok(resume, 'the resume went to Stepwise');
      assert.match(await bearerOf(resume), /^Bearer \S+$/);
      assert.equal(await page.locator('.message.assistant').last().locator('.tool').count(), 40);
      await screenshot(page, 'example-use-chat-token');
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });

  test('the AG-UI page: a token from /api/token, runs and connect straight to Stepwise as that user', async () => {
    const url = await startExample('ag-ui', { stepwise: stepwise.url, apiKey: stepwise.key, port: pages.agUi });
    const { context, page } = await openPage(browser);
    try {
      const requests = recordRequests(page);
      const thread = name('agui-token');
      await page.goto(`${url}/?thread=${thread}&user=erin`);
      await page.locator('[data-status="ready"]').waitFor();
      await say(page, 'steps: 2');
      await assistantSays(page, 'Done: 2 steps');
      await page.locator('[data-status="ready"]').waitFor();
      for (const endpoint of ['/v1/ag-ui/connect', '/v1/ag-ui']) {
        const call = requests.find((r) => r.method() === 'POST' && r.url() === `${stepwise.url}${endpoint}`);
        assert.ok(call, `${endpoint} went to ${stepwise.url}: ${requests.map((r) => r.url()).join(', ')}`);
        assert.match(await bearerOf(call), /^Bearer \S+$/);
        assert.notEqual(await bearerOf(call), `Bearer ${stepwise.key}`);
      }
      assert.deepEqual(requests.filter((r) => r.url().startsWith(`${url}/v1/`)).map((r) => r.url()), []);
      assert.ok((await sessionNamesOf('erin')).includes(thread));
      assert.ok(!(await sessionNamesOf('carol')).includes(thread));

      // Back to the thread: connect brings its messages, with a fresh token.
      await page.reload();
      await page.locator('[data-status="ready"]').waitFor();
      await assistantSays(page, 'Done: 2 steps');
      assert.deepEqual(await page.locator('.message.user').allTextContents(), ['steps: 2']);
      await screenshot(page, 'example-ag-ui-token');
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });
});

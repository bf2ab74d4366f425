// The examples/ pages in Chromium: the useChat page and the AG-UI page, each started with its
// one command (`npm start`, which builds it and serves it with /v1 passed through to the
// Stepwise server under test), driven like a user: a run, a pause and its answer, and coming
// back to a chat (useChat resumes the running turn; AG-UI reconnects to the thread).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { BASE, launch, openPage, screenshot, waitFor } from './helpers.mjs';

const examples = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../examples');

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const started = [];
async function startExample(name) {
  const port = await freePort();
  const child = spawn('npm', ['start', '--silent'], {
    cwd: path.join(examples, name),
    env: { ...process.env, STEPWISE_URL: BASE, PORT: String(port) },
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
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
  for (const child of started) {
    // npm runs node under it: end the group this test started.
    try { process.kill(-child.pid, 'SIGTERM'); } catch {}
  }
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

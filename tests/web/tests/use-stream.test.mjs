// The useStream example (examples/use-stream: LangGraph's React hook from
// @langchain/langgraph-sdk 2.0.0 on Stepwise's /langgraph) in Chromium, started with its one
// command (`npm start`) against the open server under test, with a real Python worker serving
// the graphs (support/langgraph_worker.py: the example's `chat` and `approve`, and `held`, whose
// run goes on until the test lets it end). Driven like a user: a message and its streamed
// answer, an interrupt approved from the page, and a reload in the middle of a run that rejoins
// its stream. Skipped when $STEPWISE_PY_VENV's Python cannot import stepwise.worker and
// langgraph.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ARTIFACTS, BASE, api, freePort, launch, openPage, screenshot, waitFor } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const SUPPORT = path.resolve(here, '..', 'support');
const EXAMPLE = path.resolve(here, '../../../examples/use-stream');
// Generous: a deadline so that a broken build fails instead of hanging, never a measure of speed.
const PATIENCE = 60000;
const GRAPHS = ['chat', 'approve', 'held'];

const venv = process.env.STEPWISE_PY_VENV || '';
const python = venv ? path.join(venv, 'bin', 'python') : '';

function pythonSkipReason() {
  if (!venv) return 'STEPWISE_PY_VENV is not set (the Python client\'s environment: clients/python/ci/run.sh makes it)';
  if (!fs.existsSync(python)) return `${python} does not exist`;
  const probe = spawnSync(python, ['-c', 'import stepwise.worker, stepwise.langgraph, langgraph.graph'], { encoding: 'utf8', timeout: 60000 });
  if (probe.status !== 0) return `${python} cannot import stepwise.worker and langgraph: ${(probe.stderr || '').trim().split('\n').pop()}`;
  return false;
}

const name = (prefix) => `${prefix}-${Math.random().toString(36).slice(2, 10)}`;

async function say(page, text) {
  await page.getByLabel('Message').fill(text);
  await page.getByLabel('Message').press('Enter');
}

// A page whose answers from /langgraph are recorded: the SDK's calls that Stepwise refused
// (400 and above), to assert there were none.
async function openWatchedPage(browser) {
  const opened = await openPage(browser);
  opened.page.setDefaultTimeout(PATIENCE);
  opened.page.refused = [];
  opened.page.on('response', (r) => {
    if (r.url().includes('/langgraph/') && r.status() >= 400) opened.page.refused.push(`${r.request().method()} ${r.url()} → ${r.status()}`);
  });
  return opened;
}

const ai = (page, text) => page.locator('.message.ai', { hasText: text });
const threadIdOf = (page) => new URL(page.url()).searchParams.get('threadId');

describe('the useStream example with a Python LangGraph worker', { skip: pythonSkipReason() }, () => {
  let browser;
  let worker;
  let example;
  let url;
  let gates;
  let exampleLog = '';
  const workerLogPath = path.join(ARTIFACTS, 'worker-langgraph.log');
  const workerLog = () => (fs.existsSync(workerLogPath) ? fs.readFileSync(workerLogPath, 'utf8').slice(-3000) : '');

  before(async () => {
    gates = fs.mkdtempSync(path.join(os.tmpdir(), 'stepwise-lg-gates-'));
    const log = fs.openSync(workerLogPath, 'w');
    const env = { ...process.env, PYTHONUNBUFFERED: '1', PYTHONDONTWRITEBYTECODE: '1', LG_GATE_DIR: gates };
    delete env.STEPWISE_API_KEY;
    worker = spawn(python, ['-m', 'stepwise.worker', 'langgraph_worker:worker', '--url', BASE, '--wait-s', '2'], {
      cwd: SUPPORT, env, stdio: ['ignore', log, log],
    });
    fs.closeSync(log);

    const port = await freePort();
    const exampleEnv = { ...process.env, STEPWISE_URL: BASE, PORT: String(port) };
    delete exampleEnv.STEPWISE_API_KEY;
    example = spawn('npm', ['start', '--silent'], { cwd: EXAMPLE, env: exampleEnv, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    example.stdout.on('data', (d) => { exampleLog += d; });
    example.stderr.on('data', (d) => { exampleLog += d; });
    url = `http://127.0.0.1:${port}`;
    await waitFor(async () => (await fetch(url)).ok, `the use-stream example to serve (${exampleLog})`, 120000);

    // The worker announces its graphs as assistants when it starts.
    try {
      await waitFor(async () => {
        const found = await api('POST', '/langgraph/assistants/search', { limit: 100 });
        const ids = (found.body || []).map((a) => a.graph_id);
        return GRAPHS.every((g) => ids.includes(g));
      }, 'the worker to announce chat, approve and held', PATIENCE);
    } catch (err) {
      throw new Error(`${err.message}\nworker log:\n${workerLog()}`);
    }
    browser = await launch();
  });

  after(async () => {
    await browser?.close();
    // npm runs node under it: end the group this test started.
    if (example) { try { process.kill(-example.pid, 'SIGTERM'); } catch {} }
    if (worker && worker.exitCode == null && worker.signalCode == null) {
      const exited = new Promise((r) => worker.once('exit', r));
      worker.kill('SIGTERM');
      let timer;
      const stopped = await Promise.race([exited.then(() => true), new Promise((r) => { timer = setTimeout(() => r(false), PATIENCE); })]);
      clearTimeout(timer);
      if (!stopped) worker.kill('SIGKILL');
    }
    if (gates) fs.rmSync(gates, { recursive: true, force: true });
  });

  test('a message streams its answer, and the thread is there after a reload', async () => {
    const { context, page } = await openWatchedPage(browser);
    try {
      const streams = [];
      page.on('response', (r) => { if (r.request().method() === 'POST' && /\/langgraph\/threads\/[^/]+\/runs\/stream$/.test(r.url())) streams.push(r); });
      await page.goto(`${url}/`);
      await page.locator('[data-status="ready"]').waitFor();
      await say(page, 'hello there');
      await ai(page, 'Echo: hello there').waitFor();
      await page.locator('[data-status="ready"]').waitFor();
      const threadId = threadIdOf(page);
      assert.ok(threadId, `the thread's id in the URL: ${page.url()}`);
      assert.equal(streams.length, 1, 'one streamed run');
      assert.equal(streams[0].url(), `${url}/langgraph/threads/${threadId}/runs/stream`);
      assert.equal(streams[0].status(), 200);
      const sse = await streams[0].text();
      assert.match(sse, /^event: metadata\n/m, sse.slice(0, 500));
      // The answer came live as the model's tokens (messages-tuple: the worker sends
      // consecutive tokens together, so one event or several), then as the thread's values.
      const events = [...sse.matchAll(/^event: (\S+)\n(?:id: \S+\n)?data: (.*)$/gm)].map(([, event, data]) => [event, JSON.parse(data)]);
      const tokens = events.filter(([event]) => event === 'messages').map(([, [chunk]]) => chunk);
      assert.ok(tokens.length >= 1 && tokens.every((t) => t.type === 'AIMessageChunk'), sse.slice(0, 2000));
      assert.equal(tokens.map((t) => t.content).join(''), 'Echo: hello there');
      assert.deepEqual(events.at(-1)[1].messages.map((m) => [m.type, m.content]), [['human', 'hello there'], ['ai', 'Echo: hello there']]);
      assert.deepEqual(await page.locator('.message').evaluateAll((els) => els.map((e) => [e.dataset.type, e.textContent])), [
        ['human', 'hello there'],
        ['ai', 'Echo: hello there'],
      ]);
      // The thread is a Stepwise session, and the page finds it again by its id.
      await page.reload();
      await ai(page, 'Echo: hello there').waitFor();
      assert.equal(threadIdOf(page), threadId);
      await say(page, 'again');
      await ai(page, 'Echo: again').waitFor();
      await page.locator('[data-status="ready"]').waitFor();
      assert.deepEqual(await page.locator('.message').allTextContents(), ['hello there', 'Echo: hello there', 'again', 'Echo: again']);
      await screenshot(page, 'example-use-stream-chat');
      assert.deepEqual(page.errors, []);
      assert.deepEqual(page.refused, []);
    } finally {
      await context.close();
    }
  });

  test('an interrupt: its question in the page, after a reload too, and Approve resumes the run', async () => {
    const { context, page } = await openWatchedPage(browser);
    try {
      await page.goto(`${url}/?assistant=approve`);
      await page.locator('[data-status="ready"]').waitFor();
      await say(page, 'the plan');
      await ai(page, 'Draft for: the plan').waitFor();
      await page.locator('#question', { hasText: 'Approve the draft?' }).waitFor();
      const threadId = threadIdOf(page);
      const state = await api('GET', `/langgraph/threads/${threadId}/state`);
      assert.equal(state.status, 200, JSON.stringify(state.body));
      assert.deepEqual(state.body.tasks.flatMap((t) => t.interrupts.map((i) => i.value)), [{ question: 'Approve the draft?' }]);
      await screenshot(page, 'example-use-stream-interrupt');
      // After a reload the question is still there: from the thread's state (tasks[].interrupts).
      await page.reload();
      await page.locator('#question', { hasText: 'Approve the draft?' }).waitFor();
      await ai(page, 'Draft for: the plan').waitFor();

      await page.getByRole('button', { name: 'Approve' }).click();
      await ai(page, 'Reviewed: yes').waitFor();
      await page.locator('[data-status="ready"]').waitFor();
      await page.locator('#question').waitFor({ state: 'detached' });
      assert.deepEqual(await page.locator('.message').allTextContents(), ['the plan', 'Draft for: the plan', 'Reviewed: yes']);
      const thread = await api('GET', `/langgraph/threads/${threadId}`);
      assert.equal(thread.body.status, 'idle', JSON.stringify(thread.body));
      assert.deepEqual(page.errors, []);
      assert.deepEqual(page.refused, []);
    } finally {
      await context.close();
    }
  });

  test('a reload in the middle of a run rejoins its stream, and the answer arrives', async () => {
    const { context, page } = await openWatchedPage(browser);
    try {
      const requests = [];
      page.on('request', (r) => requests.push(r));
      const gate = name('gate');
      await page.goto(`${url}/?assistant=held`);
      await page.locator('[data-status="ready"]').waitFor();
      await say(page, gate);
      await ai(page, `Working on: ${gate}`).waitFor();
      const threadId = threadIdOf(page);
      assert.ok(threadId);
      // useStream keeps the running run's id for the reload (reconnectOnMount).
      const runId = await page.evaluate((t) => sessionStorage.getItem(`lg:stream:${t}`), threadId);
      assert.ok(runId, 'the run kept in sessionStorage');

      await page.reload();
      // The page rejoins the run's stream (from its start) while the run is still held.
      const joinUrl = `${url}/langgraph/threads/${threadId}/runs/${runId}/stream`;
      await waitFor(() => requests.some((r) => r.method() === 'GET' && r.url().split('?')[0] === joinUrl), `a GET of ${joinUrl} (${requests.map((r) => `${r.method()} ${r.url()}`).join(', ')})`, PATIENCE);
      await page.locator('[data-status="streaming"]').waitFor();
      await ai(page, `Working on: ${gate}`).waitFor();
      assert.equal(await ai(page, 'Held answer').count(), 0, 'the run is still held');

      fs.writeFileSync(path.join(gates, gate), '');
      await ai(page, `Held answer: ${gate}`).waitFor();
      await page.locator('[data-status="ready"]').waitFor();
      assert.deepEqual(await page.locator('.message').allTextContents(), [gate, `Working on: ${gate}`, `Held answer: ${gate}`]);
      assert.equal(await page.evaluate((t) => sessionStorage.getItem(`lg:stream:${t}`), threadId), null, 'the finished run forgotten');
      const runs = await api('GET', `/langgraph/threads/${threadId}/runs`);
      assert.deepEqual(runs.body.map((r) => [r.run_id, r.status]), [[runId, 'success']]);
      await screenshot(page, 'example-use-stream-rejoined');
      assert.deepEqual(page.errors, []);
      assert.deepEqual(page.refused, []);
    } catch (err) {
      err.message += `\nworker log:\n${workerLog()}`;
      throw err;
    } finally {
      await context.close();
    }
  });
});

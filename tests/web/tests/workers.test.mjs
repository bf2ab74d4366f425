// Workers (docs/workers.md): users' own agents that claim executions over HTTP. A tiny worker
// written here with plain fetch serves the agent type `node-echo` (the protocol needs nothing
// but HTTP), and the page drives its runs like any other agent's: the agent picker lists it as
// online, its steps and tokens show live, its question is answered in the page, Cancel reaches
// it. With a Python environment that has `stepwise.worker` and smolagents ($STEPWISE_PY_VENV),
// a smolagents worker process is driven from the page end to end as well.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  ARTIFACTS, BASE, launch, openPage, screenshot, api, waitFor, send, sessionIdOf,
} from './helpers.mjs';

const AGENT = 'node-echo';
// Generous: a deadline so that a broken build fails instead of hanging, never a measure of speed.
const PATIENCE = 60000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The worker: one claim at a time (long polls of 2 s, so it stops soon), each run handled by
// what its message says. `gate(name)` holds a run until the test calls `open(name)`, so the
// test sees each stage on the page before the next one is written.
class NodeWorker {
  constructor(agentType) {
    this.agentType = agentType;
    this.workerId = `node-test-${process.pid}-${randomBytes(2).toString('hex')}`;
    this.claims = [];
    this.errors = [];
    this.gates = new Map();
    this.cancel = null;
  }

  async call(method, urlPath, body, lease) {
    const headers = { 'Content-Type': 'application/json', Accept: 'application/json' };
    if (lease) headers['Stepwise-Lease'] = lease;
    const res = await fetch(`${BASE}${urlPath}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null };
  }

  start() {
    this.running = true;
    this.loop = this.poll();
  }

  async stop() {
    this.running = false;
    for (const name of this.gates.keys()) this.open(name);
    await this.loop;
  }

  async poll() {
    while (this.running) {
      let res;
      try {
        res = await this.call('POST', '/v1/workers/claim', {
          worker_id: this.workerId,
          agents: [{ type: this.agentType, description: 'Echoes the message (a worker in the browser tests, in Node)' }],
          slots: 1,
          wait_s: 2,
        });
      } catch (err) {
        this.errors.push(`claim: ${err.message}`);
        await sleep(200);
        continue;
      }
      if (res.status !== 200) {
        this.errors.push(`claim answered ${res.status}: ${JSON.stringify(res.body)}`);
        await sleep(200);
        continue;
      }
      for (const claim of res.body.items) {
        this.claims.push(claim);
        try {
          await this.handle(claim);
        } catch (err) {
          this.errors.push(`run ${claim.execution.id}: ${err.message}`);
        }
      }
    }
  }

  gateOf(name) {
    if (!this.gates.has(name)) {
      let resolve;
      const promise = new Promise((r) => { resolve = r; });
      this.gates.set(name, { promise, resolve });
    }
    return this.gates.get(name);
  }

  // Holds the run until the test opens the gate (or the patience runs out).
  async gate(name) {
    let timer;
    await Promise.race([this.gateOf(name).promise, new Promise((r) => { timer = setTimeout(r, PATIENCE); })]);
    clearTimeout(timer);
  }

  open(name) {
    this.gateOf(name).resolve();
  }

  async handle(claim) {
    const id = claim.execution.id;
    const lease = claim.lease;
    const write = async (what, body) => {
      const res = await this.call('POST', `/v1/executions/${id}/${what}`, body, lease);
      if (res.status >= 300) throw new Error(`${what} answered ${res.status}: ${JSON.stringify(res.body)}`);
      return res.body;
    };
    // Keeps the lease while a gate holds the run.
    const interval = Math.max(200, (claim.heartbeat_interval_s || 1) * 1000);
    const beat = setInterval(() => {
      this.call('POST', `/v1/executions/${id}/heartbeat`, { lease, worker_id: this.workerId }).catch(() => {});
    }, interval);
    try {
      const text = claim.input_text || '';
      const next = claim.steps.length + 1;
      if (claim.resume_answer != null) {
        await write('steps', { step_number: next, model_output: `The user answered ${claim.resume_answer}`, observations: claim.resume_answer });
        await write('complete', { output: { color: claim.resume_answer }, final_message: `Node painted it ${claim.resume_answer}` });
      } else if (text.startsWith('ask')) {
        await write('steps', { step_number: next, model_output: 'I need to know the color' });
        await write('pause', { question: 'Which color, Node?' });
      } else if (text.startsWith('slow')) {
        await this.runUntilCancelled(claim, write);
      } else {
        await write('steps', { step_number: next, model_output: 'Reading the message', observations: `got ${text.length} characters` });
        await this.gate('step-1');
        await write('deltas', { text: 'Node ' });
        await write('deltas', { text: 'echo: ' });
        await this.gate('tokens');
        await write('steps', {
          step_number: next + 1,
          model_output: 'Echoing it',
          tool_calls: [{ id: 'call_1', name: 'echo', arguments: { text } }],
          observations: text,
          token_usage: { input: 12, output: 4 },
        });
        await write('deltas', { text });
        await write('complete', { output: { echo: text }, final_message: `Node echo: ${text}` });
      }
    } finally {
      clearInterval(beat);
    }
  }

  // One step, then heartbeats until one says the execution was cancelled; then one more write,
  // which the server must refuse.
  async runUntilCancelled(claim, write) {
    const id = claim.execution.id;
    await write('steps', { step_number: claim.steps.length + 1, model_output: 'Working slowly' });
    const deadline = Date.now() + PATIENCE;
    let heartbeat = null;
    while (Date.now() < deadline) {
      const res = await this.call('POST', `/v1/executions/${id}/heartbeat`, { lease: claim.lease, worker_id: this.workerId });
      heartbeat = res;
      if (res.status !== 200 || res.body.cancel_requested) break;
      await sleep(100);
    }
    const late = await this.call('POST', `/v1/executions/${id}/steps`, { step_number: claim.steps.length + 2, model_output: 'too late' }, claim.lease);
    this.cancel = { executionId: id, heartbeat, late };
  }
}

let browser;
let worker;
before(async () => {
  browser = await launch();
  worker = new NodeWorker(AGENT);
  worker.start();
});
after(async () => {
  if (worker) await worker.stop();
  if (browser) await browser.close();
});

// Opens the picker (focusing it refreshes the list) until `type` is listed as online.
async function waitOnlineInPicker(page, type) {
  return waitFor(async () => {
    await page.locator('#input').focus();
    await page.locator('#agent-select').focus();
    await sleep(300);
    return page.evaluate((t) => {
      const option = [...document.querySelectorAll('#agent-select option')].find((o) => o.value === t);
      return option && option.dataset.online === 'true' ? option.textContent : null;
    }, type);
  }, `the picker to list ${type} as online`, PATIENCE);
}

async function executionsOf(sessionId) {
  const res = await api('GET', `/v1/sessions/${sessionId}/executions`);
  assert.equal(res.status, 200);
  return res.body.items;
}

// The session's one execution once it reached `status`.
async function waitExecution(sessionId, status) {
  return waitFor(async () => {
    const execs = await executionsOf(sessionId);
    return execs.length === 1 && execs[0].status === status && execs[0];
  }, `the execution to be ${status}`, PATIENCE);
}

describe('workers', () => {
  it('lists a worker agent as online, and runs it from the page with live steps and tokens', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      const label = await waitOnlineInPicker(page, AGENT);
      assert.match(label, /node-echo · online \(\d+ workers?\)/);
      // The built-in agents are there too, and a new session starts with the server's default.
      assert.equal(await page.locator('#agent-select').inputValue(), '');
      const demo = await page.locator('#agent-select option[value="demo"]').textContent();
      assert.match(demo, /demo · built-in/);
      const agents = (await api('GET', '/v1/agents')).body.items;
      const listed = agents.find((a) => a.type === AGENT);
      assert.equal(listed.builtin, false);
      assert.ok(listed.workers_online >= 1);
      await page.locator('#agent-select').selectOption(AGENT);
      assert.equal(await page.locator('#agent-picker').getAttribute('data-online'), 'true');
      await screenshot(page, 'workers-picker');

      const claimsBefore = worker.claims.length;
      await send(page, 'echo hello worker');
      // Step 1 is on the page while the worker still holds the run.
      const group = page.locator('#stream .exec').first();
      await waitFor(async () => (await group.locator('.exec-count').textContent()) === '1 step', 'step 1 on the page', PATIENCE);
      await page.locator('#runbar[data-state="running"]', { hasText: 'Running · 1 step' }).waitFor({ timeout: PATIENCE });
      assert.equal(await group.locator('.step-line[data-step-number="1"]').count(), 1);
      // The worker's step reads like a built-in agent's: its model_output, not "Completed step 1".
      await waitFor(async () => (await group.locator('.step-line[data-step-number="1"] .step-text').textContent()) === 'Step 1: Reading the message', "step 1's text", PATIENCE);
      assert.equal(await group.locator('.badge-agent').textContent(), AGENT);
      assert.equal(worker.claims.length, claimsBefore + 1);
      worker.open('step-1');
      // The streamed tokens, while the run still goes on.
      await page.locator('#stream .msg-assistant.streaming', { hasText: 'Node echo:' }).waitFor({ timeout: PATIENCE });
      await screenshot(page, 'workers-streaming');
      worker.open('tokens');
      await page.locator('#stream .msg-assistant:not(.streaming)', { hasText: 'Node echo: echo hello worker' }).waitFor({ timeout: PATIENCE });
      await page.locator('#runbar').waitFor({ state: 'hidden' });
      // Step 2 counts once the page has its kind (fetched with the step's text).
      await waitFor(async () => (await group.locator('.exec-count').textContent()) === '2 steps', 'the group to count 2 steps', PATIENCE);
      assert.equal(await page.locator('#stream .msg-assistant.streaming').count(), 0);

      const sessionId = sessionIdOf(page);
      const session = (await api('GET', `/v1/sessions/${sessionId}`)).body;
      assert.deepEqual(session.agent, { type: AGENT, config: null });
      const exec = await waitExecution(sessionId, 'completed');
      assert.equal(exec.agent_type, AGENT);
      assert.equal(exec.step_count, 2);
      // The header shows the session's agent.
      assert.equal(await page.locator('#agent-select').inputValue(), AGENT);

      await group.locator('summary').click();
      const lines = await group.locator('.step-line[data-step-number]').allTextContents();
      assert.equal(lines.length, 2);
      assert.deepEqual(lines.map((t) => t.replace(/\d\d:\d\d:\d\d.*$/, '').trim()), ['Step 1: Reading the message', 'Step 2: called echo · Echoing it']);
      await screenshot(page, 'workers-done');

      // From the history: the same lines, each once, and the session's agent in the header.
      await page.reload();
      await page.locator('#stream .msg-assistant', { hasText: 'Node echo: echo hello worker' }).waitFor();
      await waitFor(async () => (await page.locator('#stream .step-line[data-step-number]').count()) === 2, 'both step lines after a reload', PATIENCE);
      await sleep(300);
      assert.equal(await page.locator('#stream .step-line[data-step-number]').count(), 2);
      await waitFor(async () => (await page.locator('#stream .step-line[data-step-number="2"] .step-text').textContent()) === 'Step 2: called echo · Echoing it', "step 2's text after a reload", PATIENCE);
      assert.equal(await page.locator('#stream .exec-count').first().textContent(), '2 steps');
      await waitFor(async () => (await page.locator('#agent-select').inputValue()) === AGENT, 'the header to show the agent');
      assert.deepEqual(worker.errors, []);
      assert.deepEqual(page.errors, []);
    } finally {
      worker.open('step-1');
      worker.open('tokens');
      await context.close();
    }
  });

  it("asks the page a question; the worker's next claim carries the answer", async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      await waitOnlineInPicker(page, AGENT);
      await page.locator('#agent-select').selectOption(AGENT);
      await send(page, 'ask for a color');
      const question = page.locator('#stream .question');
      await question.waitFor({ timeout: PATIENCE });
      assert.match(await question.locator('.question-text').textContent(), /Which color, Node\?/);
      await page.locator('#runbar[data-state="paused"]').waitFor();
      const sessionId = sessionIdOf(page);
      const paused = await waitExecution(sessionId, 'paused');
      await screenshot(page, 'workers-question');

      await question.locator('textarea').fill('teal');
      await question.locator('textarea').press('Enter');
      await page.locator('#stream .msg-assistant', { hasText: 'Node painted it teal' }).waitFor({ timeout: PATIENCE });
      const resumed = worker.claims.filter((c) => c.execution.id === paused.id);
      assert.equal(resumed.length, 2);
      assert.equal(resumed[0].resume_answer, null);
      assert.equal(resumed[1].resume_answer, 'teal');
      assert.equal(await question.locator('textarea').count(), 0);
      await page.locator('#runbar').waitFor({ state: 'hidden' });
      const done = await waitExecution(sessionId, 'completed');
      assert.equal(done.id, paused.id);

      // From the history: a line per step (the worker's, and the answer's `user_input` step
      // the server saved when the answer came, as for the built-in agents), each once, the
      // first before the question and the last after the answer.
      const steps = (await api('GET', `/v1/executions/${done.id}/steps`)).body.items;
      assert.ok(steps.some((st) => st.kind === 'user_input' && st.observations === 'teal'));
      await page.reload();
      await page.locator('#stream .msg-assistant', { hasText: 'Node painted it teal' }).waitFor();
      const lineNumbers = () => page.locator('#stream .step-line[data-step-number]').evaluateAll((els) => els.map((e) => Number(e.dataset.stepNumber)));
      await waitFor(async () => (await lineNumbers()).length >= steps.length, 'the step lines after a reload', PATIENCE);
      assert.deepEqual((await lineNumbers()).sort((a, b) => a - b), steps.map((st) => st.step_number));
      const segments = page.locator('#stream .exec');
      assert.equal(await segments.count(), 2);
      assert.equal(await segments.first().locator('.step-line[data-step-number="1"]').count(), 1);
      assert.equal(await segments.last().locator(`.step-line[data-step-number="${steps[steps.length - 1].step_number}"]`).count(), 1);
      assert.deepEqual(worker.errors, []);
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });

  it("changes the open session's agent, and cancels the worker's run from the page", async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      // A session started with the server's default agent (the demo agent here)...
      await send(page, 'hello default');
      await page.locator('#stream .msg-assistant', { hasText: 'Echo: hello default' }).waitFor();
      const sessionId = sessionIdOf(page);
      assert.equal((await api('GET', `/v1/sessions/${sessionId}`)).body.agent, null);
      assert.equal(await page.locator('#agent-select').getAttribute('data-agent'), 'default');
      // ...whose agent the header changes.
      await waitOnlineInPicker(page, AGENT);
      await page.locator('#agent-select').selectOption(AGENT);
      await waitFor(async () => {
        const session = (await api('GET', `/v1/sessions/${sessionId}`)).body;
        return session.agent && session.agent.type === AGENT;
      }, "the session's agent to change", PATIENCE);

      await send(page, 'slow work please');
      await waitFor(async () => worker.claims.some((c) => c.input_text === 'slow work please'), 'the worker to claim the run', PATIENCE);
      const runGroup = page.locator('#stream .exec').last();
      await waitFor(async () => (await runGroup.locator('.exec-count').textContent()) === '1 step', 'the run to make progress', PATIENCE);
      await page.locator('#runbar[data-state="running"]').waitFor();
      assert.equal(await runGroup.locator('.badge-agent').textContent(), AGENT);
      await page.locator('#btn-cancel').click();
      await page.locator('#runbar').waitFor({ state: 'hidden', timeout: PATIENCE });
      await page.locator('#stream .exec[data-status="cancelled"]').waitFor({ state: 'attached', timeout: PATIENCE });
      await page.locator('#stream .line-cancelled', { hasText: 'Run cancelled.' }).waitFor();

      // The worker heard of it at its next heartbeat, and its writes are refused from then on.
      const seen = await waitFor(async () => worker.cancel, "the worker's heartbeat to report the cancel", PATIENCE);
      assert.equal(seen.heartbeat.status, 200);
      assert.equal(seen.heartbeat.body.cancel_requested, true);
      assert.equal(seen.late.status, 409);
      assert.equal(seen.late.body.error.code, 'lease_lost');
      const execs = await executionsOf(sessionId);
      const cancelled = execs.find((e) => e.id === seen.executionId);
      assert.equal(cancelled.status, 'cancelled');
      assert.equal(cancelled.agent_type, AGENT);
      assert.equal(cancelled.step_count, 1);
      await screenshot(page, 'workers-cancelled');
      assert.deepEqual(worker.errors, []);
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });
});

// ---- a Python smolagents worker process, when the Python environment has what it needs

const here = path.dirname(fileURLToPath(import.meta.url));
const SUPPORT = path.resolve(here, '..', 'support');
const PY_AGENT = 'py-smolagents';
const venv = process.env.STEPWISE_PY_VENV || '';
const python = venv ? path.join(venv, 'bin', 'python') : '';

function pythonSkipReason() {
  if (!venv) return 'STEPWISE_PY_VENV is not set (the Python client\'s environment: clients/python/ci/run.sh makes it)';
  if (!fs.existsSync(python)) return `${python} does not exist`;
  const probe = spawnSync(python, ['-c', 'import stepwise.worker, smolagents'], { encoding: 'utf8', timeout: 60000 });
  if (probe.status !== 0) return `${python} cannot import stepwise.worker and smolagents: ${(probe.stderr || '').trim().split('\n').pop()}`;
  return false;
}

describe('a Python smolagents worker', { skip: pythonSkipReason() }, () => {
  let child;
  let logPath;
  before(() => {
    logPath = path.join(ARTIFACTS, 'worker-py-smolagents.log');
    const log = fs.openSync(logPath, 'w');
    const env = { ...process.env, PYTHONUNBUFFERED: '1', PYTHONDONTWRITEBYTECODE: '1' };
    delete env.STEPWISE_API_KEY;
    child = spawn(python, ['-m', 'stepwise.worker', 'smol_worker:worker', '--url', BASE, '--wait-s', '2'], {
      cwd: SUPPORT, env, stdio: ['ignore', log, log],
    });
    fs.closeSync(log);
  });
  after(async () => {
    if (!child || child.exitCode != null || child.signalCode != null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    let timer;
    const stopped = await Promise.race([exited.then(() => true), new Promise((r) => { timer = setTimeout(() => r(false), PATIENCE); })]);
    clearTimeout(timer);
    if (!stopped) child.kill('SIGKILL');
  });

  const workerLog = () => (logPath && fs.existsSync(logPath) ? fs.readFileSync(logPath, 'utf8').slice(-3000) : '');

  it('runs a smolagents CodeAgent from the page: steps, a question answered in the page, the answer', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      try {
        await waitOnlineInPicker(page, PY_AGENT);
      } catch (err) {
        throw new Error(`${err.message}\nworker log:\n${workerLog()}`);
      }
      await page.locator('#agent-select').selectOption(PY_AGENT);
      await send(page, 'ask');
      const question = page.locator('#stream .question');
      await question.waitFor({ timeout: PATIENCE });
      assert.match(await question.locator('.question-text').textContent(), /What is your name\?/);
      await page.locator('#runbar[data-state="paused"]').waitFor();
      await question.locator('textarea').fill('Ada');
      await question.locator('textarea').press('Enter');
      await page.locator('#stream .msg-assistant', { hasText: 'Hi Ada' }).waitFor({ timeout: PATIENCE });
      await page.locator('#runbar').waitFor({ state: 'hidden', timeout: PATIENCE });

      const sessionId = sessionIdOf(page);
      const [exec] = await executionsOf(sessionId);
      assert.equal(exec.agent_type, PY_AGENT);
      assert.equal(exec.status, 'completed');
      const steps = (await api('GET', `/v1/executions/${exec.id}/steps`)).body.items;
      assert.ok(steps.some((s) => s.kind === 'final_answer'), JSON.stringify(steps.map((s) => s.kind)));
      // Every step the worker saved has its line on the page (the user's answer shows as
      // their message).
      const numbers = await page.locator('#stream .step-line[data-step-number]').evaluateAll((els) => els.map((e) => Number(e.dataset.stepNumber)));
      for (const step of steps.filter((st) => st.kind !== 'user_input')) assert.ok(numbers.includes(step.step_number), `a line for step ${step.step_number}`);
      await screenshot(page, 'workers-python-smolagents');

      // A second message in the same session runs with the session's agent.
      await send(page, 'count me');
      await page.locator('#stream .msg-assistant', { hasText: 'count me has 8 characters' }).waitFor({ timeout: PATIENCE });
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });
});

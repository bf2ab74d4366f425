// End-to-end tests of the assistant panel in headless Chromium against a real server running
// the demo agent with STEPWISE_DEMO_STEP_MS=50.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  BASE, launch, openPage, screenshot, api, waitFor, send, sessionIdOf,
  stepLineTexts, countStepLines, assistantTexts,
} from './helpers.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { if (browser) await browser.close(); });

async function executionsOf(sessionId) {
  const res = await api('GET', `/v1/sessions/${sessionId}/executions`);
  assert.equal(res.status, 200);
  return res.body.items;
}

describe('chat panel', () => {
  it('shows the user message at once, each step live, then the answer', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/?related_type=ticket&related_id=42&context_url=${encodeURIComponent('https://app.example/tickets/42')}`);
      await send(page, 'steps: 5');
      // The user message is on screen before any answer arrives.
      await page.locator('#stream .msg-user', { hasText: 'steps: 5' }).waitFor();
      assert.equal(await page.locator('#input').inputValue(), '');

      await waitFor(async () => countStepLines(await stepLineTexts(page)) >= 5, '5 step lines');
      await page.locator('#stream .msg-assistant', { hasText: 'Done: 5 steps' }).waitFor();
      assert.equal(countStepLines(await stepLineTexts(page)), 5);

      // Folded by default into one "N steps" group; opening it shows the lines.
      const group = page.locator('#stream .exec').first();
      assert.equal(await group.locator('details').getAttribute('open'), null);
      // Five calculator steps: the final answer is the answer, not a step.
      assert.match(await group.locator('.exec-count').textContent(), /^5 steps$/);
      assert.equal(await page.locator('#runbar').isVisible(), false);

      // The demo agent says it is the demo agent.
      await page.locator('#banner-demo').waitFor();
      assert.match(await group.locator('.badge-agent').textContent(), /demo/);

      // The page's context goes with the message and shows as a chip.
      const sessionId = sessionIdOf(page);
      assert.ok(sessionId, 'the URL names the new session');
      const messages = (await api('GET', `/v1/sessions/${sessionId}/messages?roles=user`)).body.items;
      const user = messages.find((m) => m.role === 'user');
      assert.equal(user.related_type, 'ticket');
      assert.equal(user.related_id, '42');
      assert.equal(user.context_url, 'https://app.example/tickets/42');
      assert.match(await page.locator('#session-chips').textContent(), /ticket #42/);

      await screenshot(page, 'chat-done');
      await group.locator('summary').click();
      await page.locator('#stream .step-line').first().waitFor();
      await screenshot(page, 'chat-steps-expanded');
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });

  it('sends a context URL in any spelling; the server keeps it canonical and the page knows it is the same', async () => {
    const { context, page } = await openPage(browser);
    try {
      const spelled = 'HTTPS://App.Example:443/a/../tickets/7';
      await page.goto(`${BASE}/?related_type=ticket&related_id=7&context_url=${encodeURIComponent(spelled)}`);
      await send(page, '2+3');
      await page.locator('#stream .msg-assistant', { hasText: '5' }).waitFor();
      const sessionId = sessionIdOf(page);
      const session = (await api('GET', `/v1/sessions/${sessionId}`)).body;
      assert.equal(session.initial_context_url, 'https://app.example/tickets/7');
      // The composer's chips hide once the session carries the page's context.
      await waitFor(async () => await page.locator('#context-chips').isHidden(), 'the composer chips to hide');
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });

  it('asks the user a question and resumes with the answer', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      await send(page, 'please ask me something');
      const question = page.locator('#stream .question');
      await question.waitFor();
      assert.match(await question.textContent(), /What should I use\?/);
      await page.locator('#runbar[data-state="paused"]').waitFor();
      await screenshot(page, 'chat-question');
      await question.locator('textarea').fill('the blue one');
      await question.locator('textarea').press('Enter');
      await page.locator('#stream .msg-assistant', { hasText: 'You said: the blue one' }).waitFor();
      // The question card no longer takes an answer, and the same execution was resumed.
      assert.equal(await question.locator('textarea').count(), 0);
      const execs = await executionsOf(sessionIdOf(page));
      assert.equal(execs.length, 1);
      assert.equal(execs[0].status, 'completed');

      // Restored from history: the question once, no input box any more, the answer once.
      await page.reload();
      await page.locator('#stream .msg-assistant', { hasText: 'You said: the blue one' }).waitFor();
      await page.locator('#stream .msg-user', { hasText: 'the blue one' }).waitFor();
      assert.equal(await page.locator('#stream', { hasText: 'What should I use?' }).count(), 1);
      const questionTexts = await page.locator('#stream .question-text, #stream .msg-assistant .bubble-body').allTextContents();
      assert.equal(questionTexts.filter((t) => t.includes('What should I use?')).length, 1);
      assert.equal(await page.locator('#stream .question textarea').count(), 0);
      assert.equal(await page.locator('#runbar').isVisible(), false);
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });

  it('cancels a long run with the Cancel button', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      await send(page, 'steps: 200');
      await page.locator('#runbar[data-state="running"]').waitFor();
      await waitFor(async () => countStepLines(await stepLineTexts(page)) >= 2, 'the run to make progress');
      await screenshot(page, 'chat-running');
      await page.locator('#btn-cancel').click();
      await page.locator('#runbar').waitFor({ state: 'hidden' });
      const sessionId = sessionIdOf(page);
      const exec = await waitFor(async () => {
        const [e] = await executionsOf(sessionId);
        return e.status === 'cancelled' && e;
      }, 'the execution to be cancelled');
      assert.ok(exec.step_count < 200);
      await page.locator('#stream .exec[data-status="cancelled"]').waitFor();
      assert.equal(await page.locator('#stream .msg-assistant', { hasText: 'Done: 200 steps' }).count(), 0);
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });

  it('stops a long run and sends the new message with Stop and send, keeping both', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      assert.equal(await page.locator('#btn-stop-send').isVisible(), false, 'no run: only Send');
      await send(page, 'steps: 200');
      await page.locator('#runbar[data-state="running"]').waitFor();
      await page.locator('#btn-stop-send').waitFor();
      await waitFor(async () => countStepLines(await stepLineTexts(page)) >= 1, 'the run to start');
      await page.locator('#input').fill('2+2');
      await page.locator('#btn-stop-send').click();
      await page.locator('#stream .msg-user', { hasText: '2+2' }).waitFor();
      await page.locator('#stream .exec[data-status="cancelled"]').waitFor();
      const sessionId = sessionIdOf(page);
      const execs = await waitFor(async () => {
        const all = await executionsOf(sessionId);
        return all.length === 2 && all[1].status === 'completed' && all;
      }, 'the new message to be answered');
      assert.equal(execs[0].status, 'cancelled');
      assert.ok(execs[0].step_count < 200);
      await page.locator('#runbar').waitFor({ state: 'hidden' });
      assert.equal(await page.locator('#btn-stop-send').isVisible(), false);
      assert.equal(await page.locator('#stream .msg-user').count(), 2);
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });

  it('cancels with Esc', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      await send(page, 'steps: 200');
      await waitFor(async () => countStepLines(await stepLineTexts(page)) >= 1, 'the run to start');
      await page.keyboard.press('Escape');
      await page.locator('#stream .exec[data-status="cancelled"]').waitFor();
      const [exec] = await executionsOf(sessionIdOf(page));
      assert.equal(exec.status, 'cancelled');
    } finally {
      await context.close();
    }
  });

  it('never shows one session inside another while switching during a run', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      await send(page, 'steps: 200');
      await waitFor(async () => countStepLines(await stepLineTexts(page)) >= 2, 'session A to run');
      const sessionA = sessionIdOf(page);
      const [execA] = await executionsOf(sessionA);

      // Switch to a new session while A keeps streaming.
      await page.locator('#btn-new').click();
      assert.equal(await page.locator('#stream > *').count(), 0);
      await send(page, 'hello from B');
      await page.locator('#stream .msg-assistant', { hasText: 'Echo: hello from B' }).waitFor();
      const sessionB = sessionIdOf(page);
      assert.notEqual(sessionA, sessionB);
      const stepsAtSwitch = (await api('GET', `/v1/executions/${execA.id}`)).body.step_count;
      // Let A make visible progress on the server while B is on screen.
      await waitFor(async () => (await api('GET', `/v1/executions/${execA.id}`)).body.step_count >= stepsAtSwitch + 5, 'A to go on');

      const execIdsB = new Set((await executionsOf(sessionB)).map((e) => e.id));
      const shownExecIds = await page.locator('#stream [data-execution-id]').evaluateAll((els) => els.map((e) => e.dataset.executionId));
      for (const id of shownExecIds) assert.ok(execIdsB.has(id), `execution ${id} shown in B is not B's`);
      const text = await page.locator('#stream').textContent();
      assert.ok(!text.includes('steps: 200'), "A's message leaked into B");
      assert.equal(countStepLines(await stepLineTexts(page)), 0, "A's steps leaked into B");
      assert.match(await page.locator('#session-title').textContent(), /hello from B/);

      // Back to A through History: its history is there and B's is not.
      await page.locator('#btn-history').click();
      await page.locator(`#history-list .history-item[data-session-id="${sessionA}"] .history-open`).click();
      await page.locator('#stream .msg-user', { hasText: 'steps: 200' }).waitFor();
      await waitFor(async () => countStepLines(await stepLineTexts(page)) >= stepsAtSwitch + 5, "A's steps restored");
      assert.ok(!(await page.locator('#stream').textContent()).includes('hello from B'));
      const shownInA = await page.locator('#stream [data-execution-id]').evaluateAll((els) => els.map((e) => e.dataset.executionId));
      for (const id of shownInA) assert.equal(id, execA.id);
      await screenshot(page, 'history-panel');
      await api('POST', `/v1/executions/${execA.id}/cancel`);
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });

  it('comes back after a reload in the middle of a run, each line exactly once', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      await send(page, 'steps: 100');
      await waitFor(async () => countStepLines(await stepLineTexts(page)) >= 3, 'the run to make progress');
      const sessionId = sessionIdOf(page);
      await page.reload();
      // The run is still going after the reload, and the page follows it live.
      const [execBefore] = await executionsOf(sessionId);
      assert.ok(['pending', 'running'].includes(execBefore.status), `expected a live run, got ${execBefore.status}`);
      await page.locator('#runbar[data-state="running"]').waitFor();
      await page.locator('#stream .msg-assistant', { hasText: 'Done: 100 steps' }).waitFor({ timeout: 30000 });

      const texts = (await stepLineTexts(page)).filter((t) => /^step \d+: called calculator/i.test(t));
      assert.equal(texts.length, 100, 'every step line exactly once');
      assert.equal(new Set(texts).size, 100, 'no step line twice');
      assert.equal(await page.locator('#stream .msg-user').count(), 1);
      assert.equal((await assistantTexts(page)).filter((t) => t.includes('Done: 100 steps')).length, 1);
      const ids = await page.locator('#stream [data-message-id]').evaluateAll((els) => els.map((e) => e.dataset.messageId));
      assert.equal(new Set(ids).size, ids.length, 'no message rendered twice');
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });

  it('never runs script from the answer and shows it as text', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      const payload = 'look <script>window.__xss=1</script> and <img src=x onerror="window.__xss=2"> here';
      await send(page, payload);
      const answer = page.locator('#stream .msg-assistant', { hasText: 'Echo:' });
      await answer.waitFor();
      assert.equal(await page.evaluate(() => window.__xss), undefined);
      const shown = await answer.locator('.bubble-body').textContent();
      assert.ok(shown.includes('<script>window.__xss=1</script>'), `answer shown as: ${shown}`);
      assert.ok(shown.includes('<img src=x onerror="window.__xss=2">'));
      assert.equal(await page.locator('#stream script, #stream img').count(), 0);
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });

  it('renders Markdown safely', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      const html = await page.evaluate(() => window.stepwiseUi.renderMarkdown([
        '# Title', '', 'Some **bold**, _em_ and `<b>code</b>`.', '',
        '- one', '- two', '', '```', '<script>alert(1)</script>', '```', '',
        '[bad](javascript:alert(1)) [good](https://example.org/?a=1&b=2) <img src=x onerror=alert(1)>',
      ].join('\n')));
      assert.match(html, /<h3>Title<\/h3>/);
      assert.match(html, /<strong>bold<\/strong>/);
      assert.match(html, /<em>em<\/em>/);
      assert.match(html, /<code>&lt;b&gt;code&lt;\/b&gt;<\/code>/);
      assert.match(html, /<ul><li>one<\/li><li>two<\/li><\/ul>/);
      assert.match(html, /<pre><code>&lt;script&gt;alert\(1\)&lt;\/script&gt;<\/code><\/pre>/);
      assert.ok(!html.includes('href="javascript'), html);
      assert.match(html, /<a href="https:\/\/example.org\/\?a=1&amp;b=2"[^>]*>good<\/a>/);
      assert.ok(!/<img/i.test(html) && !/<script/i.test(html), html);
    } finally {
      await context.close();
    }
  });
});

// History browser, execution inspector, reconnects and layouts, in headless Chromium against
// the real server.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  BASE, launch, openPage, screenshot, api, waitFor, send, sessionIdOf,
  stepLineTexts, countStepLines,
} from './helpers.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { if (browser) await browser.close(); });

async function newSessionWithAnswer(title, content) {
  const res = await api('POST', '/v1/messages', { content, session: { title } });
  assert.equal(res.status, 202);
  const sessionId = res.body.session_id;
  await waitFor(async () => {
    const exec = (await api('GET', `/v1/executions/${res.body.execution.id}`)).body;
    return ['completed', 'failed', 'cancelled'].includes(exec.status);
  }, `session ${title} to finish`);
  return sessionId;
}

describe('history', () => {
  it('lists, searches, renames, archives and deletes sessions', async () => {
    const tag = `h${Date.now().toString(36)}`;
    const first = await newSessionWithAnswer(`${tag} alpha report`, 'hello alpha');
    const second = await newSessionWithAnswer(`${tag} beta notes`, 'hello beta');
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      await page.locator('#btn-history').click();
      const row = (id) => page.locator(`#history-list .history-item[data-session-id="${id}"]`);
      await row(first).waitFor();
      await row(second).waitFor();

      // Newest first: the second session was updated last.
      const order = await page.locator('#history-list .history-item').evaluateAll((els) => els.map((e) => e.dataset.sessionId));
      assert.ok(order.indexOf(second) < order.indexOf(first), 'newest first');
      assert.match(await row(first).textContent(), /active/);
      // No "N messages": the session's message_count counts its runs' status lines too.
      assert.doesNotMatch(await row(first).textContent(), /\d+ messages?/);
      // The first question under the title (the session's first_message).
      assert.equal(await row(first).locator('.history-first').textContent(), 'hello alpha');

      // Search filters by title over the loaded rows.
      await page.locator('#history-search').fill(`${tag} beta`);
      assert.equal(await row(first).isVisible(), false);
      assert.equal(await row(second).isVisible(), true);
      await page.locator('#history-search').fill('');

      // Open restores the full history.
      await row(first).locator('.history-open').click();
      await page.locator('#stream .msg-user', { hasText: 'hello alpha' }).waitFor();
      await page.locator('#stream .msg-assistant', { hasText: 'Echo: hello alpha' }).waitFor();
      assert.equal(sessionIdOf(page), first);

      // Rename.
      await row(first).getByRole('button', { name: /^Rename/ }).click();
      await page.locator('#rename-input').fill(`${tag} alpha renamed`);
      await page.locator('#rename-dialog button[value="ok"]').click();
      await waitFor(async () => (await row(first).textContent()).includes('alpha renamed'), 'the row to show the new title');
      assert.equal((await api('GET', `/v1/sessions/${first}`)).body.title, `${tag} alpha renamed`);
      assert.match(await page.locator('#session-title').textContent(), /alpha renamed/);

      // Archive, then find it under the Archived filter.
      await row(first).getByRole('button', { name: /^Archive/ }).click();
      await waitFor(async () => (await api('GET', `/v1/sessions/${first}`)).body.status === 'archived', 'archived');
      await page.locator('#history-status').selectOption('archived');
      await row(first).waitFor();
      assert.equal(await row(second).count(), 0);
      await page.locator('#history-status').selectOption('');
      await row(second).waitFor();

      // Delete asks first; cancelling keeps the session.
      await row(second).getByRole('button', { name: /^Delete/ }).click();
      await page.locator('#confirm-dialog').waitFor();
      await screenshot(page, 'history-confirm-delete');
      await page.locator('#confirm-dialog button[value="cancel"]').click();
      assert.equal((await api('GET', `/v1/sessions/${second}`)).body.status, 'active');
      await row(second).getByRole('button', { name: /^Delete/ }).click();
      await page.locator('#confirm-dialog button[value="ok"]').click();
      await row(second).waitFor({ state: 'detached' });
      assert.equal((await api('GET', `/v1/sessions/${second}`)).body.status, 'deleted');
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });

  it('pages through a long list', async () => {
    const { context, page } = await openPage(browser);
    try {
      // The UI asks for 100 a page; make sure there is more than one page.
      const existing = (await api('GET', '/v1/sessions?limit=500')).body.items.length;
      for (let i = existing; i < 105; i += 1) {
        const res = await api('POST', '/v1/sessions', { title: `paging ${i}` });
        assert.equal(res.status, 201);
      }
      const total = (await api('GET', '/v1/sessions?limit=500')).body.items.length;
      await page.goto(`${BASE}/`);
      await page.locator('#btn-history').click();
      await page.locator('#history-list .history-item').first().waitFor();
      // Scrolling to the end loads the next page (or the button does).
      await waitFor(async () => {
        const n = await page.locator('#history-list .history-item').count();
        if (n >= total) return true;
        await page.locator('#history').evaluate((panel) => { panel.scrollTop = panel.scrollHeight; });
        return false;
      }, 'every session to be listed');
      const ids = await page.locator('#history-list .history-item').evaluateAll((els) => els.map((e) => e.dataset.sessionId));
      assert.equal(new Set(ids).size, ids.length, 'no session listed twice');
      assert.equal(ids.length, total);
    } finally {
      await context.close();
    }
  });
});

describe('execution inspector', () => {
  it('shows steps with tool calls, snapshots as a JSON tree, and subagents under their parent', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      await send(page, 'delegate: 2+3*4');
      await page.locator('#stream .msg-assistant', { hasText: '14' }).waitFor();
      const sessionId = sessionIdOf(page);
      const execs = (await api('GET', `/v1/sessions/${sessionId}/executions`)).body.items;
      const parent = execs.find((e) => !e.parent_execution_id);
      const child = execs.find((e) => e.parent_execution_id === parent.id);
      assert.ok(child, 'the demo agent ran a subagent');

      await page.locator(`#stream .exec[data-execution-id="${parent.id}"] > .exec-tools .exec-inspect`).click();
      const inspector = page.locator('#inspector');
      const parentSection = inspector.locator(`.inspect-exec[data-execution-id="${parent.id}"]`);
      await parentSection.waitFor();
      assert.match(await parentSection.locator('h3').first().textContent(), /completed/);
      assert.match(await parentSection.locator('h3').first().textContent(), /demo/);
      // The subagent is nested inside the parent's section, with its calculator call.
      const childSection = parentSection.locator(`.subagents .inspect-exec[data-execution-id="${child.id}"]`);
      await childSection.waitFor();
      const childSteps = childSection.locator('.step-card');
      assert.ok(await childSteps.count() >= 1);
      assert.match(await childSection.textContent(), /calculator/);
      assert.match(await childSection.textContent(), /expression/);

      // Snapshots open into a JSON tree.
      const snapshot = parentSection.locator(':scope > .snapshots .snapshot').first();
      await snapshot.locator('summary').click();
      await snapshot.locator('.json-node, .json-leaf').first().waitFor();
      await screenshot(page, 'inspector');
      await page.keyboard.press('Escape');
      await inspector.waitFor({ state: 'hidden' });
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });

  it('follows a live run, and closes when the session changes', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      await send(page, 'steps: 200');
      await waitFor(async () => countStepLines(await stepLineTexts(page)) >= 2, 'the run to start');
      await page.locator('#stream .exec > .exec-tools .exec-inspect').first().click();
      const cards = page.locator('#inspector .step-card');
      await cards.first().waitFor();
      const before = await cards.count();
      // No click on Refresh: the inspector updates itself while the run goes on.
      await waitFor(async () => (await cards.count()) >= before + 3, 'the inspector to show new steps');
      await page.locator('#btn-new').click();
      await page.locator('#inspector').waitFor({ state: 'hidden' });
    } finally {
      await context.close();
    }
  });

  it('shows a failed run with its error', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      await send(page, 'please fail now');
      await page.locator('#stream .line-error').waitFor();
      await page.locator('#stream .exec[data-status="failed"]').waitFor();
      await page.locator('#stream .exec-inspect').first().click();
      await page.locator('#inspector .step-error').first().waitFor();
      assert.match(await page.locator('#inspector .kv-error').textContent(), /\S/);
      await page.keyboard.press('Escape');

      // Restored after a reload, the failure stays where it happened, before the next request.
      await send(page, 'hello again');
      await page.locator('#stream .msg-assistant', { hasText: 'Echo: hello again' }).waitFor();
      await page.reload();
      await page.locator('#stream .msg-assistant', { hasText: 'Echo: hello again' }).waitFor();
      const order = await page.locator('#stream > *').evaluateAll((els) => els.map((e) => {
        if (e.classList.contains('line-error')) return 'failed';
        if (e.classList.contains('msg-user')) return `user:${e.textContent}`;
        return null;
      }).filter(Boolean));
      assert.equal(order.filter((o) => o === 'failed').length, 1, order.join(' | '));
      assert.ok(order.indexOf('failed') < order.findIndex((o) => o.startsWith('user:hello again')), order.join(' | '));
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });
});

describe('resilience and layout', () => {
  it('reconnects by itself after the connection drops, and says so', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      await send(page, 'steps: 80');
      await waitFor(async () => countStepLines(await stepLineTexts(page)) >= 2, 'the run to start');
      // Offline, then the live connection cut: every reconnect attempt fails until back online.
      await context.setOffline(true);
      await page.evaluate(() => window.stepwiseUi.dropConnection());
      await page.locator('#banner-conn').waitFor();
      assert.match(await page.locator('#banner-conn').textContent(), /reconnect/i);
      await screenshot(page, 'reconnecting');
      await context.setOffline(false);
      await page.locator('#stream .msg-assistant', { hasText: 'Done: 80 steps' }).waitFor({ timeout: 40000 });
      const texts = (await stepLineTexts(page)).filter((t) => /^step \d+: called calculator/i.test(t));
      assert.equal(texts.length, 80);
      assert.equal(new Set(texts).size, 80);
    } finally {
      await context.close();
    }
  });

  it('fits a phone screen and follows the dark system theme', async () => {
    const { context, page } = await openPage(browser, { viewport: { width: 390, height: 780 }, colorScheme: 'dark', isMobile: true, hasTouch: true });
    try {
      await page.goto(`${BASE}/?related_type=order&related_id=7`);
      await send(page, 'steps: 3');
      await page.locator('#stream .msg-assistant', { hasText: 'Done: 3 steps' }).waitFor();
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
      assert.ok(overflow <= 0, `no sideways scrolling at phone width (overflow ${overflow}px)`);
      const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
      const [r, g, b] = bg.match(/\d+/g).map(Number);
      assert.ok(r + g + b < 150, `dark background expected, got ${bg}`);
      await screenshot(page, 'phone-dark');
      await page.locator('#btn-history').click();
      await page.locator('#history-list .history-item').first().waitFor();
      await screenshot(page, 'phone-history');
    } finally {
      await context.close();
    }
  });

  it('labels its controls for assistive technology', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${BASE}/`);
      for (const name of [/^Send message$/, /^New Session$/, /^History$/]) {
        assert.equal(await page.getByRole('button', { name }).count(), 1, `button ${name}`);
      }
      assert.equal(await page.getByRole('textbox', { name: 'Message' }).count(), 1);
      assert.equal(await page.getByRole('log', { name: 'Messages' }).count(), 1);
      // Shift+Enter adds a line instead of sending.
      await page.locator('#input').fill('line one');
      await page.locator('#input').press('Shift+Enter');
      await page.locator('#input').type('line two');
      assert.equal(await page.locator('#input').inputValue(), 'line one\nline two');
      assert.equal(await page.locator('#stream .msg-user').count(), 0);
    } finally {
      await context.close();
    }
  });
});

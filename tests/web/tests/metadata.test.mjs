// The page reads which step a status line belongs to from the message's metadata
// (`step_number`, `tool`, `kind`), never from its text: a session whose stored history and live
// events the test controls (through Playwright's request routing, against a real session on
// the real server) shows exactly the steps the metadata names.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { BASE, launch, openPage, api, waitFor } from './helpers.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { if (browser) await browser.close(); });

const json = (body) => ({ status: 200, contentType: 'application/json', body: JSON.stringify(body) });

function message(sessionId, executionId, role, content, metadata) {
  return {
    id: randomUUID(), session_id: sessionId, role, content, execution_id: executionId,
    related_type: null, related_id: null, context_url: null, metadata, created_at: new Date().toISOString(),
  };
}

describe('step metadata', () => {
  it('counts the steps the metadata names, in history and live, whatever the text says', async () => {
    const created = await api('POST', '/v1/sessions', { title: 'metadata steps' });
    assert.equal(created.status, 201);
    const sessionId = created.body.id;
    const executionId = randomUUID();
    const execution = {
      id: executionId, session_id: sessionId, parent_execution_id: null, agent_type: 'tool_calling',
      agent_config: {}, status: 'running', input: {}, output: null, last_snapshot_id: null, step_count: 0,
      token_usage: { input: 0, output: 0, total: 0 }, metadata: {}, error_message: null, attempts: 1,
      started_at: new Date().toISOString(), completed_at: null, created_at: new Date().toISOString(),
      updated_at: new Date().toISOString(),
    };
    const history = [
      message(sessionId, null, 'user', 'look up the prices', {}),
      // No "Step N:" in the text: the step number is only in the metadata.
      message(sessionId, executionId, 'info', 'Searched the web for prices', { step_number: 1, tool: 'search', kind: 'tool_call' }),
      // The text says 9, the metadata says 2: the metadata wins.
      message(sessionId, executionId, 'info', 'Step 9: read a page', { step_number: 2, tool: 'fetch', kind: 'tool_call' }),
      // Looks like a step line, carries no step: not counted.
      message(sessionId, executionId, 'info', 'Step 7: a note without metadata', {}),
    ];
    const live = message(sessionId, executionId, 'info', 'Summarised what it found', { step_number: 3, tool: 'summarize', kind: 'tool_call' });
    const liveEvent = {
      session_id: sessionId, message_id: live.id, execution_id: executionId, event_type: 'message.created',
      content: live.content, metadata: { role: 'info', ...live.metadata }, timestamp: live.created_at,
    };

    const { context, page } = await openPage(browser);
    try {
      await page.route(`**/v1/sessions/${sessionId}/executions*`, (route) => route.fulfill(json({ items: [execution], next_cursor: null })));
      await page.route(`**/v1/executions/${executionId}`, (route) => route.fulfill(json(execution)));
      await page.route(`**/v1/sessions/${sessionId}/messages*`, (route) => {
        const after = new URL(route.request().url()).searchParams.get('after');
        const items = after ? [live].filter(() => after !== live.id) : history;
        return route.fulfill(json({ items, next_cursor: null }));
      });
      // The first connection delivers the live line; reconnects reach the real (quiet) stream.
      let streams = 0;
      await page.route(`**/v1/sessions/${sessionId}/events*`, (route) => {
        streams += 1;
        if (streams > 1) return route.continue();
        return route.fulfill({
          status: 200,
          contentType: 'text/event-stream',
          body: `id: 1\nevent: message.created\ndata: ${JSON.stringify(liveEvent)}\n\n`,
        });
      });

      await page.goto(`${BASE}/?session=${sessionId}`);
      const group = page.locator(`#stream .exec[data-execution-id="${executionId}"]`);
      const lines = group.locator('.step-line');
      await waitFor(async () => (await lines.count()) === 4, 'the three stored lines and the live one');

      const shown = await lines.evaluateAll((els) => els.map((e) => ({
        text: e.querySelector('.step-text').textContent,
        step: e.dataset.stepNumber || null,
        tool: e.dataset.tool || null,
        kind: e.dataset.kind || null,
      })));
      assert.deepEqual(shown, [
        { text: 'Searched the web for prices', step: '1', tool: 'search', kind: 'tool_call' },
        { text: 'Step 9: read a page', step: '2', tool: 'fetch', kind: 'tool_call' },
        { text: 'Step 7: a note without metadata', step: null, tool: null, kind: null },
        { text: 'Summarised what it found', step: '3', tool: 'summarize', kind: 'tool_call' },
      ]);
      // Steps 1, 2 and 3: not 7, not 9.
      await waitFor(async () => (await group.locator('.exec-count').textContent()) === '3 steps', 'the group to count 3 steps');
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });
});

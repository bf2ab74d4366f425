// Streamed tokens (`message.delta`) from the tool-calling agent, against a server whose LLM is
// the fake one of support/fake-llm.mjs (both started by run.sh).
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, openPage, screenshot, send } from './helpers.mjs';

const LLM_SERVER = (process.env.STEPWISE_LLM_SERVER_URL || '').replace(/\/$/, '');
const FAKE_LLM = (process.env.FAKE_LLM_URL || '').replace(/\/$/, '');

let browser;
before(async () => { if (LLM_SERVER) browser = await launch(); });
after(async () => { if (browser) await browser.close(); });

describe('tool-calling agent', { skip: LLM_SERVER && FAKE_LLM ? false : 'no LLM-backed server (STEPWISE_LLM_SERVER_URL)' }, () => {
  it('renders streamed tokens as they arrive, then the finished answer once', async (t) => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${LLM_SERVER}/`);
      await send(page, 'say hello');
      const streaming = page.locator('#stream .msg-assistant.streaming');
      const firstExec = await Promise.race([
        streaming.waitFor().then(() => 'streaming'),
        page.locator('#stream .exec .badge-demo').waitFor().then(() => 'demo'),
        page.locator('#stream .line-error').waitFor().then(() => 'failed'),
      ]);
      if (firstExec === 'failed') {
        assert.fail(`the tool-calling run failed: ${await page.locator('#stream .line-error').first().textContent()}`);
      }
      if (firstExec === 'demo') {
        t.skip('this build of `stepwise serve` does not use STEPWISE_LLM_BASE_URL yet');
        return;
      }
      // Tokens are on screen while the model is still answering.
      await streaming.filter({ hasText: 'Hello wor' }).waitFor();
      assert.equal(await page.locator('#banner-demo').isVisible(), false);
      await screenshot(page, 'chat-streaming');
      const released = await (await fetch(`${FAKE_LLM}/control/release`, { method: 'POST' })).json();
      assert.ok(released.released >= 1);
      const answer = page.locator('#stream .msg-assistant:not(.streaming)', { hasText: 'Hello world, done.' });
      await answer.waitFor();
      await streaming.waitFor({ state: 'detached' });
      assert.equal(await page.locator('#stream .msg-assistant', { hasText: 'Hello world' }).count(), 1);
      assert.match(await page.locator('#stream .exec .badge-agent').first().textContent(), /tool-calling/);
      assert.deepEqual(page.errors, []);
    } finally {
      await fetch(`${FAKE_LLM}/control/release`, { method: 'POST' }).catch(() => {});
      await context.close();
    }
  });
});

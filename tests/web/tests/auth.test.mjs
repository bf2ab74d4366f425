// The API key prompt, against a server that requires a key (started by run.sh).
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, openPage, screenshot, send } from './helpers.mjs';

const AUTH_URL = (process.env.STEPWISE_AUTH_URL || '').replace(/\/$/, '');
const AUTH_KEY = process.env.STEPWISE_AUTH_KEY || '';

let browser;
before(async () => { if (AUTH_URL) browser = await launch(); });
after(async () => { if (browser) await browser.close(); });

describe('API keys', { skip: AUTH_URL && AUTH_KEY ? false : 'no key-protected server (STEPWISE_AUTH_URL)' }, () => {
  it('asks for a key, keeps it for the tab, and asks again when it is refused', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${AUTH_URL}/`);
      const dialog = page.locator('#auth-dialog');
      await dialog.waitFor();
      await screenshot(page, 'auth-prompt');
      await page.locator('#auth-key').fill('not-a-real-key');
      await page.locator('#auth-dialog button[type="submit"]').click();
      await page.locator('#auth-error', { hasText: 'not accepted' }).waitFor();
      await page.locator('#auth-key').fill(AUTH_KEY);
      await page.locator('#auth-dialog button[type="submit"]').click();
      await dialog.waitFor({ state: 'hidden' });

      await send(page, 'hello with a key');
      await page.locator('#stream .msg-assistant', { hasText: 'Echo: hello with a key' }).waitFor();
      assert.equal(await page.evaluate(() => sessionStorage.getItem('stepwise.apiKey')), AUTH_KEY);

      // The key lives in the tab's session storage: a reload does not ask again.
      await page.reload();
      await page.locator('#stream .msg-assistant', { hasText: 'Echo: hello with a key' }).waitFor();
      assert.equal(await dialog.isVisible(), false);
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });
});

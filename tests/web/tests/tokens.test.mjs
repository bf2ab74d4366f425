// End users signed in with a token in the URL (`/#token=...`, as an application that embeds or
// links to the UI hands one over), against the server that requires a key (started by run.sh):
// the token leaves the address bar, goes with every request, a user sees only their own
// sessions, the embed URL's context parameters work beside it, and a refused token says so.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { apiAt, launch, openPage, screenshot, send, sessionIdOf, waitFor } from './helpers.mjs';

const AUTH_URL = (process.env.STEPWISE_AUTH_URL || '').replace(/\/$/, '');
const AUTH_KEY = process.env.STEPWISE_AUTH_KEY || '';
const call = (method, urlPath, body, bearer) => apiAt(AUTH_URL, method, urlPath, body, bearer);

const tag = Math.random().toString(36).slice(2, 8);
const tokens = {};
const sessions = {};

let browser;
before(async () => {
  if (!AUTH_URL) return;
  // The admin key mints a token per user, and each user starts a session of their own with it.
  for (const user of ['alice', 'bob']) {
    const minted = await call('POST', '/v1/tokens', { user_id: user, ttl_s: 3600 }, AUTH_KEY);
    assert.equal(minted.status, 201, JSON.stringify(minted.body));
    assert.equal(minted.body.user_id, user);
    assert.ok(Date.parse(minted.body.expires_at) > Date.now(), minted.body.expires_at);
    tokens[user] = minted.body.token;
    const created = await call('POST', '/v1/sessions', { title: `${user}'s notes ${tag}` }, tokens[user]);
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(created.body.user_id, user);
    sessions[user] = created.body;
  }
  browser = await launch();
});
after(async () => { if (browser) await browser.close(); });

const pageUrl = (page) => page.evaluate(() => location.href);

async function historyIds(page) {
  await page.locator('#btn-history').click();
  await page.locator('#history-list .history-item').first().waitFor();
  await waitFor(async () => (await page.locator('#history-status-text').textContent()) !== 'Loading…', 'the history to load');
  return page.locator('#history-list .history-item').evaluateAll((rows) => rows.map((r) => r.dataset.sessionId));
}

describe('sign-in tokens', { skip: AUTH_URL && AUTH_KEY ? false : 'no key-protected server (STEPWISE_AUTH_URL)' }, () => {
  for (const [me, other] of [['alice', 'bob'], ['bob', 'alice']]) {
    it(`${me} signs in with /#token=, the token leaves the address bar, and ${me} sees only ${me}'s sessions`, async () => {
      const { context, page } = await openPage(browser);
      try {
        const seen = [];
        page.on('request', (r) => { if (new URL(r.url()).pathname.startsWith('/v1/')) seen.push(r); });
        await page.goto(`${AUTH_URL}/#token=${tokens[me]}`);
        const ids = await historyIds(page);
        assert.equal(await pageUrl(page), `${AUTH_URL}/`, 'no token (and no empty #) in the address bar');
        assert.equal(await page.evaluate(() => sessionStorage.getItem('stepwise.token')), tokens[me]);
        assert.equal(await page.locator('#auth-dialog').isVisible(), false);
        assert.ok(ids.includes(sessions[me].id), `${me}'s session is listed`);
        assert.ok(!ids.includes(sessions[other].id), `${other}'s session is not`);
        await page.locator(`#history-list [data-session-id="${sessions[me].id}"]`, { hasText: `${me}'s notes ${tag}` }).waitFor();
        for (const r of seen) assert.equal((await r.allHeaders()).authorization, `Bearer ${tokens[me]}`, r.url());
        await screenshot(page, `tokens-history-${me}`);

        // A session started here is the user's own; the other user's is not found.
        await page.locator('#btn-history-close').click();
        await send(page, `hello from ${me}`);
        await page.locator('#stream .msg-assistant', { hasText: `Echo: hello from ${me}` }).waitFor();
        const mine = sessionIdOf(page);
        assert.equal((await call('GET', `/v1/sessions/${mine}`, undefined, tokens[me])).body.user_id, me);
        assert.equal((await call('GET', `/v1/sessions/${mine}`, undefined, tokens[other])).status, 404);
        assert.doesNotMatch(await pageUrl(page), /token/);

        // The token lives in the tab: a link to the other user's session answers "not yours".
        await page.goto(`${AUTH_URL}/?session=${sessions[other].id}`);
        await page.locator('#stream .line-error', { hasText: 'not yours' }).waitFor();
        assert.deepEqual(page.errors, []);
      } finally {
        await context.close();
      }
    });
  }

  it('the embed URL: session, related_type, related_id and context_url beside #token=', async () => {
    const contextUrl = 'https://tracker.example/issues/42';
    const query = `related_type=issue&related_id=42&context_url=${encodeURIComponent(contextUrl)}`;
    const { context, page } = await openPage(browser);
    let sessionId;
    try {
      await page.goto(`${AUTH_URL}/?session=&${query}#token=${tokens.alice}`);
      await page.locator('#context-chips', { hasText: 'issue #42' }).waitFor();
      assert.equal(await pageUrl(page), `${AUTH_URL}/?session=&${query}`, 'the path and query stay, the token goes');
      await send(page, 'about this issue');
      await page.locator('#stream .msg-assistant', { hasText: 'Echo: about this issue' }).waitFor();
      sessionId = sessionIdOf(page);
      const session = (await call('GET', `/v1/sessions/${sessionId}`, undefined, tokens.alice)).body;
      assert.equal(session.user_id, 'alice');
      assert.equal(session.related_type, 'issue');
      assert.equal(session.related_id, '42');
      assert.equal(session.initial_context_url, contextUrl);
      const url = new URL(await pageUrl(page));
      assert.equal(url.searchParams.get('related_id'), '42');
      assert.equal(url.hash, '');
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }

    // The same embed URL naming that session, in a fresh tab: it opens with its history.
    const again = await openPage(browser);
    try {
      await again.page.goto(`${AUTH_URL}/?session=${sessionId}&${query}#token=${tokens.alice}`);
      await again.page.locator('#stream .msg-assistant', { hasText: 'Echo: about this issue' }).waitFor();
      await again.page.locator('#session-chips', { hasText: 'issue #42' }).waitFor();
      assert.equal(await pageUrl(again.page), `${AUTH_URL}/?session=${sessionId}&${query}`);
      await screenshot(again.page, 'tokens-embed');
      assert.deepEqual(again.page.errors, []);
    } finally {
      await again.context.close();
    }
  });

  it('a refused token says it expired or is not valid; a new one from the embedding page goes on', async () => {
    const { context, page } = await openPage(browser);
    try {
      await page.goto(`${AUTH_URL}/?related_type=issue&related_id=7#token=not-a-valid-token`);
      const dialog = page.locator('#auth-dialog');
      await dialog.waitFor();
      assert.equal(await page.locator('#auth-title').textContent(), 'Sign-in token not accepted');
      await page.locator('#auth-error', { hasText: 'expired or is not valid' }).waitFor();
      assert.equal(await page.evaluate(() => sessionStorage.getItem('stepwise.token')), null, 'the refused token is forgotten');
      await screenshot(page, 'tokens-refused');

      // The embedding page hands over a fresh token by changing the frame's fragment: no reload.
      await page.evaluate((token) => { location.hash = `token=${token}`; }, tokens.bob);
      await dialog.waitFor({ state: 'hidden' });
      await waitFor(async () => (await pageUrl(page)) === `${AUTH_URL}/?related_type=issue&related_id=7`, 'the token to leave the address bar');
      const ids = await historyIds(page);
      assert.ok(ids.includes(sessions.bob.id));
      assert.ok(!ids.includes(sessions.alice.id));
      assert.deepEqual(page.errors, []);
    } finally {
      await context.close();
    }
  });
});

// The live connection: Server-Sent Events read over fetch (so the credential can go in a header),
// with Last-Event-ID catch-up after a reconnect and a banner that says what is going on.

import { authHeaders, replaceRejectedKey } from './api.js';
import { $ } from './dom.js';
import { sleep } from './format.js';

// Reads a text/event-stream body and calls onEvent({id, event, data}) per event. `id` is
// the event's own id line, or null when it had none (live-only deltas).
export async function readEventStream(body, onEvent, onActivity) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let id = null;
  let event = '';
  let data = [];
  const dispatch = () => {
    if (data.length) onEvent({ id, event: event || 'message', data: data.join('\n') });
    id = null;
    event = '';
    data = [];
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    onActivity();
    buffer += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, nl);
      const skip = buffer[nl] === '\r' && buffer[nl + 1] === '\n' ? 2 : 1;
      // A lone CR at the buffer's end may be half of CRLF: wait for more.
      if (buffer[nl] === '\r' && nl + 1 === buffer.length) break;
      buffer = buffer.slice(nl + skip);
      if (line === '') {
        dispatch();
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? '' : line.slice(colon + 1);
      if (val.startsWith(' ')) val = val.slice(1);
      if (field === 'id') id = val;
      else if (field === 'event') event = val;
      else if (field === 'data') data.push(val);
    }
  }
}

let connNoticeTimer = null;
/** Shows (or with no text hides) the connection banner; an 'ok' notice fades by itself. */
export function setConnectionNotice(text, kind) {
  const banner = $('banner-conn');
  clearTimeout(connNoticeTimer);
  if (!text) {
    banner.hidden = true;
    return;
  }
  banner.textContent = text;
  banner.dataset.kind = kind || 'info';
  banner.hidden = false;
  if (kind === 'ok') connNoticeTimer = setTimeout(() => { banner.hidden = true; }, 2500);
}

/**
 * Follows a session's events until `current` closes: reconnects with backoff after a drop and
 * resumes with `Last-Event-ID` (the last id `current` applied), so nothing is missed or repeated.
 */
export async function runStream(current, onEvent) {
  let delay = 500;
  let dropped = false;
  while (!current.closed) {
    const conn = new AbortController();
    current.conn = conn;
    const onAbort = () => conn.abort();
    current.abort.signal.addEventListener('abort', onAbort);
    let idleTimer = null;
    // Keep-alive comments arrive at least every 15 s; silence far beyond that is a dead link.
    const poke = () => {
      clearTimeout(idleTimer);
      idleTimer = setTimeout(() => conn.abort(), 45000);
    };
    try {
      const headers = { Accept: 'text/event-stream', ...authHeaders() };
      if (current.lastEventId > 0) headers['Last-Event-ID'] = String(current.lastEventId);
      const res = await fetch(`/v1/sessions/${current.sessionId}/events`, { headers, signal: conn.signal, cache: 'no-store' });
      if (res.status === 401) {
        await replaceRejectedKey(headers.Authorization);
        continue;
      }
      if (res.status === 404) {
        if (!current.closed) setConnectionNotice('This session no longer exists.', 'error');
        return;
      }
      if (!res.ok || !res.body) throw new Error(`status ${res.status}`);
      current.connected = true;
      if (current.onConnected) {
        current.onConnected();
        current.onConnected = null;
      }
      if (dropped) setConnectionNotice('Reconnected.', 'ok');
      else setConnectionNotice(null);
      delay = 500;
      poke();
      await readEventStream(res.body, onEvent, poke);
    } catch (_) {
      /* fall through to the reconnect below */
    } finally {
      clearTimeout(idleTimer);
      current.abort.signal.removeEventListener('abort', onAbort);
    }
    if (current.closed) return;
    current.connected = false;
    dropped = true;
    const wait = delay + Math.floor(Math.random() * 250);
    setConnectionNotice(`Connection lost. Reconnecting in ${Math.ceil(wait / 1000)} s…`, 'warn');
    await sleep(wait);
    if (!current.closed) setConnectionNotice('Reconnecting…', 'warn');
    delay = Math.min(delay * 2, 15000);
  }
}

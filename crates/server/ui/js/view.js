// The open session's state (SessionView) and the conversation's DOM plumbing shared by the
// chat and its step groups: appending, following the bottom, the header.

import { pageContext } from './context.js';
import { $, el } from './dom.js';
import { sessionLabel } from './format.js';
import { safeUrl } from './markdown.js';

/** Execution statuses of a run still going. */
export const ACTIVE_STATUSES = new Set(['pending', 'running']);
/** Execution statuses of a run that is over. */
export const FINISHED_STATUSES = new Set(['completed', 'failed', 'cancelled']);

// One SessionView per opened session. Switching closes the old one: its stream is aborted and
// every late callback sees `closed` and drops what it carries.
export class SessionView {
  constructor(sessionId) {
    this.sessionId = sessionId;
    this.session = null;
    this.closed = false;
    this.abort = new AbortController();
    this.lastEventId = 0;
    this.messages = new Map();
    this.lastMessageId = null;
    this.execs = new Map();
    this.optimistic = [];
    this.userCount = 0;
    this.queue = [];
    this.draining = false;
    this.connected = false;
    this.lastUserContext = '';
  }

  close() {
    this.closed = true;
    this.abort.abort();
  }
}

/** Fired on `document` when another session is on screen; `detail`: `{sessionId, created}`. */
export const SESSION_EVENT = 'stepwise:session';

/** The session on screen; replaced (never mutated into another) when the user switches. */
export let view = new SessionView(null);

/** Makes `next` the session on screen. */
export function setView(next) {
  view = next;
}

/** The conversation's container: messages, step groups, questions and status lines. */
export const streamEl = $('stream');

// Follows new content while the reader is at the bottom; leaves them alone when they scrolled
// up. Batched per frame: measuring after every appended line would force a layout each time.
let stickToBottom = true;
let scrollQueued = false;
let scrollForced = false;
$('chat').addEventListener('scroll', () => {
  const chat = $('chat');
  stickToBottom = chat.scrollHeight - chat.scrollTop - chat.clientHeight < 160;
}, { passive: true });

export function scrollToBottom(force) {
  if (force) scrollForced = true;
  if (scrollQueued) return;
  scrollQueued = true;
  requestAnimationFrame(() => {
    scrollQueued = false;
    if (scrollForced || stickToBottom) {
      const chat = $('chat');
      chat.scrollTop = chat.scrollHeight;
      stickToBottom = true;
    }
    scrollForced = false;
  });
}

export function updateEmpty() {
  $('empty').hidden = streamEl.children.length > 0;
}

export function appendToStream(node) {
  streamEl.append(node);
  updateEmpty();
  scrollToBottom(false);
}

/** Chips for a related object and a context URL. */
export function renderChips(container, source, withUrl) {
  container.replaceChildren();
  if (source.related_type || source.related_id) {
    const label = [source.related_type, source.related_id ? `#${source.related_id}` : null].filter(Boolean).join(' ');
    container.append(el('span', { class: 'chip', title: 'Related object' }, el('span', { class: 'chip-key' }, 'on'), label));
  }
  const url = withUrl ? (source.context_url || source.initial_context_url) : null;
  if (url) {
    const href = safeUrl(url);
    const text = url.length > 48 ? `${url.slice(0, 47)}…` : url;
    container.append(el('span', { class: 'chip', title: url },
      el('span', { class: 'chip-key' }, 'from'),
      href ? el('a', { href, target: '_blank', rel: 'noopener noreferrer' }, text) : text));
  }
  container.hidden = container.children.length === 0;
}

/** The top bar: the session's title, its context chips and status; the composer's chips. */
export function renderHeader() {
  const session = view.session;
  $('session-title').textContent = view.sessionId ? sessionLabel(session) : 'New session';
  const chips = $('session-chips');
  if (session) {
    renderChips(chips, session, true);
    if (session.status && session.status !== 'active') {
      chips.append(el('span', { class: `chip status status-${session.status}` }, session.status));
      chips.hidden = false;
    }
  } else {
    chips.replaceChildren();
    chips.hidden = true;
  }
  document.title = view.sessionId ? `${sessionLabel(session)} · Stepwise` : 'Stepwise assistant';
  // The composer's chips say what goes with the next message; hide them when the session shows the same.
  const composerChips = $('context-chips');
  const same = session && (session.related_type || null) === pageContext.related_type && (session.related_id || null) === pageContext.related_id
    && (!pageContext.context_url || pageContext.context_url === session.initial_context_url);
  composerChips.hidden = composerChips.children.length === 0 || Boolean(same);
}

/** The top-level execution a subagent's execution runs under (itself when it has no parent). */
export function rootExec(exec) {
  let cur = exec;
  for (let depth = 0; depth < 20; depth += 1) {
    const parentId = cur.data && cur.data.parent_execution_id;
    if (!parentId) break;
    const parent = view.execs.get(parentId);
    if (!parent) break;
    cur = parent;
  }
  return cur;
}

/** An error line in the conversation. */
export function showError(text) {
  appendToStream(el('div', { class: 'line line-error', role: 'alert' }, text));
}

// The open session's state (SessionView) and the conversation's DOM plumbing shared by the
// chat and its step groups: appending, following the bottom, the header and its agent picker.

import { api } from './api.js';
import { pageContext } from './context.js';
import { $, el } from './dom.js';
import { plural, sessionLabel } from './format.js';
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
  renderAgentPicker();
}

// ---- The agent picker in the top bar: the agent types of GET /v1/agents (the server's
// built-in ones, and the ones worker processes run, with whether a worker of each is online),
// refreshed when the picker is opened and every 15 s. With a session open it shows that
// session's default agent and changes it (PATCH); with none open it picks the agent of the
// session the first message creates. "default agent" names none: the server's default runs.

const AGENTS_REFRESH_MS = 15000;
// Opening the picker refreshes the list, at most this often.
const AGENTS_OPEN_REFRESH_MS = 1000;

const picker = {
  agents: [],
  // The agent type picked for the next new session ('' for the server's default).
  next: '',
  // `{view, type}`: the agent type just picked for that session, shown until the server answers.
  pending: null,
  loading: null,
  loadedAt: 0,
};

/**
 * Whether an agent type is run by worker processes (not built into the server): the agent list
 * says so, and a type it does not list is one no worker announced lately. False until the list
 * has loaded, and for `external` (an agent that drives its execution itself).
 */
export function isWorkerAgent(type) {
  if (!type || type === 'external') return false;
  const listed = picker.agents.find((a) => a.type === type);
  if (listed) return !listed.builtin;
  return picker.loadedAt > 0;
}

/** Whether an agent type may be a worker's: a worker's, or not known yet (the list not loaded). */
export function mayBeWorkerAgent(type) {
  if (!type || type === 'external') return false;
  return picker.loadedAt === 0 || isWorkerAgent(type);
}

/** The agent type the next new session is created with, or null for the server's default. */
export function newSessionAgent() {
  return picker.next || null;
}

function workerLabel(agent) {
  const online = agent.workers_online || 0;
  return online > 0 ? `online (${plural(online, 'worker')})` : 'offline';
}

// The options the select should hold: the default, the listed agents, and the shown value
// when the list does not name it (a worker type no worker announced lately).
function agentOptions(value) {
  const options = [{ value: '', text: 'default agent', title: "The server's default agent", online: null }];
  for (const agent of picker.agents) {
    options.push({
      value: agent.type,
      text: `${agent.type} · ${agent.builtin ? 'built-in' : workerLabel(agent)}`,
      title: agent.description || agent.type,
      online: agent.builtin ? null : String((agent.workers_online || 0) > 0),
    });
  }
  if (value && !picker.agents.some((a) => a.type === value)) {
    options.push({ value, text: `${value} · no worker seen`, title: 'No worker announced this agent type lately', online: 'false' });
  }
  return options;
}

// Updates the options in place (an open dropdown keeps its place) and selects `value`.
function fillAgentSelect(select, value) {
  const options = agentOptions(value);
  options.forEach((want, i) => {
    let option = select.options[i];
    if (!option || option.value !== want.value) {
      option = el('option', { value: want.value });
      select.add(option, i);
    }
    if (option.textContent !== want.text) option.textContent = want.text;
    option.title = want.title;
    if (want.online == null) option.removeAttribute('data-online');
    else option.dataset.online = want.online;
  });
  while (select.options.length > options.length) select.remove(options.length);
  select.value = value;
  return options.find((o) => o.value === value);
}

/** Shows the open session's agent (disabled while the session loads), or the new session's. */
function renderAgentPicker() {
  const select = $('agent-select');
  const isNew = !view.sessionId;
  const session = view.session;
  let value = picker.next;
  if (!isNew) {
    const pending = picker.pending && picker.pending.view === view ? picker.pending : null;
    value = pending ? pending.type : ((session && session.agent && session.agent.type) || '');
  }
  const chosen = fillAgentSelect(select, value);
  select.disabled = !isNew && !session;
  select.dataset.agent = value || 'default';
  const wrap = $('agent-picker');
  if (chosen && chosen.online != null) wrap.dataset.online = chosen.online;
  else delete wrap.dataset.online;
  wrap.title = isNew ? 'The agent of the new session' : "This session's agent: a message runs with it";
}

// Sets the open session's default agent ('' clears it: the server's default).
async function setSessionAgent(type) {
  const current = view;
  if (!current.sessionId || !current.session) return;
  const pending = { view: current, type };
  picker.pending = pending;
  renderAgentPicker();
  try {
    const session = await api('PATCH', `/v1/sessions/${current.sessionId}`, { agent: type ? { type } : null });
    if (!current.closed) current.session = session;
  } catch (err) {
    if (!current.closed) showError(`Could not change the agent: ${err.message}`);
  } finally {
    if (picker.pending === pending) picker.pending = null;
  }
  if (!current.closed) renderHeader();
}

/** Fetches the agent list again (one request at a time) and redraws the picker. */
export function refreshAgents() {
  if (picker.loading) return picker.loading;
  picker.loading = (async () => {
    try {
      const data = await api('GET', '/v1/agents');
      picker.agents = (data && data.items) || [];
      picker.loadedAt = Date.now();
      renderAgentPicker();
    } catch (_) {
      /* the picker keeps the list it has; the next refresh tries again */
    } finally {
      picker.loading = null;
    }
  })();
  return picker.loading;
}

function refreshAgentsOnOpen() {
  if (Date.now() - picker.loadedAt >= AGENTS_OPEN_REFRESH_MS) refreshAgents();
}

/**
 * Wires the agent picker. The list first loads when `ready` settles (after the page's first
 * request, so a server that wants a key asks for it once), then every 15 s while the page shows.
 */
export function initAgentPicker(ready) {
  const select = $('agent-select');
  renderAgentPicker();
  select.addEventListener('change', () => {
    if (!view.sessionId) {
      picker.next = select.value;
      renderAgentPicker();
    } else {
      setSessionAgent(select.value);
    }
  });
  for (const type of ['mousedown', 'focus', 'keydown']) select.addEventListener(type, refreshAgentsOnOpen);
  Promise.resolve(ready).catch(() => {}).then(() => {
    refreshAgents();
    setInterval(() => { if (document.visibilityState !== 'hidden') refreshAgents(); }, AGENTS_REFRESH_MS);
    document.addEventListener('visibilitychange', () => { if (document.visibilityState === 'visible') refreshAgentsOnOpen(); });
  });
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

/** A problem with what is in the composer, shown next to it until it is cleared. */
export function showComposerError(text, kind) {
  const node = $('composer-error');
  node.textContent = text;
  node.dataset.kind = kind || 'error';
  node.hidden = false;
  $('input').setAttribute('aria-invalid', 'true');
}

/** Clears the composer's problem (only one of `kind`, when given). */
export function clearComposerError(kind) {
  const node = $('composer-error');
  if (node.hidden || (kind && node.dataset.kind !== kind)) return;
  node.hidden = true;
  node.textContent = '';
  $('input').removeAttribute('aria-invalid');
}

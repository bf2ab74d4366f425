// The history panel: the user's sessions, paged and searchable by title, with rename,
// archive and delete.

import { api } from './api.js';
import { newSession, openSession } from './chat.js';
import { $, el } from './dom.js';
import { relativeTime, sessionLabel } from './format.js';
import { SESSION_EVENT, renderHeader, view } from './view.js';

// Sessions asked for per page.
const PAGE = 100;

const historyState = { items: [], cursor: null, loading: false, gen: 0, done: false };

/** Whether the history panel is open. */
export function historyOpen() {
  return !$('history').hidden;
}

/** Opens or closes the history panel (toggles when `open` is not given). */
export function toggleHistory(open) {
  const panel = $('history');
  const show = open == null ? panel.hidden : open;
  panel.hidden = !show;
  $('btn-history').setAttribute('aria-expanded', String(show));
  document.body.classList.toggle('history-open', show);
  if (show) {
    reloadHistory();
    $('history-search').focus();
  }
}

function reloadHistory() {
  historyState.gen += 1;
  historyState.items = [];
  historyState.cursor = null;
  historyState.done = false;
  historyState.loading = false;
  $('history-list').replaceChildren();
  loadHistoryPage();
}

async function loadHistoryPage() {
  if (historyState.loading || historyState.done) return;
  historyState.loading = true;
  const gen = historyState.gen;
  const status = $('history-status').value;
  const query = new URLSearchParams({ limit: String(PAGE) });
  if (status) query.set('status', status);
  if (historyState.cursor) query.set('cursor', historyState.cursor);
  $('history-status-text').textContent = 'Loading…';
  try {
    const data = await api('GET', `/v1/sessions?${query}`);
    if (gen !== historyState.gen) return;
    historyState.items.push(...data.items);
    historyState.cursor = data.next_cursor;
    historyState.done = !data.next_cursor;
    const list = $('history-list');
    for (const session of data.items) list.append(historyRow(session));
    applyHistorySearch();
  } catch (err) {
    if (gen === historyState.gen) $('history-status-text').textContent = `Could not load sessions: ${err.message}`;
  } finally {
    if (gen === historyState.gen) {
      historyState.loading = false;
      $('btn-history-more').hidden = historyState.done;
    }
  }
}

function historyRow(session) {
  const li = el('li', { class: 'history-item', 'data-session-id': session.id });
  fillHistoryRow(li, session);
  return li;
}

function fillHistoryRow(li, session) {
  li.dataset.title = sessionLabel(session).toLowerCase();
  li.dataset.status = session.status;
  const open = el('button', { type: 'button', class: 'history-open', onclick: () => { openSession(session.id); if (window.matchMedia('(max-width: 900px)').matches) toggleHistory(false); } },
    el('span', { class: 'history-title' }, sessionLabel(session)),
    // The first question, where the title does not already say it.
    session.first_message && session.first_message !== sessionLabel(session)
      ? el('span', { class: 'history-first', title: session.first_message }, session.first_message)
      : null,
    el('span', { class: 'history-meta' },
      el('span', { class: `badge status-${session.status}` }, session.status),
      // No message count: the session's `message_count` counts the runs' status lines too,
      // which the conversation does not show as messages.
      el('time', { datetime: session.updated_at, title: session.updated_at }, relativeTime(session.updated_at))));
  const actions = el('div', { class: 'history-actions' });
  if (session.status !== 'deleted') {
    actions.append(
      el('button', { type: 'button', class: 'btn btn-small', 'aria-label': `Rename ${sessionLabel(session)}`, onclick: () => renameSession(session, li) }, 'Rename'),
      session.status === 'archived'
        ? el('button', { type: 'button', class: 'btn btn-small', 'aria-label': `Unarchive ${sessionLabel(session)}`, onclick: () => patchSession(session, li, { status: 'active' }) }, 'Unarchive')
        : el('button', { type: 'button', class: 'btn btn-small', 'aria-label': `Archive ${sessionLabel(session)}`, onclick: () => patchSession(session, li, { status: 'archived' }) }, 'Archive'),
      el('button', { type: 'button', class: 'btn btn-small btn-danger', 'aria-label': `Delete ${sessionLabel(session)}`, onclick: () => deleteSession(session, li) }, 'Delete'));
  }
  li.replaceChildren(open, actions);
  li.classList.toggle('current', session.id === view.sessionId);
}

function markCurrentInHistory() {
  for (const li of $('history-list').children) li.classList.toggle('current', li.dataset.sessionId === view.sessionId);
}

function applyHistorySearch() {
  const q = $('history-search').value.trim().toLowerCase();
  let shown = 0;
  for (const li of $('history-list').children) {
    const match = !q || li.dataset.title.includes(q);
    li.hidden = !match;
    if (match) shown += 1;
  }
  const total = historyState.items.length;
  let text = total === 0 && historyState.done ? 'No sessions yet.' : `${shown} of ${total} loaded`;
  if (q && !historyState.done) text += ' · search covers loaded pages';
  $('history-status-text').textContent = historyState.loading && total === 0 ? 'Loading…' : text;
}

function confirmDialog(title, text, okLabel) {
  return new Promise((resolve) => {
    const dialog = $('confirm-dialog');
    $('confirm-title').textContent = title;
    $('confirm-text').textContent = text;
    $('confirm-ok').textContent = okLabel;
    dialog.returnValue = '';
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.showModal();
  });
}

function renameSession(session, li) {
  const dialog = $('rename-dialog');
  const input = $('rename-input');
  input.value = session.title || '';
  dialog.returnValue = '';
  dialog.addEventListener('close', () => {
    if (dialog.returnValue !== 'ok') return;
    const title = input.value.trim();
    if (title && title !== session.title) patchSession(session, li, { title });
  }, { once: true });
  dialog.showModal();
  input.select();
}

async function patchSession(session, li, patch) {
  try {
    const updated = await api('PATCH', `/v1/sessions/${session.id}`, patch);
    Object.assign(session, updated);
    const filter = $('history-status').value;
    if (filter && updated.status !== filter) li.remove();
    else fillHistoryRow(li, updated);
    if (view.sessionId === updated.id) {
      view.session = updated;
      renderHeader();
    }
    applyHistorySearch();
  } catch (err) {
    $('history-status-text').textContent = `Could not update: ${err.message}`;
  }
}

async function deleteSession(session, li) {
  const ok = await confirmDialog('Delete session?', `“${sessionLabel(session)}” will be deleted. It stays listed under the Deleted filter until the retention cleaner removes it.`, 'Delete');
  if (!ok) return;
  try {
    await api('DELETE', `/v1/sessions/${session.id}`);
    li.remove();
    historyState.items = historyState.items.filter((s) => s.id !== session.id);
    if (view.sessionId === session.id) newSession();
    applyHistorySearch();
  } catch (err) {
    $('history-status-text').textContent = `Could not delete: ${err.message}`;
  }
}

/** Wires the panel's controls, its infinite scroll, and its marking of the session on screen. */
export function initHistory() {
  $('btn-history').addEventListener('click', () => toggleHistory());
  $('btn-history-close').addEventListener('click', () => toggleHistory(false));
  $('btn-history-more').addEventListener('click', loadHistoryPage);
  $('history-search').addEventListener('input', applyHistorySearch);
  $('history-status').addEventListener('change', reloadHistory);
  // Infinite scroll: the footer coming into view loads the next page.
  if ('IntersectionObserver' in window) {
    new IntersectionObserver((entries) => {
      if (entries.some((en) => en.isIntersecting) && historyOpen()) loadHistoryPage();
    }, { root: $('history'), rootMargin: '200px' }).observe($('history-footer'));
  }
  document.addEventListener(SESSION_EVENT, (e) => {
    markCurrentInHistory();
    // A session just created belongs at the top of an open list.
    if (e.detail.created && historyOpen()) reloadHistory();
  });
}

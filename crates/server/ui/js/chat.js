// The conversation: messages as they arrive (from the API and the live events, in order),
// sending (with the page's context), and opening or leaving a session.

import { api, listAll } from './api.js';
import { pageContext, setSessionInUrl } from './context.js';
import { $, el } from './dom.js';
import { clockTime, sleep, titleFrom } from './format.js';
import { closeInspector } from './inspector.js';
import { renderMarkdown } from './markdown.js';
import { messageFromEvent } from './metadata.js';
import {
  addStepLine, applyEvent, execState, nestUnderParent, newExecState, refreshExec, refreshRunState,
  retireQuestion, setExecutionData, showFailure,
} from './steps.js';
import { runStream, setConnectionNotice } from './stream.js';
import {
  SESSION_EVENT, SessionView, appendToStream, clearComposerError, newSessionAgent, renderChips, renderHeader,
  scrollToBottom, setView, showComposerError, showError, streamEl, updateEmpty, view,
} from './view.js';

function messageNode(msg, pending) {
  const role = msg.role;
  const body = el('div', { class: 'bubble-body' });
  if (role === 'assistant') {
    body.classList.add('markdown');
    body.innerHTML = renderMarkdown(msg.content);
  } else {
    body.textContent = msg.content;
  }
  const meta = el('div', { class: 'bubble-meta' });
  const node = el('article', {
    class: `msg msg-${role}${pending ? ' msg-pending' : ''}`,
    'data-role': role,
    'data-message-id': msg.id || '',
    'aria-label': role === 'user' ? 'Your message' : 'Assistant message',
  }, body, meta);
  if (role === 'user') {
    // A user message shows its context chip only when it differs from the one before it.
    node.dataset.prevContext = view.lastUserContext;
    view.lastUserContext = contextKey(msg);
  }
  fillMessageMeta(node, msg, pending);
  return node;
}

function fillMessageMeta(node, msg, pending) {
  const meta = node.querySelector('.bubble-meta');
  meta.replaceChildren();
  if (msg.role === 'user' && (msg.related_type || msg.related_id || msg.context_url) && contextKey(msg) !== node.dataset.prevContext) {
    const chips = el('span', { class: 'chips inline-chips' });
    renderChips(chips, msg, true);
    meta.append(chips);
  }
  meta.append(el('time', { datetime: msg.created_at || '', title: msg.created_at || '' }, pending ? 'sending…' : clockTime(msg.created_at)));
}

function contextKey(source) {
  return [source.related_type || '', source.related_id || '', source.context_url || ''].join('\u0001');
}

function addMessage(msg) {
  if (view.closed || msg.session_id !== view.sessionId || view.messages.has(msg.id)) return;
  view.lastMessageId = msg.id;
  if (msg.role === 'user') {
    view.userCount += 1;
    const idx = view.optimistic.findIndex((o) => o.content === msg.content);
    if (idx >= 0) {
      const pending = view.optimistic.splice(idx, 1)[0];
      bindOptimistic(pending, msg);
      return;
    }
    view.messages.set(msg.id, msg);
    appendToStream(messageNode(msg, false));
    return;
  }
  view.messages.set(msg.id, msg);
  if (msg.role === 'assistant') {
    const exec = msg.execution_id ? execState(msg.execution_id) : null;
    const node = messageNode(msg, false);
    if (exec) {
      node.dataset.executionId = exec.id;
      if (exec.question && !exec.question.answered && exec.question.text === msg.content) {
        // The paused execution's question is already on screen as the question card.
        exec.question.messageId = msg.id;
        return;
      }
      exec.answered = true;
      if (exec.streamNode) {
        exec.streamNode.replaceWith(node);
        exec.streamNode = null;
        scrollToBottom(false);
      } else {
        appendToStream(node);
      }
    } else {
      appendToStream(node);
    }
    return;
  }
  // info and notification lines
  if (msg.execution_id) {
    addStepLine(execState(msg.execution_id), msg);
  } else {
    appendToStream(el('div', { class: `line line-${msg.role}`, 'data-message-id': msg.id }, msg.content));
  }
}

function bindOptimistic(pending, msg) {
  view.messages.set(msg.id, msg);
  pending.node.classList.remove('msg-pending');
  pending.node.dataset.messageId = msg.id;
  fillMessageMeta(pending.node, msg, false);
}

// Fetches the messages after the last one shown. Retries a little: a failed fetch usually
// means the connection dropped, and the stream's reconnect will bring the events back.
async function syncMessages(current) {
  for (let attempt = 0; attempt < 4 && !current.closed; attempt += 1) {
    try {
      const after = current.lastMessageId ? `?after=${encodeURIComponent(current.lastMessageId)}` : '';
      const items = await listAll(`/v1/sessions/${current.sessionId}/messages${after}`);
      if (!current.closed) items.forEach(addMessage);
      return;
    } catch (err) {
      if (attempt === 3 && !current.closed) showError(`Could not load messages: ${err.message}`);
      await sleep(300 * 2 ** attempt);
    }
  }
}

// Events are applied strictly in order: one that names a message not loaded yet waits for
// that message, so lines, questions and answers land in the order they happened.
function handleEvent(current, ev) {
  if (current.closed) return;
  let data;
  try {
    data = JSON.parse(ev.data);
  } catch (_) {
    return;
  }
  // A late event of another session (say the previous one, still streaming) is dropped.
  if (!data || data.session_id !== current.sessionId) return;
  if (ev.id != null && ev.id !== '') {
    const n = Number(ev.id);
    if (Number.isFinite(n)) {
      if (n <= current.lastEventId) return;
      current.lastEventId = n;
    }
  }
  current.queue.push({ type: data.event_type || ev.event, data });
  drainEvents(current);
}

async function drainEvents(current) {
  if (current.draining) return;
  current.draining = true;
  try {
    while (current.queue.length && !current.closed) {
      const item = current.queue.shift();
      if (item.type === 'message.created' && (!item.data.message_id || !current.messages.has(item.data.message_id))) {
        const role = item.data.metadata && item.data.metadata.role;
        if (item.data.message_id && (role === 'info' || role === 'notification')) {
          // A status line is whole in its event; answers and user messages (with their
          // context fields) come from the API.
          addMessage(messageFromEvent(item.data));
        } else {
          await syncMessages(current);
        }
      }
      if (!current.closed) applyEvent(item.type, item.data);
    }
  } finally {
    current.draining = false;
  }
}

/**
 * Sends a user message (creating the session first when none is open) and shows it at once.
 * `onBusy` ('interrupt' for "Stop and send") says what the server does with a run still going.
 */
export async function sendMessage(text, { onBusy } = {}) {
  const content = text.trim();
  if (!content) return;
  const current = view;
  clearComposerError();
  const ctx = {};
  for (const [k, v] of Object.entries(pageContext)) if (v) ctx[k] = v;
  const pendingMsg = { role: 'user', content, ...ctx, created_at: null };
  const node = messageNode(pendingMsg, true);
  const pending = { content, node };
  current.optimistic.push(pending);
  appendToStream(node);
  scrollToBottom(true);
  const isNew = !current.sessionId;
  try {
    if (isNew) {
      // Create the session and subscribe to it before sending, so not even the first
      // streamed tokens of the answer are missed (deltas are live only).
      const fields = { title: titleFrom(content) };
      if (ctx.related_type) fields.related_type = ctx.related_type;
      if (ctx.related_id) fields.related_id = ctx.related_id;
      if (ctx.context_url) fields.initial_context_url = ctx.context_url;
      // The agent picked in the top bar becomes the session's agent (none: the server's default).
      const agent = newSessionAgent();
      if (agent) fields.agent = { type: agent };
      const session = await api('POST', '/v1/sessions', fields);
      if (current.closed) return;
      current.sessionId = session.id;
      current.session = session;
      setSessionInUrl(current.sessionId);
      renderHeader();
      const connected = new Promise((resolve) => { current.onConnected = resolve; });
      runStream(current, (ev) => handleEvent(current, ev));
      await Promise.race([connected, sleep(3000)]);
      if (current.closed) return;
      announceSession(true);
    }
    const body = { content, ...ctx };
    if (onBusy && !isNew) body.on_busy = onBusy;
    const answer = await api('POST', `/v1/sessions/${current.sessionId}/messages`, body);
    if (current.closed) return;
    const at = current.optimistic.indexOf(pending);
    if (at >= 0) {
      current.optimistic.splice(at, 1);
      if (current.messages.has(answer.message.id)) {
        node.remove();
      } else {
        current.userCount += 1;
        current.lastMessageId = current.lastMessageId || answer.message.id;
        bindOptimistic(pending, answer.message);
      }
    }
    if (answer.execution) {
      const exec = execState(answer.execution.id);
      setExecutionData(exec, answer.execution);
      if (exec.status === 'pending' || exec.status === 'running') retireQuestion(exec);
    }
    if (isNew) loadSessionMeta(current);
  } catch (err) {
    if (current.closed) return;
    const at = current.optimistic.indexOf(pending);
    if (at >= 0) current.optimistic.splice(at, 1);
    // Not sent: the message goes back into the composer, with the server's reason beside it.
    node.remove();
    updateEmpty();
    if (isNew && current.sessionId) {
      // The session made for this message holds nothing: it goes, and the page is a new
      // session again (an empty "Untitled" one would stay in the history otherwise).
      const made = current.sessionId;
      newSession();
      try {
        await api('DELETE', `/v1/sessions/${made}`);
      } catch (_) { /* it stays, empty */ }
      announceSession(true);
    }
    const input = $('input');
    if (!input.value) {
      input.value = content;
      input.dispatchEvent(new Event('input'));
    }
    showComposerError(`Not sent: ${err.message}`, 'send');
  }
}

async function loadSessionMeta(current) {
  try {
    const session = await api('GET', `/v1/sessions/${current.sessionId}`);
    if (current.closed) return;
    current.session = session;
    renderHeader();
  } catch (_) { /* the header keeps its placeholder */ }
}

// Tells the history panel which session is on screen now (and whether it was just created).
function announceSession(created) {
  document.dispatchEvent(new CustomEvent(SESSION_EVENT, { detail: { sessionId: view.sessionId, created } }));
}

function resetStream() {
  streamEl.replaceChildren();
  updateEmpty();
  setConnectionNotice(null);
  $('banner-demo').hidden = true;
  refreshRunState();
}

/** Leaves the open session for an empty new one (created with the first message). */
export function newSession() {
  closeInspector();
  view.close();
  setView(new SessionView(null));
  setSessionInUrl(null);
  resetStream();
  renderHeader();
  announceSession(false);
  $('input').focus();
}

/** Shows a stored session: its history, then its live events. */
export async function openSession(sessionId) {
  closeInspector();
  view.close();
  const current = new SessionView(sessionId);
  setView(current);
  setSessionInUrl(sessionId);
  resetStream();
  renderHeader();
  announceSession(false);
  streamEl.setAttribute('aria-busy', 'true');
  try {
    const [session, execs, messages] = await Promise.all([
      api('GET', `/v1/sessions/${sessionId}`),
      listAll(`/v1/sessions/${sessionId}/executions`),
      listAll(`/v1/sessions/${sessionId}/messages`),
    ]);
    if (current.closed) return;
    current.session = session;
    renderHeader();
    // Parents first, so subagent groups can nest under them.
    execs.sort((a, b) => (a.parent_execution_id ? 1 : 0) - (b.parent_execution_id ? 1 : 0));
    for (const data of execs) {
      const exec = current.execs.get(data.id) || newExecState(data.id);
      current.execs.set(data.id, exec);
      exec.data = data;
      exec.status = data.status;
    }
    messages.forEach(addMessage);
    for (const exec of current.execs.values()) {
      nestUnderParent(exec);
      refreshExec(exec);
      if (exec.status === 'failed' && exec.data.error_message && !exec.data.parent_execution_id) showFailure(exec, exec.data.error_message);
    }
    refreshRunState();
    scrollToBottom(true);
    runStream(current, (ev) => handleEvent(current, ev));
  } catch (err) {
    if (current.closed) return;
    if (err.status === 404) {
      setSessionInUrl(null);
      showError('That session does not exist (or is not yours).');
      current.sessionId = null;
    } else {
      showError(`Could not open the session: ${err.message}`);
    }
  } finally {
    streamEl.removeAttribute('aria-busy');
  }
}

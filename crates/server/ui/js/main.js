// Stepwise web UI: plain JavaScript modules, no dependencies, no build step; the server embeds
// and serves each file. It speaks only the HTTP/SSE contract of docs/api.md. This module wires
// the page together and starts it.

import { api, contentProblem, loadLimits } from './api.js';
import { newSession, openSession, sendMessage } from './chat.js';
import { params, pageContext } from './context.js';
import { $ } from './dom.js';
import { historyOpen, initHistory, toggleHistory } from './history.js';
import { closeInspector, initInspector } from './inspector.js';
import { escapeHtml, renderMarkdown } from './markdown.js';
import { ANSWER_EVENT, cancelRun } from './steps.js';
import {
  clearComposerError, initAgentPicker, renderChips, renderHeader, showComposerError, streamEl, updateEmpty, view,
} from './view.js';

function autosize(textarea) {
  textarea.style.height = 'auto';
  textarea.style.height = `${Math.min(textarea.scrollHeight, 240)}px`;
}

function init() {
  const input = $('input');
  // Sends the composer's text; `onBusy: 'interrupt'` stops a running run first ("Stop and send").
  const submit = (options = {}) => {
    const text = input.value;
    if (!text.trim()) return;
    // Refused here, with the server's limit: it would be refused there, after the page had
    // shown it as sent (and made a session for it).
    const problem = contentProblem(text.trim());
    if (problem) {
      showComposerError(problem, 'length');
      input.focus();
      return;
    }
    input.value = '';
    autosize(input);
    sendMessage(text, options);
  };
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    submit();
  });
  $('btn-stop-send').addEventListener('click', () => submit({ onBusy: 'interrupt' }));
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey) && !e.isComposing) {
      e.preventDefault();
      if (!$('btn-stop-send').hidden) submit({ onBusy: 'interrupt' });
      else $('composer').requestSubmit();
      return;
    }
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  input.addEventListener('input', () => {
    autosize(input);
    // Says so as soon as the text is over the limit, and stops saying so once it fits.
    const problem = contentProblem(input.value.trim());
    if (problem) showComposerError(problem, 'length');
    else clearComposerError('length');
  });
  // An answer typed into a question card goes out as the next user message.
  streamEl.addEventListener(ANSWER_EVENT, (e) => sendMessage(e.detail));
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape' || e.defaultPrevented || document.querySelector('dialog[open]')) return;
    if (!$('inspector').hidden) closeInspector();
    else if (historyOpen() && window.matchMedia('(max-width: 900px)').matches) toggleHistory(false);
    else cancelRun();
  });
  $('btn-cancel').addEventListener('click', cancelRun);
  $('btn-new').addEventListener('click', newSession);
  initHistory();
  initInspector();
  renderChips($('context-chips'), pageContext, true);
  updateEmpty();
  renderHeader();
  const sessionId = params.get('session');
  let first;
  if (sessionId) {
    first = openSession(sessionId);
  } else {
    input.focus();
    // Asks for an API key up front when the server wants one (the 401 path prompts).
    first = api('GET', '/v1/sessions?limit=1').catch(() => {});
  }
  initAgentPicker(first);
  Promise.resolve(first).catch(() => {}).then(loadLimits);
}

// For the browser tests: the Markdown renderer, and a way to cut the live connection as a
// network failure would.
window.stepwiseUi = {
  renderMarkdown,
  escapeHtml,
  dropConnection: () => { if (view.conn) view.conn.abort(); },
};
init();

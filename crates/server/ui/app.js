// Stepwise web UI: plain JavaScript, no dependencies, no build step.
// It speaks only the HTTP/SSE contract of docs/api.md.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);
  const KEY_STORAGE = 'stepwise.apiKey';
  const PAGE = 100;
  const ACTIVE_STATUSES = new Set(['pending', 'running']);
  const FINISHED_STATUSES = new Set(['completed', 'failed', 'cancelled']);
  const EXEC_STATUS_BY_EVENT = {
    'execution.queued': 'pending',
    'execution.started': 'running',
    'execution.paused': 'paused',
    'execution.completed': 'completed',
    'execution.failed': 'failed',
    'execution.cancelled': 'cancelled',
  };

  // ---------------------------------------------------------------- text helpers

  const HTML_ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]);
  }
  function unescapeHtml(text) {
    return String(text)
      .replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"')
      .replace(/&#39;/g, "'").replace(/&amp;/g, '&');
  }

  // Only these link targets survive; anything else (javascript:, data:, ...) stays plain text.
  function safeUrl(url) {
    const trimmed = String(url).trim();
    if (/[\u0000-\u001f\s]/.test(trimmed)) return null;
    if (/^(https?:|mailto:)/i.test(trimmed)) return trimmed;
    if (/^(\/(?!\/)|#|\?)/.test(trimmed)) return trimmed;
    return null;
  }

  // Inline Markdown on one block of text. The source is escaped first; only our own fixed tags
  // are added afterwards, so model output can never inject markup.
  function renderInline(text) {
    const tokens = [];
    const hold = (html) => `\u0000${tokens.push(html) - 1}\u0000`;
    let s = String(text).replace(/\u0000/g, '');
    s = s.replace(/(`+)([\s\S]*?[^`])\1(?!`)/g, (_, _ticks, code) => hold(`<code>${escapeHtml(code.trim())}</code>`));
    s = escapeHtml(s);
    s = s.replace(/\[([^\]\u0000]+)\]\(([^)\s\u0000]+)\)/g, (all, label, url) => {
      const href = safeUrl(unescapeHtml(url));
      if (!href) return all;
      return hold(`<a href="${escapeHtml(href)}" target="_blank" rel="noopener noreferrer nofollow">${label}</a>`);
    });
    s = s.replace(/\bhttps?:\/\/[^\s<\u0000]+[^\s<.,;:!?)\u0000'"]/g, (url) => {
      const href = safeUrl(unescapeHtml(url));
      if (!href) return url;
      return hold(`<a href="${escapeHtml(href)}" target="_blank" rel="noopener noreferrer nofollow">${url}</a>`);
    });
    s = s.replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>');
    s = s.replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>');
    s = s.replace(/(^|[^*\w])\*(?=\S)([^*]*?\S)\*(?!\*)/g, '$1<em>$2</em>');
    s = s.replace(/(^|[^_\w])_(?=\S)([^_]*?\S)_(?![_\w])/g, '$1<em>$2</em>');
    s = s.replace(/~~(?=\S)([\s\S]*?\S)~~/g, '<del>$1</del>');
    s = s.replace(/\u0000(\d+)\u0000/g, (_, n) => tokens[Number(n)]);
    return s;
  }

  const BLOCK_START = /^\s*(```|~~~|#{1,6}\s|>|[-*+]\s+|\d{1,9}[.)]\s+)/;

  // A small, safe Markdown subset: paragraphs, headings, fenced code, lists, quotes, rules,
  // emphasis, inline code, links. Returns HTML built only from escaped text.
  function renderMarkdown(source) {
    const lines = String(source == null ? '' : source).replace(/\r\n?/g, '\n').split('\n');
    let html = '';
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m = line.match(/^\s*(`{3,}|~{3,})\s*([\w+#.-]*)\s*$/);
      if (m) {
        const fence = m[1];
        const body = [];
        i += 1;
        while (i < lines.length && !lines[i].trim().startsWith(fence)) {
          body.push(lines[i]);
          i += 1;
        }
        i += 1;
        const lang = m[2] ? ` data-lang="${escapeHtml(m[2])}"` : '';
        html += `<pre><code${lang}>${escapeHtml(body.join('\n'))}</code></pre>`;
        continue;
      }
      if (/^\s*$/.test(line)) {
        i += 1;
        continue;
      }
      m = line.match(/^\s*(#{1,6})\s+(.*?)\s*#*\s*$/);
      if (m) {
        const level = Math.min(6, m[1].length + 2);
        html += `<h${level}>${renderInline(m[2])}</h${level}>`;
        i += 1;
        continue;
      }
      if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
        html += '<hr>';
        i += 1;
        continue;
      }
      if (/^\s*>/.test(line)) {
        const quoted = [];
        while (i < lines.length && /^\s*>/.test(lines[i])) {
          quoted.push(lines[i].replace(/^\s*>\s?/, ''));
          i += 1;
        }
        html += `<blockquote>${renderMarkdown(quoted.join('\n'))}</blockquote>`;
        continue;
      }
      m = line.match(/^\s*([-*+]|\d{1,9}[.)])\s+/);
      if (m) {
        const ordered = /\d/.test(m[1]);
        const itemPattern = ordered ? /^\s*\d{1,9}[.)]\s+(.*)$/ : /^\s*[-*+]\s+(.*)$/;
        const items = [];
        while (i < lines.length) {
          const im = lines[i].match(itemPattern);
          if (im) {
            items.push(im[1]);
          } else if (items.length && /^\s{2,}\S/.test(lines[i])) {
            items[items.length - 1] += '\n' + lines[i].trim();
          } else {
            break;
          }
          i += 1;
        }
        const start = ordered ? parseInt(m[1], 10) : 1;
        const tag = ordered ? 'ol' : 'ul';
        const startAttr = ordered && start !== 1 ? ` start="${start}"` : '';
        html += `<${tag}${startAttr}>${items.map((it) => `<li>${renderInline(it).replace(/\n/g, '<br>')}</li>`).join('')}</${tag}>`;
        continue;
      }
      const para = [line];
      i += 1;
      while (i < lines.length && !/^\s*$/.test(lines[i]) && !BLOCK_START.test(lines[i])) {
        para.push(lines[i]);
        i += 1;
      }
      html += `<p>${para.map((p) => renderInline(p)).join('<br>')}</p>`;
    }
    return html;
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    if (attrs) {
      for (const [key, value] of Object.entries(attrs)) {
        if (value == null || value === false) continue;
        if (key === 'class') node.className = value;
        else if (key === 'text') node.textContent = value;
        else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
        else node.setAttribute(key, value === true ? '' : value);
      }
    }
    for (const child of children) {
      if (child == null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function parseTime(text) {
    const t = Date.parse(text);
    return Number.isNaN(t) ? null : t;
  }
  // One formatter for all lines: toLocaleTimeString builds a new one per call, slow over
  // thousands of step lines.
  const clockFormat = new Intl.DateTimeFormat([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  function clockTime(text) {
    const t = parseTime(text);
    return t == null ? '' : clockFormat.format(t);
  }
  function relativeTime(text) {
    const t = parseTime(text);
    if (t == null) return '';
    const seconds = Math.round((Date.now() - t) / 1000);
    if (seconds < 45) return 'just now';
    const minutes = Math.round(seconds / 60);
    if (minutes < 60) return `${minutes} min ago`;
    const hours = Math.round(minutes / 60);
    if (hours < 24) return `${hours} h ago`;
    const days = Math.round(hours / 24);
    if (days < 30) return `${days} d ago`;
    return new Date(t).toLocaleDateString();
  }
  function duration(fromText, toText) {
    const a = parseTime(fromText);
    const b = parseTime(toText);
    if (a == null || b == null) return '';
    const ms = Math.max(0, b - a);
    if (ms < 1000) return `${ms} ms`;
    if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
    return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
  }
  function shortId(id) {
    return id ? String(id).slice(-8) : '';
  }
  function plural(n, word) {
    return `${n} ${word}${n === 1 ? '' : 's'}`;
  }
  function sessionLabel(session) {
    return (session && (session.title || session.name)) || 'Untitled session';
  }
  function titleFrom(text) {
    const first = text.trim().split('\n')[0].trim();
    return first.length > 80 ? `${first.slice(0, 79)}…` : first;
  }
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  // ---------------------------------------------------------------- page context

  const params = new URLSearchParams(location.search);
  const pageContext = {
    related_type: params.get('related_type') || null,
    related_id: params.get('related_id') || null,
    context_url: canonicalUrl(params.get('context_url')),
  };

  // The server stores context URLs in their canonical (WHATWG) form; compare like with like.
  function canonicalUrl(text) {
    if (!text) return null;
    try {
      return new URL(text).href;
    } catch {
      return text;
    }
  }

  function setSessionInUrl(sessionId) {
    const url = new URL(location.href);
    if (sessionId) url.searchParams.set('session', sessionId);
    else url.searchParams.delete('session');
    history.replaceState(null, '', url);
  }

  // ---------------------------------------------------------------- API and auth

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  function apiKey() {
    try {
      return sessionStorage.getItem(KEY_STORAGE) || '';
    } catch (_) {
      return '';
    }
  }

  function authHeaders() {
    const key = apiKey();
    return key ? { Authorization: `Bearer ${key}` } : {};
  }

  let keyPrompt = null;
  // One prompt at a time; every request that got a 401 waits for the same answer.
  function promptForKey(message) {
    if (keyPrompt) return keyPrompt;
    keyPrompt = new Promise((resolve) => {
      const dialog = $('auth-dialog');
      const input = $('auth-key');
      $('auth-error').textContent = message || '';
      input.value = '';
      const onClose = () => {
        const key = input.value.trim();
        if (!key) {
          // The dialog cannot be dismissed without a key: nothing works without one.
          $('auth-error').textContent = 'An API key is needed to continue.';
          dialog.showModal();
          return;
        }
        dialog.removeEventListener('close', onClose);
        try {
          sessionStorage.setItem(KEY_STORAGE, key);
        } catch (_) { /* storage disabled: the key lives until reload */ }
        keyPrompt = null;
        resolve(key);
      };
      dialog.addEventListener('close', onClose);
      if (!dialog.open) dialog.showModal();
      input.focus();
    });
    return keyPrompt;
  }

  async function api(method, path, body) {
    for (;;) {
      const headers = { Accept: 'application/json', ...authHeaders() };
      const init = { method, headers, cache: 'no-store' };
      if (body !== undefined) {
        headers['Content-Type'] = 'application/json';
        init.body = JSON.stringify(body);
      }
      let res;
      try {
        res = await fetch(path, init);
      } catch (err) {
        throw new ApiError(0, 'network', 'The server cannot be reached.');
      }
      if (res.status === 401) {
        const hadKey = Boolean(apiKey());
        try { sessionStorage.removeItem(KEY_STORAGE); } catch (_) { /* ignore */ }
        await promptForKey(hadKey ? 'That key was not accepted. Enter another one.' : '');
        continue;
      }
      if (res.status === 204) return null;
      const text = await res.text();
      let data = null;
      if (text) {
        try {
          data = JSON.parse(text);
        } catch (_) {
          data = null;
        }
      }
      if (!res.ok) {
        const error = (data && data.error) || {};
        throw new ApiError(res.status, error.code || 'http_error', error.message || `The server answered ${res.status}.`);
      }
      return data;
    }
  }

  async function listAll(path) {
    const items = [];
    let cursor = null;
    for (let page = 0; page < 1000; page += 1) {
      const sep = path.includes('?') ? '&' : '?';
      const data = await api('GET', `${path}${sep}limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      items.push(...(data.items || []));
      cursor = data.next_cursor;
      if (!cursor) break;
    }
    return items;
  }

  // ---------------------------------------------------------------- SSE over fetch

  // Reads a text/event-stream body and calls onEvent({id, event, data}) per event. `id` is
  // the event's own id line, or null when it had none (live-only deltas).
  async function readEventStream(body, onEvent, onActivity) {
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

  // ---------------------------------------------------------------- the session view

  // One SessionView per opened session. Switching closes the old one: its stream is aborted and
  // every late callback sees `closed` and drops what it carries.
  class SessionView {
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

  let view = new SessionView(null);
  const streamEl = $('stream');

  // Follows new content while the reader is at the bottom; leaves them alone when they scrolled
  // up. Batched per frame: measuring after every appended line would force a layout each time.
  let stickToBottom = true;
  let scrollQueued = false;
  let scrollForced = false;
  $('chat').addEventListener('scroll', () => {
    const chat = $('chat');
    stickToBottom = chat.scrollHeight - chat.scrollTop - chat.clientHeight < 160;
  }, { passive: true });

  function scrollToBottom(force) {
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

  function updateEmpty() {
    $('empty').hidden = streamEl.children.length > 0;
  }

  function appendToStream(node) {
    streamEl.append(node);
    updateEmpty();
    scrollToBottom(false);
  }

  function renderChips(container, source, withUrl) {
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

  function renderHeader() {
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

  // ---- messages

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

  // ---- executions

  function newExecState(id) {
    return {
      id,
      data: null,
      status: null,
      group: null,
      groupUserCount: -1,
      stepNumbers: new Set(),
      activity: '',
      streamNode: null,
      question: null,
      answered: false,
      failureShown: false,
      cancelShown: false,
      loading: false,
    };
  }

  // A status line of a run goes right after its group, so a replayed history keeps its order.
  function placeAfterGroup(exec, node) {
    if (exec.group && exec.group.isConnected && exec.group.parentElement === streamEl) {
      let anchor = exec.group;
      while (anchor.nextElementSibling && anchor.nextElementSibling.dataset.statusOf === exec.id) anchor = anchor.nextElementSibling;
      node.dataset.statusOf = exec.id;
      anchor.after(node);
      updateEmpty();
      scrollToBottom(false);
    } else {
      appendToStream(node);
    }
  }

  function execState(id) {
    let exec = view.execs.get(id);
    if (!exec) {
      exec = newExecState(id);
      view.execs.set(id, exec);
      loadExecution(exec);
    }
    return exec;
  }

  async function loadExecution(exec, refresh) {
    if (exec.loading || (exec.data && !refresh) || !view.sessionId) return;
    const current = view;
    exec.loading = true;
    try {
      const data = await api('GET', `/v1/executions/${exec.id}`);
      if (current.closed) return;
      setExecutionData(exec, data);
    } catch (_) {
      /* the events still drive the status */
    } finally {
      exec.loading = false;
    }
  }

  function setExecutionData(exec, data) {
    exec.data = data;
    if (!exec.status || FINISHED_STATUSES.has(data.status) || exec.status === data.status) {
      exec.status = data.status;
    }
    if (data.status === 'failed' && data.error_message) showFailure(exec, data.error_message);
    nestUnderParent(exec);
    refreshExec(exec);
    refreshRunState();
  }

  function rootExec(exec) {
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

  function nestUnderParent(exec) {
    const parentId = exec.data && exec.data.parent_execution_id;
    if (!parentId || !exec.group) return;
    const parent = execState(parentId);
    const parentGroup = ensureGroup(parent, false);
    const children = parentGroup.querySelector('.exec-children');
    if (exec.group.parentElement !== children) children.append(exec.group);
    exec.group.classList.add('exec-sub');
    refreshExec(parent);
  }

  function ensureGroup(exec, newSegmentOnUserMessage) {
    if (exec.group && !(newSegmentOnUserMessage && exec.groupUserCount < view.userCount)) return exec.group;
    if (exec.group) exec.group.classList.add('exec-earlier');
    const summary = el('summary', { class: 'exec-summary' },
      el('span', { class: 'exec-chevron', 'aria-hidden': 'true' }),
      el('span', { class: 'exec-count' }),
      el('span', { class: 'exec-status' }),
      el('span', { class: 'exec-activity' }));
    const details = el('details', { class: 'exec-details' }, summary,
      el('ol', { class: 'exec-lines', 'aria-label': 'Execution steps' }),
      el('div', { class: 'exec-children' }));
    const group = el('section', { class: 'exec', 'data-execution-id': exec.id, 'aria-label': 'Agent steps' }, details,
      el('div', { class: 'exec-tools' },
        el('span', { class: 'badge badge-agent', hidden: true }),
        el('button', { type: 'button', class: 'btn btn-link btn-small exec-inspect', onclick: () => openInspector(exec.id) }, 'Inspect')));
    exec.group = group;
    exec.groupUserCount = view.userCount;
    exec.lineCount = 0;
    // A run resumed after a question gets a new group below the answer; counts are per group.
    exec.segmentSteps = new Set();
    exec.segments = (exec.segments || 0) + 1;
    const parentId = exec.data && exec.data.parent_execution_id;
    if (parentId && view.execs.has(parentId)) {
      nestUnderParent(exec);
    } else if (exec.streamNode) {
      exec.streamNode.before(group);
    } else {
      appendToStream(group);
    }
    refreshExec(exec);
    return group;
  }

  function addStepLine(exec, msg) {
    const group = ensureGroup(exec, true);
    const numbered = /^(?:subagent )?step (\d+):/i.exec(msg.content);
    const stepNumber = msg.metadata && Number.isInteger(msg.metadata.step_number)
      ? msg.metadata.step_number
      : (numbered ? Number(numbered[1]) : null);
    if (stepNumber != null) addStepNumber(exec, stepNumber);
    const line = el('li', { class: `step-line line-${msg.role}`, 'data-message-id': msg.id },
      el('span', { class: 'step-text' }, msg.content),
      el('time', { datetime: msg.created_at || '', class: 'step-time' }, clockTime(msg.created_at)));
    group.querySelector('.exec-lines').append(line);
    exec.lineCount = (exec.lineCount || 0) + 1;
    refreshExec(exec);
    scrollToBottom(false);
  }

  function addStepNumber(exec, n) {
    exec.stepNumbers.add(n);
    if (exec.segmentSteps) exec.segmentSteps.add(n);
  }

  function statusText(status) {
    switch (status) {
      case 'pending': return 'queued';
      case 'running': return 'running';
      case 'paused': return 'waiting for you';
      case 'completed': return 'done';
      case 'failed': return 'failed';
      case 'cancelled': return 'cancelled';
      default: return '';
    }
  }

  function refreshExec(exec) {
    if (!exec.group) return;
    const own = exec.segmentSteps ? exec.segmentSteps.size : 0;
    const stepCount = exec.segments > 1 ? own : Math.max(own, exec.data && exec.data.status === exec.status ? exec.data.step_count || 0 : 0);
    const lines = exec.lineCount || 0;
    const label = stepCount > 0 ? plural(stepCount, 'step') : plural(lines, 'update');
    const group = exec.group;
    const status = exec.status || '';
    const activity = ACTIVE_STATUSES.has(status) ? exec.activity : '';
    const agent = exec.data && exec.data.agent_type;
    // Replays apply thousands of events: skip the DOM when nothing it shows changed.
    const shown = `${label}\u0001${status}\u0001${activity}\u0001${agent}`;
    if (exec.shownKey === shown && exec.shownGroup === group) return;
    exec.shownKey = shown;
    exec.shownGroup = group;
    group.querySelector('.exec-count').textContent = label;
    const statusEl = group.querySelector('.exec-status');
    statusEl.textContent = statusText(status);
    statusEl.className = `exec-status status-${status}`;
    group.dataset.status = status;
    group.querySelector('.exec-activity').textContent = activity;
    const badge = group.querySelector('.badge-agent');
    if (agent) {
      badge.hidden = false;
      badge.textContent = agent === 'demo' ? 'demo agent' : agent;
      badge.title = agent === 'demo' ? 'The built-in offline demo agent answered: no LLM is configured.' : `Agent: ${agent}`;
      badge.classList.toggle('badge-demo', agent === 'demo');
    }
    $('banner-demo').hidden = ![...view.execs.values()].some((e) => e.data && e.data.agent_type === 'demo');
  }

  function showFailure(exec, text) {
    if (exec.failureShown) return;
    exec.failureShown = true;
    const node = el('div', { class: 'line line-error', role: 'alert', 'data-execution-id': exec.id }, `Failed: ${text}`);
    if (exec.streamNode) {
      exec.streamNode.remove();
      exec.streamNode = null;
    }
    placeAfterGroup(exec, node);
  }

  function showQuestion(exec, text) {
    if (exec.question && exec.question.node.isConnected && !exec.question.answered) {
      exec.question.node.querySelector('.question-text').textContent = text;
      return;
    }
    const input = el('textarea', { class: 'input question-input', rows: '1', 'aria-label': 'Your answer', placeholder: 'Type your answer…' });
    const form = el('form', { class: 'question-form' }, input,
      el('button', { type: 'submit', class: 'btn btn-primary' }, 'Answer'));
    const node = el('section', { class: 'question', role: 'group', 'aria-label': 'The agent asks', 'data-execution-id': exec.id },
      el('div', { class: 'question-label' }, 'The agent asks'),
      el('div', { class: 'question-text' }, text),
      form);
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const answer = input.value.trim();
      if (!answer) return;
      input.value = '';
      sendMessage(answer);
    });
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        form.requestSubmit();
      }
    });
    // The engine posts the question as an assistant message too: the card takes its place.
    const bubble = [...streamEl.querySelectorAll(`.msg-assistant[data-execution-id="${exec.id}"]:not(.streaming)`)]
      .find((b) => b.querySelector('.bubble-body').textContent.trim() === text.trim());
    if (bubble) {
      bubble.replaceWith(node);
    } else if (exec.data && FINISHED_STATUSES.has(exec.data.status)) {
      // Replaying the history of a run that is long over: nothing to ask any more.
      return;
    } else {
      appendToStream(node);
    }
    exec.question = { node, text, answered: false };
    scrollToBottom(true);
    setTimeout(() => { if (node.isConnected && !view.closed) input.focus(); }, 0);
  }

  function retireQuestion(exec) {
    if (!exec.question || exec.question.answered) return;
    exec.question.answered = true;
    const form = exec.question.node.querySelector('.question-form');
    if (form) form.remove();
    exec.question.node.classList.add('question-answered');
  }

  function setExecStatus(exec, status, content) {
    exec.status = status;
    if (status === 'running') exec.answered = false;
    if (FINISHED_STATUSES.has(status) && exec.streamNode) {
      exec.streamNode.remove();
      exec.streamNode = null;
    }
    if (status === 'paused') {
      showQuestion(exec, content || (exec.data && exec.data.output && exec.data.output.question) || 'The agent needs your input.');
    } else {
      retireQuestion(exec);
    }
    if (FINISHED_STATUSES.has(status) || status === 'paused') exec.activity = '';
    const isSubagent = Boolean(exec.data && exec.data.parent_execution_id);
    if (status === 'failed' && !isSubagent) showFailure(exec, content || (exec.data && exec.data.error_message) || 'the execution failed');
    if (status === 'cancelled' && !exec.cancelShown) {
      exec.cancelShown = true;
      if (!(exec.data && exec.data.parent_execution_id)) {
        placeAfterGroup(exec, el('div', { class: 'line line-cancelled', 'data-execution-id': exec.id }, 'Run cancelled.'));
      }
    }
    refreshExec(exec);
    refreshRunState();
  }

  function handleDelta(exec, text) {
    // Deltas are live only; once the finished message is on screen they are stale.
    if (exec.answered || FINISHED_STATUSES.has(exec.status)) return;
    if (!exec.streamNode) {
      const body = el('div', { class: 'bubble-body stream-text' });
      exec.streamNode = el('article', { class: 'msg msg-assistant streaming', 'data-role': 'assistant', 'data-execution-id': exec.id, 'aria-label': 'Assistant is writing', 'aria-busy': 'true' },
        body, el('div', { class: 'bubble-meta' }, 'writing…'));
      appendToStream(exec.streamNode);
    }
    exec.streamNode.querySelector('.stream-text').textContent += text;
    scrollToBottom(false);
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
            addMessage({
              id: item.data.message_id,
              session_id: item.data.session_id,
              role,
              content: item.data.content || '',
              execution_id: item.data.execution_id,
              related_type: null,
              related_id: null,
              context_url: null,
              metadata: {},
              created_at: item.data.timestamp,
            });
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

  function applyEvent(type, data) {
    const exec = data.execution_id ? execState(data.execution_id) : null;
    const meta = data.metadata || {};
    switch (type) {
      case 'message.created':
        break;
      case 'message.delta':
        if (exec) handleDelta(exec, data.content || '');
        break;
      case 'step.started':
      case 'tool.called':
      case 'tool.completed':
      case 'step.completed':
        if (exec) {
          if (Number.isInteger(meta.step_number)) {
            if (type === 'step.completed') addStepNumber(exec, meta.step_number);
            exec.currentStep = meta.step_number;
          }
          if (type === 'step.completed') exec.activity = '';
          else exec.activity = data.content || (meta.tool ? `calling ${meta.tool}` : '');
          if (!exec.status || exec.status === 'pending') exec.status = 'running';
          refreshExec(exec);
          refreshRunState();
          if (type === 'step.completed') refreshInspectorFor(exec);
        }
        break;
      default:
        if (exec && EXEC_STATUS_BY_EVENT[type]) {
          const status = EXEC_STATUS_BY_EVENT[type];
          setExecStatus(exec, status, data.content);
          if (FINISHED_STATUSES.has(status) || status === 'paused') {
            loadExecution(exec, true);
          }
          refreshInspectorFor(exec);
        }
    }
  }

  // ---- the live connection

  let connNoticeTimer = null;
  function setConnectionNotice(text, kind) {
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

  async function runStream(current) {
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
          const hadKey = Boolean(apiKey());
          try { sessionStorage.removeItem(KEY_STORAGE); } catch (_) { /* ignore */ }
          await promptForKey(hadKey ? 'That key was not accepted. Enter another one.' : '');
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
        await readEventStream(res.body, (ev) => handleEvent(current, ev), poke);
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

  // ---- running state and cancel

  function topLevelExecs() {
    return [...view.execs.values()].filter((e) => !(e.data && e.data.parent_execution_id));
  }

  function refreshRunState() {
    const execs = topLevelExecs();
    const active = execs.filter((e) => ACTIVE_STATUSES.has(e.status));
    const paused = execs.filter((e) => e.status === 'paused');
    const bar = $('runbar');
    if (active.length) {
      const running = active.find((e) => e.status === 'running');
      let text = running ? 'Running…' : 'Queued…';
      if (running) {
        const root = rootExec(running);
        const step = root.currentStep || Math.max(0, ...root.stepNumbers);
        if (step) text = `Running · step ${step}`;
      }
      if (active.length > 1) text += ` (${active.length - 1} more queued)`;
      $('runbar-text').textContent = text;
      bar.hidden = false;
      bar.dataset.state = 'running';
    } else if (paused.length) {
      $('runbar-text').textContent = 'Waiting for your answer';
      bar.hidden = false;
      bar.dataset.state = 'paused';
    } else {
      bar.hidden = true;
      bar.dataset.state = 'idle';
    }
    $('input').placeholder = paused.length && !active.length ? 'Answer the agent…' : 'Message the agent…';
  }

  async function cancelRun() {
    const targets = topLevelExecs().filter((e) => ACTIVE_STATUSES.has(e.status) || e.status === 'paused');
    if (!targets.length) return;
    const current = view;
    const button = $('btn-cancel');
    button.disabled = true;
    $('runbar-text').textContent = 'Cancelling…';
    try {
      await Promise.all(targets.map(async (exec) => {
        try {
          const data = await api('POST', `/v1/executions/${exec.id}/cancel`);
          if (!current.closed && data && data.status === 'cancelled') setExecStatus(exec, 'cancelled', '');
        } catch (err) {
          if (err.status !== 409 && !current.closed) showError(`Could not cancel: ${err.message}`);
        }
      }));
    } finally {
      button.disabled = false;
      if (!current.closed) refreshRunState();
    }
  }

  // ---- sending

  function showError(text) {
    appendToStream(el('div', { class: 'line line-error', role: 'alert' }, text));
  }

  async function sendMessage(text) {
    const content = text.trim();
    if (!content) return;
    const current = view;
    const ctx = {};
    for (const [k, v] of Object.entries(pageContext)) if (v) ctx[k] = v;
    const pendingMsg = { role: 'user', content, ...ctx, created_at: null };
    const node = messageNode(pendingMsg, true);
    const pending = { content, node };
    current.optimistic.push(pending);
    appendToStream(node);
    scrollToBottom(true);
    try {
      const isNew = !current.sessionId;
      if (isNew) {
        // Create the session and subscribe to it before sending, so not even the first
        // streamed tokens of the answer are missed (deltas are live only).
        const fields = { title: titleFrom(content) };
        if (ctx.related_type) fields.related_type = ctx.related_type;
        if (ctx.related_id) fields.related_id = ctx.related_id;
        if (ctx.context_url) fields.initial_context_url = ctx.context_url;
        const session = await api('POST', '/v1/sessions', fields);
        if (current.closed) return;
        current.sessionId = session.id;
        current.session = session;
        setSessionInUrl(current.sessionId);
        renderHeader();
        const connected = new Promise((resolve) => { current.onConnected = resolve; });
        runStream(current);
        await Promise.race([connected, sleep(3000)]);
        if (current.closed) return;
        if (historyOpen()) reloadHistory();
      }
      const answer = await api('POST', `/v1/sessions/${current.sessionId}/messages`, { content, ...ctx });
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
      node.classList.remove('msg-pending');
      node.classList.add('msg-failed');
      node.querySelector('.bubble-meta time').textContent = 'not sent';
      showError(`Could not send: ${err.message}`);
      if (!$('input').value) $('input').value = content;
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

  // ---- opening sessions

  function resetStream() {
    streamEl.replaceChildren();
    updateEmpty();
    setConnectionNotice(null);
    $('banner-demo').hidden = true;
    refreshRunState();
  }

  function newSession() {
    closeInspector();
    view.close();
    view = new SessionView(null);
    setSessionInUrl(null);
    resetStream();
    renderHeader();
    markCurrentInHistory();
    $('input').focus();
  }

  async function openSession(sessionId) {
    closeInspector();
    view.close();
    const current = new SessionView(sessionId);
    view = current;
    setSessionInUrl(sessionId);
    resetStream();
    renderHeader();
    markCurrentInHistory();
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
      runStream(current);
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

  // ---------------------------------------------------------------- history

  const historyState = { items: [], cursor: null, loading: false, gen: 0, done: false };

  function historyOpen() {
    return !$('history').hidden;
  }

  function toggleHistory(open) {
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
      el('span', { class: 'history-meta' },
        el('span', { class: `badge status-${session.status}` }, session.status),
        el('time', { datetime: session.updated_at, title: session.updated_at }, relativeTime(session.updated_at)),
        el('span', {}, plural(session.message_count || 0, 'message'))));
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

  // ---------------------------------------------------------------- execution inspector

  function jsonTree(value, depth = 0, key = null) {
    const keyNode = key == null ? null : el('span', { class: 'json-key' }, `${key}: `);
    if (value === null || typeof value !== 'object') {
      const type = value === null ? 'null' : typeof value;
      const text = typeof value === 'string' ? JSON.stringify(value) : String(value);
      return el('div', { class: 'json-leaf' }, keyNode, el('span', { class: `json-${type}` }, text));
    }
    const isArray = Array.isArray(value);
    const entries = isArray ? value.map((v, i) => [i, v]) : Object.entries(value);
    const open = isArray ? '[' : '{';
    const close = isArray ? ']' : '}';
    if (entries.length === 0) {
      return el('div', { class: 'json-leaf' }, keyNode, el('span', { class: 'json-punct' }, `${open}${close}`));
    }
    const details = el('details', { class: 'json-node' });
    if (depth < 1) details.open = true;
    details.append(el('summary', {}, keyNode, el('span', { class: 'json-punct' }, open),
      el('span', { class: 'json-size' }, ` ${plural(entries.length, isArray ? 'item' : 'key')} `),
      el('span', { class: 'json-punct json-close-inline' }, close)));
    const children = el('div', { class: 'json-children' });
    // Build children lazily: snapshots can be large.
    const build = () => {
      if (children.childElementCount || !details.open) return;
      for (const [k, v] of entries) children.append(jsonTree(v, depth + 1, k));
    };
    details.addEventListener('toggle', build);
    details.append(children, el('span', { class: 'json-punct json-close' }, close));
    build();
    return details;
  }

  function field(label, value) {
    if (value == null || value === '') return null;
    return el('div', { class: 'kv' }, el('dt', {}, label), el('dd', {}, value));
  }

  function stamp(text) {
    const t = parseTime(text);
    if (t == null) return null;
    const micros = /\.(\d{6})/.exec(text);
    const local = new Date(t).toLocaleString([], { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' });
    return el('time', { datetime: text, title: text }, micros ? `${local} (.${micros[1]})` : local);
  }

  function tokenText(usage) {
    if (!usage || !usage.total) return null;
    return `${usage.total} (in ${usage.input}, out ${usage.output})`;
  }

  function stepCard(step) {
    const calls = (step.tool_calls || []).map((call) => el('div', { class: 'tool-call' },
      el('div', { class: 'tool-name' }, el('span', { class: 'badge' }, 'tool'), ` ${call.name}`, call.id ? el('span', { class: 'muted' }, ` · ${call.id}`) : null),
      jsonTree(call.arguments, 0, 'arguments')));
    const timing = step.started_at && step.ended_at ? duration(step.started_at, step.ended_at) : '';
    return el('article', { class: `step-card${step.error ? ' step-error' : ''}`, 'data-step-number': String(step.step_number) },
      el('header', { class: 'step-head' },
        el('span', { class: 'step-num' }, `#${step.step_number}`),
        el('span', { class: 'badge' }, step.kind),
        timing ? el('span', { class: 'muted' }, timing) : null,
        tokenText(step.token_usage) ? el('span', { class: 'muted' }, `${tokenText(step.token_usage)} tokens`) : null,
        el('time', { class: 'muted', datetime: step.created_at, title: step.created_at }, clockTime(step.started_at || step.created_at))),
      step.model_output ? el('div', { class: 'step-section' }, el('div', { class: 'step-label' }, 'Thought'), el('pre', { class: 'pre' }, step.model_output)) : null,
      calls.length ? el('div', { class: 'step-section' }, el('div', { class: 'step-label' }, 'Tool calls'), ...calls) : null,
      step.code ? el('div', { class: 'step-section' }, el('div', { class: 'step-label' }, 'Code'), el('pre', { class: 'pre' }, step.code)) : null,
      step.observations ? el('div', { class: 'step-section' }, el('div', { class: 'step-label' }, 'Observations'), el('pre', { class: 'pre' }, step.observations)) : null,
      step.error ? el('div', { class: 'step-section step-error-text', role: 'note' }, el('div', { class: 'step-label' }, 'Error'), `${step.error.kind}: ${step.error.message}`) : null,
      step.output != null ? el('div', { class: 'step-section' }, el('div', { class: 'step-label' }, 'Output'), jsonTree(step.output, 0)) : null);
  }

  function snapshotRow(snapshot, current) {
    const details = el('details', { class: 'snapshot', 'data-snapshot-id': snapshot.id });
    const label = [
      `step ${snapshot.step_number}`,
      snapshot.is_final ? 'final' : null,
      snapshot.debug_mode ? 'debug' : null,
      snapshot.agent_name || snapshot.agent_id,
      snapshot.parent_snapshot_id ? `parent …${shortId(snapshot.parent_snapshot_id)}` : null,
    ].filter(Boolean).join(' · ');
    details.append(el('summary', {}, el('span', {}, `Snapshot ${label}`), el('time', { class: 'muted', datetime: snapshot.created_at }, ` ${clockTime(snapshot.created_at)}`)));
    const body = el('div', { class: 'snapshot-body' }, el('span', { class: 'muted' }, 'Loading…'));
    details.append(body);
    details.addEventListener('toggle', async () => {
      if (!details.open || details.dataset.loaded) return;
      details.dataset.loaded = '1';
      try {
        const full = await api('GET', `/v1/snapshots/${snapshot.id}`);
        if (current !== inspectorGen) return;
        body.replaceChildren(jsonTree(full.state, 0, 'state'));
      } catch (err) {
        body.replaceChildren(el('span', { class: 'error-text' }, `Could not load: ${err.message}`));
        delete details.dataset.loaded;
      }
    });
    return details;
  }

  let inspectorGen = 0;

  async function executionSection(execId, allExecs, current, depth) {
    const [exec, steps, snapshots] = await Promise.all([
      api('GET', `/v1/executions/${execId}`),
      listAll(`/v1/executions/${execId}/steps`),
      listAll(`/v1/executions/${execId}/snapshots`),
    ]);
    if (current !== inspectorGen) return null;
    const usage = exec.token_usage || {};
    const section = el('section', { class: `inspect-exec depth-${depth}`, 'data-execution-id': exec.id },
      el('h3', {}, depth ? 'Subagent ' : '', el('span', { class: 'mono' }, `…${shortId(exec.id)}`), ' ',
        el('span', { class: `badge status-${exec.status}` }, exec.status), ' ',
        el('span', { class: `badge${exec.agent_type === 'demo' ? ' badge-demo' : ''}` }, exec.agent_type === 'demo' ? 'demo agent' : exec.agent_type)),
      el('dl', { class: 'kvs' },
        field('Execution id', el('span', { class: 'mono' }, exec.id)),
        field('Steps', String(exec.step_count)),
        field('Tokens', usage.total ? `${usage.total} (in ${usage.input}, out ${usage.output})` : '0'),
        field('Created', stamp(exec.created_at)),
        field('Started', stamp(exec.started_at)),
        field('Finished', stamp(exec.completed_at)),
        field('Duration', exec.started_at && exec.completed_at ? duration(exec.started_at, exec.completed_at) : null),
        field('Attempts', exec.attempts != null ? String(exec.attempts) : null),
        exec.error_message ? el('div', { class: 'kv kv-error' }, el('dt', {}, 'Error'), el('dd', {}, exec.error_message)) : null),
      el('details', { class: 'inspect-io' }, el('summary', {}, 'Input and output'),
        jsonTree(exec.input, 0, 'input'), jsonTree(exec.output, 0, 'output'),
        exec.agent_config && Object.keys(exec.agent_config).length ? jsonTree(exec.agent_config, 0, 'agent_config') : null));
    const stepList = el('div', { class: 'steps' });
    if (steps.length) steps.forEach((s) => stepList.append(stepCard(s)));
    else stepList.append(el('p', { class: 'muted' }, 'No steps yet.'));
    section.append(el('h4', {}, `Steps (${steps.length})`), stepList);
    const snapList = el('div', { class: 'snapshots' });
    if (snapshots.length) snapshots.forEach((s) => snapList.append(snapshotRow(s, current)));
    else snapList.append(el('p', { class: 'muted' }, 'No snapshots.'));
    section.append(el('h4', {}, `Snapshots (${snapshots.length})`), snapList);
    const children = allExecs.filter((e) => e.parent_execution_id === exec.id);
    if (children.length && depth < 8) {
      const wrap = el('div', { class: 'subagents' });
      section.append(el('h4', {}, `Subagents (${children.length})`), wrap);
      for (const child of children) {
        const childSection = await executionSection(child.id, allExecs, current, depth + 1);
        if (childSection) wrap.append(childSection);
      }
    }
    return section;
  }

  let inspectedExecId = null;
  let inspectorRefreshTimer = null;

  // While a run goes on, the open inspector follows it (at most about once a second).
  function refreshInspectorFor(exec) {
    if ($('inspector').hidden || !inspectedExecId) return;
    if (exec.id !== inspectedExecId && rootExec(exec).id !== inspectedExecId) return;
    if (inspectorRefreshTimer) return;
    inspectorRefreshTimer = setTimeout(() => {
      inspectorRefreshTimer = null;
      if (!$('inspector').hidden && inspectedExecId) openInspector(inspectedExecId, true);
    }, 1000);
  }

  async function openInspector(execId, quiet) {
    inspectorGen += 1;
    const current = inspectorGen;
    inspectedExecId = execId;
    const panel = $('inspector');
    const body = $('inspector-body');
    panel.hidden = false;
    document.body.classList.add('inspector-open');
    if (!quiet) body.replaceChildren(el('p', { class: 'muted' }, 'Loading…'));
    try {
      const sessionId = view.sessionId;
      const allExecs = sessionId ? await listAll(`/v1/sessions/${sessionId}/executions`) : [];
      const section = await executionSection(execId, allExecs, current, 0);
      if (current !== inspectorGen || !section) return;
      const scrollTop = panel.scrollTop;
      // Keep what the reader had opened across a live refresh.
      const openSnapshots = new Set([...body.querySelectorAll('details.snapshot[open]')].map((d) => d.dataset.snapshotId));
      const openIo = new Set([...body.querySelectorAll('.inspect-exec')].filter((x) => x.querySelector(':scope > .inspect-io[open]')).map((x) => x.dataset.executionId));
      body.replaceChildren(section,
        el('button', { type: 'button', class: 'btn btn-small', onclick: () => openInspector(execId) }, 'Refresh'));
      if (quiet) {
        for (const d of body.querySelectorAll('details.snapshot')) if (openSnapshots.has(d.dataset.snapshotId)) d.open = true;
        for (const x of body.querySelectorAll('.inspect-exec')) {
          const io = x.querySelector(':scope > .inspect-io');
          if (io && openIo.has(x.dataset.executionId)) io.open = true;
        }
        panel.scrollTop = scrollTop;
      }
      else $('btn-inspector-close').focus();
    } catch (err) {
      if (current === inspectorGen) body.replaceChildren(el('p', { class: 'error-text' }, `Could not load the execution: ${err.message}`));
    }
  }

  function closeInspector() {
    inspectorGen += 1;
    inspectedExecId = null;
    $('inspector').hidden = true;
    document.body.classList.remove('inspector-open');
  }

  // ---------------------------------------------------------------- wiring

  function autosize(textarea) {
    textarea.style.height = 'auto';
    textarea.style.height = `${Math.min(textarea.scrollHeight, 240)}px`;
  }

  function init() {
    const input = $('input');
    $('composer').addEventListener('submit', (e) => {
      e.preventDefault();
      const text = input.value;
      if (!text.trim()) return;
      input.value = '';
      autosize(input);
      sendMessage(text);
    });
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        $('composer').requestSubmit();
      }
    });
    input.addEventListener('input', () => autosize(input));
    document.addEventListener('keydown', (e) => {
      if (e.key !== 'Escape' || e.defaultPrevented || document.querySelector('dialog[open]')) return;
      if (!$('inspector').hidden) closeInspector();
      else if (historyOpen() && window.matchMedia('(max-width: 900px)').matches) toggleHistory(false);
      else cancelRun();
    });
    $('btn-cancel').addEventListener('click', cancelRun);
    $('btn-new').addEventListener('click', newSession);
    $('btn-history').addEventListener('click', () => toggleHistory());
    $('btn-history-close').addEventListener('click', () => toggleHistory(false));
    $('btn-inspector-close').addEventListener('click', closeInspector);
    $('btn-history-more').addEventListener('click', loadHistoryPage);
    $('history-search').addEventListener('input', applyHistorySearch);
    $('history-status').addEventListener('change', reloadHistory);
    // Infinite scroll: the footer coming into view loads the next page.
    if ('IntersectionObserver' in window) {
      new IntersectionObserver((entries) => {
        if (entries.some((en) => en.isIntersecting) && historyOpen()) loadHistoryPage();
      }, { root: $('history'), rootMargin: '200px' }).observe($('history-footer'));
    }
    renderChips($('context-chips'), pageContext, true);
    updateEmpty();
    renderHeader();
    const sessionId = params.get('session');
    if (sessionId) {
      openSession(sessionId);
    } else {
      input.focus();
      // Asks for an API key up front when the server wants one (the 401 path prompts).
      api('GET', '/v1/sessions?limit=1').catch(() => {});
    }
  }

  // For the browser tests: the Markdown renderer, and a way to cut the live connection as a
  // network failure would.
  window.stepwiseUi = {
    renderMarkdown,
    escapeHtml,
    dropConnection: () => { if (view.conn) view.conn.abort(); },
  };
  init();
})();

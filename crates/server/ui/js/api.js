// The HTTP API client: JSON requests with the credential this tab holds (an end user's
// sign-in token handed over in the URL, or an API key typed into the prompt), and the prompt
// shown when the server answers 401.

import { $ } from './dom.js';

const KEY_STORAGE = 'stepwise.apiKey';
const TOKEN_STORAGE = 'stepwise.token';
// Where storage is disabled, the credentials live until the page is left.
const memory = {};

function load(name) {
  try {
    return sessionStorage.getItem(name) || '';
  } catch (_) {
    return memory[name] || '';
  }
}

function store(name, value) {
  memory[name] = value || '';
  try {
    if (value) sessionStorage.setItem(name, value);
    else sessionStorage.removeItem(name);
  } catch (_) { /* storage disabled: `memory` holds it */ }
}

/** A failed request: HTTP status (0 when the server could not be reached), error code, message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/**
 * Takes a sign-in token from the URL's fragment (`#token=...`, what an application that embeds
 * or links to the UI hands over) into the tab's session storage, and takes it out of the address
 * bar (path, query and any other fragment parameters stay), so it is not bookmarked, shared or
 * kept in the history. A fragment never reaches a server's logs. True when there was one.
 */
function takeTokenFromUrl() {
  const fragment = new URLSearchParams(location.hash.replace(/^#/, ''));
  const token = fragment.get('token');
  if (token === null) return false;
  fragment.delete('token');
  const rest = fragment.toString();
  history.replaceState(history.state, '', `${location.pathname}${location.search}${rest ? `#${rest}` : ''}`);
  if (!token) return false;
  store(TOKEN_STORAGE, token);
  return true;
}
takeTokenFromUrl();

// The bearer credential requests carry: the sign-in token when the tab has one, else the key.
function credential() {
  return load(TOKEN_STORAGE) || load(KEY_STORAGE);
}

/** The Authorization header for the credential this tab holds, if any. */
export function authHeaders() {
  const bearer = credential();
  return bearer ? { Authorization: `Bearer ${bearer}` } : {};
}

const PROMPTS = {
  key: {
    title: 'API key required',
    text: "This server requires an API key. It is kept only in this browser tab's session storage.",
    label: 'API key',
  },
  token: {
    title: 'Sign-in token not accepted',
    text: 'Open this page again from the application that sent you here, or enter a new token or an API key.',
    label: 'Token or API key',
  },
};

// One prompt at a time; every request that got a 401 waits for the same answer.
let keyPrompt = null;
function promptForKey(kind, message) {
  if (keyPrompt) return keyPrompt.done;
  const dialog = $('auth-dialog');
  const input = $('auth-key');
  const prompt = PROMPTS[kind];
  $('auth-title').textContent = prompt.title;
  $('auth-text').textContent = prompt.text;
  $('auth-key-label').textContent = prompt.label;
  $('auth-error').textContent = message || '';
  input.value = '';
  let resolve;
  const done = new Promise((r) => { resolve = r; });
  const finish = () => {
    dialog.removeEventListener('close', onClose);
    if (dialog.open) dialog.close();
    keyPrompt = null;
    resolve();
  };
  function onClose() {
    const key = input.value.trim();
    if (!key) {
      // The dialog cannot be dismissed without a credential: nothing works without one.
      $('auth-error').textContent = kind === 'token' ? 'A new token or an API key is needed to continue.' : 'An API key is needed to continue.';
      dialog.showModal();
      return;
    }
    // A token pasted here is a bearer credential like a key: it goes in the key's place.
    store(KEY_STORAGE, key);
    finish();
  }
  keyPrompt = { done, finish };
  dialog.addEventListener('close', onClose);
  if (!dialog.open) dialog.showModal();
  input.focus();
  return done;
}

// The page that embeds the UI can hand over a fresh token by changing only the fragment of the
// frame's URL (no reload): it is taken like the first one, and answers an open prompt.
window.addEventListener('hashchange', () => {
  if (takeTokenFromUrl() && keyPrompt) keyPrompt.finish();
});

/**
 * The server answered 401 to a request sent with `sent` (its Authorization header, if any):
 * forget that credential and wait for another one. A token that stopped working says so (it
 * expired, or is not valid); a refused key asks for another key. When the tab has meanwhile
 * got a different credential, the request just goes again with it.
 */
export async function replaceRejectedKey(sent) {
  if (sent !== authHeaders().Authorization) return;
  if (load(TOKEN_STORAGE)) {
    store(TOKEN_STORAGE, '');
    await promptForKey('token', 'Your sign-in token has expired or is not valid.');
    return;
  }
  const hadKey = Boolean(load(KEY_STORAGE));
  store(KEY_STORAGE, '');
  await promptForKey('key', hadKey ? 'That key was not accepted. Enter another one.' : '');
}

/** One JSON request; a 401 asks for a key and tries again. Throws ApiError on failure. */
export async function api(method, path, body) {
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
      await replaceRejectedKey(headers.Authorization);
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

/** Every item of a paged list endpoint, following `next_cursor`. */
export async function listAll(path) {
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

// What the server accepts (GET /v1/limits); until it answers, or when it has no such endpoint,
// the server's default.
const DEFAULT_MAX_CONTENT_CHARS = 100000;
export const limits = { max_content_chars: DEFAULT_MAX_CONTENT_CHARS };
let limitsLoaded = null;

/** Fetches the server's limits once; a server without `GET /v1/limits` keeps the default. */
export function loadLimits() {
  if (!limitsLoaded) {
    limitsLoaded = api('GET', '/v1/limits').then((data) => {
      const max = data && data.max_content_chars;
      if (Number.isInteger(max) && max > 0) limits.max_content_chars = max;
    }).catch((err) => {
      // Unreachable now: ask again next time. Any answer (a 404 from an older server) stands.
      if (err.status === 0) limitsLoaded = null;
    });
  }
  return limitsLoaded;
}

/** The length of a message as the server counts it: in characters (code points). */
export function contentChars(text) {
  // Never more code points than UTF-16 units: counting them is needed only near the limit.
  if (text.length <= limits.max_content_chars) return text.length;
  let n = 0;
  for (const _ of text) n += 1;
  return n;
}

/** Why the server would refuse this message's content, or null when it fits. */
export function contentProblem(text) {
  const n = contentChars(text);
  if (n <= limits.max_content_chars) return null;
  const fmt = (x) => x.toLocaleString('en-US');
  return `This message is ${fmt(n)} characters long; the server takes at most ${fmt(limits.max_content_chars)}. Shorten it, or send it in parts.`;
}

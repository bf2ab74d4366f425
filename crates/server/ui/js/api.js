// The HTTP API client: JSON requests with the API key this tab holds, and the key prompt
// shown when the server answers 401.

import { $ } from './dom.js';

const KEY_STORAGE = 'stepwise.apiKey';

/** A failed request: HTTP status (0 when the server could not be reached), error code, message. */
export class ApiError extends Error {
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

/** The Authorization header for the key this tab holds, if any. */
export function authHeaders() {
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

/** The server answered 401: forget the key it refused and wait for the user to enter one. */
export async function replaceRejectedKey() {
  const hadKey = Boolean(apiKey());
  try { sessionStorage.removeItem(KEY_STORAGE); } catch (_) { /* ignore */ }
  await promptForKey(hadKey ? 'That key was not accepted. Enter another one.' : '');
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
      await replaceRejectedKey();
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

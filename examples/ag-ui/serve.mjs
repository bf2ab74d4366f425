// Builds the page (esbuild) and serves it on http://127.0.0.1:$PORT (default 5174), for the
// Stepwise server at $STEPWISE_URL (default http://127.0.0.1:7777), in one of two ways:
// - $STEPWISE_API_KEY set (an admin key): GET /api/token mints an end-user token for the page
//   (POST /v1/tokens; the admin key never leaves this process), and the page calls Stepwise
//   directly, cross-origin, with that token (the server needs `--cors-origin` for this page's
//   origin). $STEPWISE_PUBLIC_URL is the server's URL as the browser reaches it, when it is not
//   $STEPWISE_URL.
// - unset (an open local server): /v1/... passes through to Stepwise, so the page and the API
//   share an origin, and /api/token answers that there is no token.
import http from 'node:http';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const upstream = new URL(process.env.STEPWISE_URL || 'http://127.0.0.1:7777');
const publicUrl = (process.env.STEPWISE_PUBLIC_URL || upstream.origin).replace(/\/$/, '');
const adminKey = process.env.STEPWISE_API_KEY || '';
const port = Number(process.env.PORT || 5174);

const built = await esbuild.build({
  entryPoints: [here('./src/main.js')],
  bundle: true,
  format: 'esm',
  write: false,
  minify: true,
  define: { 'process.env.NODE_ENV': '"production"' },
});
const bundle = built.outputFiles[0].contents;
const html = await readFile(here('./index.html'));

function json(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' });
  res.end(JSON.stringify(body));
}

// The page's way to Stepwise: a token for the user and the server's URL, or (proxy mode) none.
async function token(req, res) {
  if (!adminKey) return json(res, 200, { token: null, user_id: null, expires_at: null, stepwise_url: '' });
  // A real application takes the user from its own sign-in; this demo takes `?user=`.
  const userId = new URL(req.url, 'http://page').searchParams.get('user') || 'demo-user';
  try {
    const answer = await fetch(new URL('/v1/tokens', upstream), {
      method: 'POST',
      headers: { authorization: `Bearer ${adminKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ user_id: userId }),
    });
    const body = await answer.json().catch(() => null);
    if (answer.status !== 201) {
      const message = body?.error?.message || `status ${answer.status}`;
      return json(res, 502, { error: { code: 'bad_gateway', message: `Stepwise refused a token for ${userId}: ${message}` } });
    }
    return json(res, 200, { token: body.token, user_id: body.user_id, expires_at: body.expires_at, stepwise_url: publicUrl });
  } catch (e) {
    return json(res, 502, { error: { code: 'bad_gateway', message: `Stepwise at ${upstream.origin}: ${e.message}` } });
  }
}

function pass(req, res) {
  const forward = http.request({ hostname: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers: { ...req.headers, host: upstream.host } }, (answer) => {
    res.writeHead(answer.statusCode, answer.headers);
    answer.pipe(res);
  });
  forward.on('error', (e) => json(res, 502, { error: { code: 'bad_gateway', message: `Stepwise at ${upstream.origin}: ${e.message}` } }));
  res.on('close', () => forward.destroy());
  req.pipe(forward);
}

http.createServer((req, res) => {
  if (req.url === '/api/token' || req.url.startsWith('/api/token?')) return token(req, res);
  if (req.url.startsWith('/v1/')) {
    if (!adminKey) return pass(req, res);
    return json(res, 404, { error: { code: 'not_found', message: `The page calls Stepwise at ${publicUrl} with its own token.` } });
  }
  if (req.url === '/app.js') {
    res.writeHead(200, { 'content-type': 'text/javascript' });
    return res.end(bundle);
  }
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
  res.end(html);
}).listen(port, '127.0.0.1', () => {
  const mode = adminKey ? `the page calls it directly with end-user tokens` : `/v1 passed through`;
  console.log(`AG-UI example on http://127.0.0.1:${port} (Stepwise at ${upstream.origin}: ${mode})`);
});

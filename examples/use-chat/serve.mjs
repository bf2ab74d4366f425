// Builds the page (esbuild) and serves it on http://127.0.0.1:$PORT (default 5173), passing
// /v1/... through to the Stepwise server at $STEPWISE_URL (default http://127.0.0.1:8420), so
// the page and the API share an origin. $STEPWISE_API_KEY, when set, is added to what passes.
import http from 'node:http';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const upstream = new URL(process.env.STEPWISE_URL || 'http://127.0.0.1:8420');
const port = Number(process.env.PORT || 5173);

const built = await esbuild.build({
  entryPoints: [here('./src/main.jsx')],
  bundle: true,
  format: 'esm',
  write: false,
  jsx: 'automatic',
  minify: true,
  define: { 'process.env.NODE_ENV': '"production"' },
});
const bundle = built.outputFiles[0].contents;
const html = await readFile(here('./index.html'));

function pass(req, res) {
  const headers = { ...req.headers, host: upstream.host };
  if (process.env.STEPWISE_API_KEY) headers.authorization = `Bearer ${process.env.STEPWISE_API_KEY}`;
  const forward = http.request({ hostname: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers }, (answer) => {
    res.writeHead(answer.statusCode, answer.headers);
    answer.pipe(res);
  });
  forward.on('error', (e) => {
    res.writeHead(502, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { code: 'bad_gateway', message: `Stepwise at ${upstream.origin}: ${e.message}` } }));
  });
  res.on('close', () => forward.destroy());
  req.pipe(forward);
}

http.createServer((req, res) => {
  if (req.url.startsWith('/v1/')) return pass(req, res);
  if (req.url === '/app.js') {
    res.writeHead(200, { 'content-type': 'text/javascript' });
    return res.end(bundle);
  }
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
  res.end(html);
}).listen(port, '127.0.0.1', () => {
  console.log(`useChat example on http://127.0.0.1:${port} (Stepwise at ${upstream.origin})`);
});

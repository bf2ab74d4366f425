// Builds the page (esbuild) and serves it on http://127.0.0.1:$PORT (default 5175), with
// /langgraph/... passed through to the Stepwise server at $STEPWISE_URL (default
// http://127.0.0.1:7777), so the page and LangGraph's Server API share an origin and no CORS is
// needed. For an open local server (`stepwise serve` on loopback, no keys): nothing here adds a
// key.
import http from 'node:http';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const upstream = new URL(process.env.STEPWISE_URL || 'http://127.0.0.1:7777');
const port = Number(process.env.PORT || 5175);

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
  const forward = http.request({ hostname: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers: { ...req.headers, host: upstream.host } }, (answer) => {
    res.writeHead(answer.statusCode, answer.headers);
    answer.pipe(res);
  });
  forward.on('error', (e) => {
    res.writeHead(502, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { code: 'bad_gateway', message: `Stepwise at ${upstream.origin}: ${e.message}` } }));
  });
  // A page that leaves (a reload) ends its stream upstream too.
  res.on('close', () => forward.destroy());
  req.pipe(forward);
}

http.createServer((req, res) => {
  if (req.url === '/langgraph' || req.url.startsWith('/langgraph/')) return pass(req, res);
  if (req.url === '/app.js') {
    res.writeHead(200, { 'content-type': 'text/javascript' });
    return res.end(bundle);
  }
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
  res.end(html);
}).listen(port, '127.0.0.1', () => {
  console.log(`useStream example on http://127.0.0.1:${port} (/langgraph passed through to ${upstream.origin})`);
});

// A stand-in for an OpenAI-compatible chat-completions server, for the streaming test: every
// answer streams "Hello wor", then holds until POST /control/release, then "ld, done." — so a
// test can see tokens on screen before the answer is finished, with no timing guesses.
//   node support/fake-llm.mjs PORT
import http from 'node:http';

let waiting = [];
let requests = 0;

function chunk(res, delta, extra = {}) {
  const body = { id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 0, model: 'fake', choices: [{ index: 0, delta, finish_reason: null }], ...extra };
  res.write(`data: ${JSON.stringify(body)}\n\n`);
}

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://x');
  if (req.method === 'POST' && url.pathname === '/control/release') {
    const released = waiting.length;
    waiting.forEach((resolve) => resolve());
    waiting = [];
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ released, requests }));
    return;
  }
  if (req.method === 'GET' && url.pathname === '/healthz') {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end('{"status":"ok"}');
    return;
  }
  if (req.method === 'GET' && url.pathname.endsWith('/models')) {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ object: 'list', data: [{ id: 'fake', object: 'model' }] }));
    return;
  }
  if (req.method === 'POST' && url.pathname.endsWith('/chat/completions')) {
    let text = '';
    for await (const part of req) text += part;
    const request = JSON.parse(text || '{}');
    requests += 1;
    const usage = { prompt_tokens: 12, completion_tokens: 4, total_tokens: 16 };
    if (!request.stream) {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ id: 'chatcmpl-fake', object: 'chat.completion', created: 0, model: 'fake', choices: [{ index: 0, message: { role: 'assistant', content: 'Hello world, done.' }, finish_reason: 'stop' }], usage }));
      return;
    }
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
    chunk(res, { role: 'assistant', content: '' });
    chunk(res, { content: 'Hello ' });
    chunk(res, { content: 'wor' });
    // Held until the test releases it (or a minute passes, so nothing hangs for ever).
    await new Promise((resolve) => {
      waiting.push(resolve);
      setTimeout(resolve, 60000).unref();
    });
    chunk(res, { content: 'ld, done.' });
    res.write(`data: ${JSON.stringify({ id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 0, model: 'fake', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`);
    res.write(`data: ${JSON.stringify({ id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 0, model: 'fake', choices: [], usage })}\n\n`);
    res.end('data: [DONE]\n\n');
    return;
  }
  res.writeHead(404, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ error: { message: 'not found' } }));
});

server.listen(Number(process.argv[2] || 0), '127.0.0.1', () => {
  console.log(`fake LLM on http://127.0.0.1:${server.address().port}/v1`);
});

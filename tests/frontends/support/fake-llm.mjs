// A stand-in for an OpenAI-compatible chat-completions server that calls a tool: the first
// answer of a conversation asks for `calculator` with `6*7` (streamed in pieces); once the
// conversation holds a tool result, the answer streams "The answer is " + that result + ".".
//   node support/fake-llm.mjs PORT
import http from 'node:http';

function chunk(res, delta, finish = null) {
  const body = { id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 0, model: 'fake', choices: [{ index: 0, delta, finish_reason: finish }] };
  res.write(`data: ${JSON.stringify(body)}\n\n`);
}

const usage = { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 };

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://x');
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
    const messages = request.messages || [];
    const result = [...messages].reverse().find((m) => m.role === 'tool');
    const tools = (request.tools || []).map((t) => t.function?.name);
    const tool = tools.includes('calculator') ? 'calculator' : tools[0];
    const final = result || !tool;
    if (!request.stream) {
      const message = final
        ? { role: 'assistant', content: `The answer is ${result?.content ?? 'unknown'}.` }
        : { role: 'assistant', content: null, tool_calls: [{ id: 'call_fake_1', type: 'function', function: { name: tool, arguments: '{"expression":"6*7"}' } }] };
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ id: 'chatcmpl-fake', object: 'chat.completion', created: 0, model: 'fake', choices: [{ index: 0, message, finish_reason: final ? 'stop' : 'tool_calls' }], usage }));
      return;
    }
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
    if (final) {
      chunk(res, { role: 'assistant', content: '' });
      for (const piece of ['The answer ', 'is ', `${result?.content ?? 'unknown'}.`]) chunk(res, { content: piece });
      chunk(res, {}, 'stop');
    } else {
      chunk(res, { role: 'assistant', content: null, tool_calls: [{ index: 0, id: 'call_fake_1', type: 'function', function: { name: tool, arguments: '' } }] });
      chunk(res, { tool_calls: [{ index: 0, function: { arguments: '{"expression":' } }] });
      chunk(res, { tool_calls: [{ index: 0, function: { arguments: '"6*7"}' } }] });
      chunk(res, {}, 'tool_calls');
    }
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

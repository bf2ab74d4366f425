// Step -> viewer latency of the front-end streams against the native event stream, on a running
// server: VIEWERS clients of a protocol (native `GET /v1/sessions/{id}/events`, the AI SDK's
// `GET /v1/ai-sdk/chat/{id}/stream`, AG-UI's `POST /v1/ag-ui/connect`) watch one session whose
// external execution gets STEPS steps (POST /v1/executions/{id}/steps, one at a time,
// INTERVAL_MS apart); each step's arrival at each viewer is timed from the moment its POST was
// sent. MODE=separate (default): a round per protocol, the protocols in turn, ROUNDS times;
// MODE=together: the viewers of all three watch the same session at once. Prints p50/p90/p99
// per protocol and the p50 overhead of the AI SDK and AG-UI streams over the native one.
//   node tests/frontends/bench/fanout.mjs http://127.0.0.1:PORT   (VIEWERS=100 STEPS=100 INTERVAL_MS=20 ROUNDS=3)
// Start the server with `--rate-limit-per-sec 0` (and no SSE limits: the defaults are 2000 a session).
const base = (process.argv[2] || process.env.STEPWISE_URL || '').replace(/\/$/, '');
if (!base) {
  console.error('usage: node bench/fanout.mjs http://127.0.0.1:PORT');
  process.exit(2);
}
const VIEWERS = Number(process.env.VIEWERS || 100);
const STEPS = Number(process.env.STEPS || 100);
const INTERVAL_MS = Number(process.env.INTERVAL_MS || 20);
const ROUNDS = Number(process.env.ROUNDS || 3);
// `together`: the viewers of every protocol watch the same session at once; `separate`: a
// round per protocol (VIEWERS viewers of that protocol alone), the protocols in turn.
const MODE = process.env.MODE || 'separate';
const headers = { 'content-type': 'application/json', ...(process.env.STEPWISE_API_KEY ? { authorization: `Bearer ${process.env.STEPWISE_API_KEY}` } : {}) };

async function post(path, body) {
  const r = await fetch(base + path, { method: 'POST', headers, body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`);
  return r.json();
}

/** How each protocol's viewer connects, and which step a data line announces (or null). */
const PROTOCOLS = {
  native: {
    marker: '"step.completed"',
    open: (s) => fetch(`${base}/v1/sessions/${s.id}/events`, { headers }),
    step: (d) => (d.event_type === 'step.completed' ? d.metadata.step_number : null),
  },
  'ai-sdk': {
    marker: '"tool-input-available"',
    open: (s) => fetch(`${base}/v1/ai-sdk/chat/${s.id}/stream`, { headers }),
    step: (d) => (d.type === 'tool-input-available' ? Number(d.toolCallId.slice(1)) : null),
  },
  'ag-ui': {
    marker: '"TOOL_CALL_START"',
    open: (s) => fetch(`${base}/v1/ag-ui/connect`, { method: 'POST', headers, body: JSON.stringify({ threadId: s.id, runId: 'bench', messages: [] }) }),
    step: (d) => (d.type === 'TOOL_CALL_START' ? Number(d.toolCallId.slice(1)) : null),
  },
};

/** Reads one viewer's stream; calls seen(step, at) for each step it announces. */
async function watch(response, protocol, seen, signal) {
  const reader = response.body.getReader();
  signal.addEventListener('abort', () => reader.cancel().catch(() => {}), { once: true });
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      const at = performance.now();
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        for (const line of frame.split('\n')) {
          // Only the lines that can announce a step are parsed, so the client's work is
          // about the same whatever the protocol.
          if (!line.startsWith('data: ') || !line.includes(protocol.marker)) continue;
          const step = protocol.step(JSON.parse(line.slice(6)));
          if (step !== null) seen(step, at);
        }
      }
    }
  } catch {
    // cancelled
  }
}

/**
 * One round: VIEWERS viewers of each protocol watch the same session at once (connected in
 * turn: native, AI SDK, AG-UI, native...), so every step reaches all of them from the same
 * POST and the protocols are compared on the same steps, whatever else the machine does.
 */
async function round(names = Object.keys(PROTOCOLS)) {
  const session = await post('/v1/sessions', {});
  const execution = await post(`/v1/sessions/${session.id}/executions`, { agent_type: 'external', input: {} });
  const step = (n) => post(`/v1/executions/${execution.id}/steps`, { step_number: n, kind: 'action', model_output: `step ${n}`, tool_calls: [{ id: `c${n}`, name: 'tool', arguments: { n } }], observations: 'ok' });
  // Step 1 is a warm-up: every viewer has it before the timed steps start.
  await step(1);
  const arrivals = Object.fromEntries(names.map((name) => [name, new Map()]));
  const total = VIEWERS * names.length;
  let warm = 0;
  let warmed;
  const allWarm = new Promise((r) => { warmed = r; });
  const controller = new AbortController();
  (await import('node:events')).setMaxListeners(total + 10, controller.signal);
  const viewers = [];
  for (let v = 0; v < VIEWERS; v++) {
    for (const name of names) {
      const protocol = PROTOCOLS[name];
      const response = await protocol.open(session);
      if (response.status !== 200) throw new Error(`${name}: ${response.status} ${await response.text()}`);
      viewers.push(watch(response, protocol, (n, at) => {
        if (n === 1) {
          warm += 1;
          if (warm === total) warmed();
          return;
        }
        arrivals[name].get(n)?.push(at);
      }, controller.signal));
    }
  }
  await allWarm;
  const sent = new Map();
  for (let n = 2; n <= STEPS + 1; n++) {
    for (const name of names) arrivals[name].set(n, []);
    sent.set(n, performance.now());
    await step(n);
    await new Promise((r) => setTimeout(r, INTERVAL_MS));
  }
  const deadline = Date.now() + 30000;
  const missing = () => names.some((name) => [...arrivals[name].values()].some((a) => a.length < VIEWERS));
  while (missing() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  controller.abort();
  await post(`/v1/executions/${execution.id}/complete`, { output: null });
  await Promise.all(viewers);
  const samples = Object.fromEntries(names.map((name) => [name, []]));
  for (const name of names) {
    for (const [n, list] of arrivals[name]) for (const at of list) samples[name].push(at - sent.get(n));
  }
  return samples;
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

const all = { native: [], 'ai-sdk': [], 'ag-ui': [] };
for (let r = 0; r < ROUNDS; r++) {
  const groups = MODE === 'together' ? [Object.keys(all)] : Object.keys(all).map((name) => [name]);
  for (const names of groups) {
    const samples = await round(names);
    for (const name of names) all[name].push(...samples[name]);
  }
}
const report = { benchmark: 'frontends-fanout', mode: MODE, url: base, viewers: VIEWERS, steps: STEPS, interval_ms: INTERVAL_MS, rounds: ROUNDS, latency_ms: {} };
for (const [name, samples] of Object.entries(all)) {
  const sorted = [...samples].sort((a, b) => a - b);
  report.latency_ms[name] = {
    samples: sorted.length,
    expected: VIEWERS * STEPS * ROUNDS,
    p50: +percentile(sorted, 50).toFixed(2),
    p90: +percentile(sorted, 90).toFixed(2),
    p99: +percentile(sorted, 99).toFixed(2),
  };
}
const native = report.latency_ms.native.p50;
report.p50_overhead_pct = {
  'ai-sdk': +(((report.latency_ms['ai-sdk'].p50 - native) / native) * 100).toFixed(1),
  'ag-ui': +(((report.latency_ms['ag-ui'].p50 - native) / native) * 100).toFixed(1),
};
console.log(JSON.stringify(report, null, 2));

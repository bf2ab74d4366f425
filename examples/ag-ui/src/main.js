// A minimal page on a Stepwise session with AG-UI's HttpAgent: the thread is the session
// (`?thread=<name>` in the URL, a new name otherwise). Each message runs POST /v1/ag-ui; a run
// that ends with an interrupt (the agent asks) is answered by the next message, sent as the
// interrupt's resume entry; on load, POST /v1/ag-ui/connect brings back the thread's messages
// and any running turn. The page asks its own backend (GET /api/token) how to reach Stepwise:
// with a token it calls the server directly as that end user (`?user=` picks the demo user);
// without one it uses /v1 on this origin, passed through to an open local server.
import { HttpAgent } from '@ag-ui/client';

const url = new URL(location.href);
const threadId = url.searchParams.get('thread') || `web-${crypto.randomUUID()}`;
if (!url.searchParams.get('thread')) {
  url.searchParams.set('thread', threadId);
  history.replaceState(null, '', url);
}

async function fetchAccess() {
  const user = url.searchParams.get('user');
  const res = await fetch(`/api/token${user ? `?user=${encodeURIComponent(user)}` : ''}`, { cache: 'no-store' });
  const body = await res.json().catch(() => null);
  if (!res.ok) throw new Error(body?.error?.message || `GET /api/token: ${res.status}`);
  return body;
}

let access;
try {
  access = await fetchAccess();
} catch (error) {
  document.getElementById('status').textContent = `Cannot reach Stepwise: ${error.message}`;
  throw error;
}
const headers = () => (access.token ? { Authorization: `Bearer ${access.token}` } : {});

const agent = new HttpAgent({ url: `${access.stepwise_url}/v1/ag-ui`, threadId, headers: headers() });
const reconnecting = new (class extends HttpAgent {
  connect(input) {
    return this.run(input);
  }
})({ url: `${access.stepwise_url}/v1/ag-ui/connect`, threadId, headers: headers() });

// Before a run: a fresh token a minute before this one expires.
async function refreshAccess() {
  if (!access.token || Date.parse(access.expires_at) - Date.now() >= 60_000) return;
  access = await fetchAccess();
  agent.headers = headers();
  reconnecting.headers = headers();
}

const list = document.getElementById('messages');
const status = document.getElementById('status');
const question = document.getElementById('question');
let interrupt = null;

function render(messages) {
  list.replaceChildren(
    ...messages.flatMap((m) => {
      const out = [];
      if (m.content) {
        const div = document.createElement('div');
        div.className = `message ${m.role}`;
        div.dataset.role = m.role;
        div.textContent = m.role === 'tool' ? `→ ${m.content}` : m.content;
        out.push(div);
      }
      for (const call of m.toolCalls ?? []) {
        const div = document.createElement('div');
        div.className = 'message tool';
        div.textContent = `${call.function.name}(${call.function.arguments})`;
        out.push(div);
      }
      return out;
    }),
  );
}

function setStatus(text) {
  status.textContent = text;
  status.dataset.status = text;
}

const subscriber = {
  onMessagesChanged: ({ messages }) => render(messages),
  onRunFinishedEvent: ({ event }) => {
    interrupt = event.outcome?.type === 'interrupt' ? event.outcome.interrupts[0] : null;
    question.hidden = !interrupt;
    question.textContent = interrupt ? `The agent asks: ${interrupt.message}` : '';
  },
};
agent.subscribe(subscriber);
reconnecting.subscribe(subscriber);

async function run(options) {
  setStatus('running');
  try {
    await refreshAccess();
    await agent.runAgent(options);
    setStatus('ready');
  } catch (error) {
    setStatus(`error: ${error.message}`);
  }
}

document.getElementById('form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const input = document.getElementById('input');
  const text = input.value.trim();
  if (!text) return;
  input.value = '';
  agent.addMessage({ id: crypto.randomUUID(), role: 'user', content: text });
  const resume = interrupt ? [{ interruptId: interrupt.id, status: 'resolved', payload: text }] : undefined;
  await run(resume ? { resume } : {});
});

// Back to a thread: its messages, and the running turn if any.
setStatus('connecting');
await reconnecting.connectAgent();
agent.setMessages(reconnecting.messages);
if (reconnecting.pendingInterrupts?.length) {
  agent.pendingInterrupts = reconnecting.pendingInterrupts;
}
setStatus('ready');

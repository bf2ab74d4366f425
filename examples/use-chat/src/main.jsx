// A minimal chat on a Stepwise session with the AI SDK's useChat: the session is the chat
// (`?chat=<name>` in the URL, a new name otherwise), every turn streams from
// POST /v1/ai-sdk/chat, and a reload resumes a running turn (GET /v1/ai-sdk/chat/{id}/stream).
// The page asks its own backend (GET /api/token) how to reach Stepwise: with a token it calls
// the server directly as that end user (`?user=` picks the demo user); without one it uses
// /v1 on this origin, passed through to an open local server.
import { useState } from 'react';
import { createRoot } from 'react-dom/client';
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport } from 'ai';

const url = new URL(location.href);
const chatId = url.searchParams.get('chat') || `web-${crypto.randomUUID()}`;
if (!url.searchParams.get('chat')) {
  url.searchParams.set('chat', chatId);
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
  document.getElementById('root').textContent = `Cannot reach Stepwise: ${error.message}`;
  throw error;
}
// Every request (a turn, a resume) asks for its headers: a fresh token a minute before this one expires.
async function authHeaders() {
  if (!access.token) return {};
  if (Date.parse(access.expires_at) - Date.now() < 60_000) access = await fetchAccess();
  return { Authorization: `Bearer ${access.token}` };
}
const transport = new DefaultChatTransport({ api: `${access.stepwise_url}/v1/ai-sdk/chat`, headers: authHeaders });

function Part({ part }) {
  if (part.type === 'text') return <span>{part.text}</span>;
  if (part.type.startsWith('tool-')) {
    const name = part.type.slice('tool-'.length);
    const result = part.state === 'output-available' ? ` → ${JSON.stringify(part.output)}` : part.state === 'output-error' ? ` ✗ ${part.errorText}` : '';
    return <div className="tool">{name}({JSON.stringify(part.input)}){result}</div>;
  }
  return null;
}

function Chat() {
  const [input, setInput] = useState('');
  const { messages, sendMessage, status, error } = useChat({
    id: chatId,
    resume: true,
    transport,
  });
  const busy = status === 'submitted' || status === 'streaming';
  return (
    <>
      {messages.map((message) => (
        <div key={message.id} className={`message ${message.role}`} data-role={message.role}>
          {message.parts.map((part, i) => <Part key={i} part={part} />)}
        </div>
      ))}
      {error && <p role="alert">{error.message}</p>}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (!input.trim()) return;
          sendMessage({ text: input });
          setInput('');
        }}
      >
        <input aria-label="Message" value={input} onChange={(e) => setInput(e.target.value)} placeholder="steps: 3, ask me, 2+3..." />
        <button disabled={busy}>Send</button>
      </form>
      <p data-status={status}>{status}</p>
    </>
  );
}

createRoot(document.getElementById('root')).render(<Chat />);

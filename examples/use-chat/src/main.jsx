// A minimal chat on a Stepwise session with the AI SDK's useChat: the session is the chat
// (`?chat=<name>` in the URL, a new name otherwise), every turn streams from
// POST /v1/ai-sdk/chat, and a reload resumes a running turn (GET /v1/ai-sdk/chat/{id}/stream).
import { useState } from 'react';
import { createRoot } from 'react-dom/client';
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport } from 'ai';

const params = new URLSearchParams(location.search);
const chatId = params.get('chat') || `web-${crypto.randomUUID()}`;
if (!params.get('chat')) history.replaceState(null, '', `?chat=${chatId}`);

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
    transport: new DefaultChatTransport({ api: '/v1/ai-sdk/chat' }),
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

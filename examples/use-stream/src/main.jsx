// A minimal chat on Stepwise's LangGraph Server API with LangGraph's own React hook, useStream:
// the assistant is a graph a worker serves (`?assistant=<name>`, default "chat"), the thread is
// a Stepwise session (its id kept in the URL as `?threadId=`), every turn streams from
// POST /langgraph/threads/{id}/runs/stream, an `interrupt()` in the graph is shown with an
// Approve button that resumes it, and a reload while a run is going rejoins its stream
// (`reconnectOnMount`: the run's id is kept in sessionStorage until it ends).
import { useState } from 'react';
import { createRoot } from 'react-dom/client';
import { useStream } from '@langchain/langgraph-sdk/react';

const url = new URL(location.href);
const assistantId = url.searchParams.get('assistant') || 'chat';
// /langgraph on this origin: serve.mjs passes it through to Stepwise.
const apiUrl = new URL('/langgraph', location.origin).href;

function text(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((part) => (typeof part === 'string' ? part : part?.text ?? '')).join('');
  return JSON.stringify(content);
}

function question(interrupt) {
  const value = Array.isArray(interrupt) ? interrupt[0]?.value : interrupt?.value;
  if (value && typeof value === 'object' && typeof value.question === 'string') return value.question;
  return JSON.stringify(value ?? interrupt);
}

function Chat() {
  const [threadId, setThreadId] = useState(url.searchParams.get('threadId'));
  const [input, setInput] = useState('');
  const stream = useStream({
    apiUrl,
    assistantId,
    messagesKey: 'messages',
    threadId,
    onThreadId: (id) => {
      setThreadId(id);
      const next = new URL(location.href);
      next.searchParams.set('threadId', id);
      history.replaceState(null, '', next);
    },
    reconnectOnMount: true,
    // With onFinish, useStream fetches the thread's state again when a run ends (it does not
    // otherwise): an interrupt shown from the state after a reload goes once it is answered.
    onFinish: () => {},
  });
  const busy = stream.isLoading;
  return (
    <>
      <p className="meta">Assistant <code>{assistantId}</code>{threadId ? <>, thread <code>{threadId}</code></> : null}</p>
      {stream.messages.map((message, i) => (
        <div key={message.id ?? i} className={`message ${message.type}`} data-type={message.type}>
          {text(message.content)}
        </div>
      ))}
      {stream.interrupt && !busy && (
        <div className="interrupt" role="dialog" aria-label="Interrupt">
          <p id="question">{question(stream.interrupt)}</p>
          <button type="button" onClick={() => stream.submit(undefined, { command: { resume: 'yes' } })}>Approve</button>
        </div>
      )}
      {stream.error && <p role="alert">{stream.error.message ?? String(stream.error)}</p>}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (!input.trim() || busy) return;
          stream.submit({ messages: [{ type: 'human', content: input }] });
          setInput('');
        }}
      >
        <input aria-label="Message" value={input} onChange={(e) => setInput(e.target.value)} placeholder="Say something" />
        <button disabled={busy}>Send</button>
      </form>
      <p className="meta" data-status={busy ? 'streaming' : 'ready'}>{busy ? 'streaming' : 'ready'}</p>
    </>
  );
}

createRoot(document.getElementById('root')).render(<Chat />);

// What the server's metadata says about a run's lines: the step a status line or step event
// belongs to, the tool it called and the step's kind. The engine puts these keys on its info
// messages (and on their `message.created` events, beside `role`), so the page never has to
// guess them from the text. Pure functions, so Node can test them.

/**
 * `{number, tool, kind}` from a message's or event's metadata: `step_number`, `tool` and
 * `kind`, each null when absent or not of the expected type.
 */
export function stepOf(metadata) {
  const m = metadata && typeof metadata === 'object' ? metadata : {};
  return {
    number: Number.isInteger(m.step_number) && m.step_number >= 0 ? m.step_number : null,
    tool: typeof m.tool === 'string' && m.tool !== '' ? m.tool : null,
    kind: typeof m.kind === 'string' && m.kind !== '' ? m.kind : null,
  };
}

// Kinds of a stored step that are not steps the agent took: the count of "N steps" leaves
// them out (the final answer shows as the answer, the user's answer as their message).
const NOT_AGENT_STEPS = new Set(['final_answer', 'user_input', 'task', 'system_prompt']);

/** Whether a step of this kind counts as one of the agent's steps (an unknown kind does). */
export function isAgentStep(kind) {
  return !NOT_AGENT_STEPS.has(kind);
}

const LINE_TEXT_MAX = 160;

/**
 * The line shown for a stored Step (a worker's or an external agent's, which write no status
 * line of their own), worded like the built-in agents' lines: "Step 2: called echo · Echoing
 * it", "Step 3: final answer". The first line of `model_output`, cut to a readable length.
 */
export function stepLineText(step) {
  const s = step && typeof step === 'object' ? step : {};
  const head = Number.isInteger(s.step_number) ? `Step ${s.step_number}` : 'Step';
  if (s.kind === 'final_answer') return `${head}: final answer`;
  if (s.kind === 'user_input') return `${head}: the user's answer`;
  const parts = [];
  const tools = (Array.isArray(s.tool_calls) ? s.tool_calls : [])
    .map((c) => c && typeof c.name === 'string' ? c.name : '').filter(Boolean);
  if (tools.length) parts.push(`called ${tools.join(', ')}`);
  const said = typeof s.model_output === 'string' ? s.model_output.trim().split('\n')[0].trim() : '';
  if (said) parts.push(said.length > LINE_TEXT_MAX ? `${said.slice(0, LINE_TEXT_MAX - 1)}…` : said);
  if (s.error && typeof s.error.message === 'string') parts.push(`failed: ${s.error.message}`);
  return parts.length ? `${head}: ${parts.join(' · ')}` : head;
}

/**
 * The message a live `message.created` event of a status line describes, shaped like one from
 * `GET /v1/sessions/{id}/messages`: the event's metadata becomes the message's, minus `role`
 * (which the event carries there because it has no field of its own for it).
 */
export function messageFromEvent(data) {
  const { role, ...metadata } = data.metadata && typeof data.metadata === 'object' ? data.metadata : {};
  return {
    id: data.message_id,
    session_id: data.session_id,
    role,
    content: data.content || '',
    execution_id: data.execution_id,
    related_type: null,
    related_id: null,
    context_url: null,
    metadata,
    created_at: data.timestamp,
  };
}

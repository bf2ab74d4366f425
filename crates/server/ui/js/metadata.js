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

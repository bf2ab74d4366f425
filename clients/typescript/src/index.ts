/**
 * `@stepwise/client`: the Stepwise HTTP API (docs/api.md) for TypeScript, in browsers and
 * Node 20+. One method per endpoint, the API's own types (generated from the server's
 * `/openapi.json` into `schema.gen.ts`), list iterators that follow `next_cursor`, one error
 * class, and `events()`: a session's event stream that reconnects with `Last-Event-ID`, with no
 * gap and no duplicate. No runtime dependency beyond the platform's `fetch` (on Node, a
 * `unix:PATH` base URL reaches a server on a Unix socket through `node:http`, loaded only then).
 */

import type {
  AgentBody,
  AgentLineBody,
  AgentList,
  Limits,
  AppendItemsBody,
  ChatBody,
  CheckpointPage,
  CheckpointStored,
  CheckpointTuple,
  CheckpointsDeleted,
  ClaimBody,
  ClaimList,
  CompleteBody,
  CopyThreadBody,
  CreateKeyBody,
  CreateSessionBody,
  CreatedKey,
  DeleteForRunsBody,
  Event,
  Execution,
  ExecutionList,
  ForkBody,
  FailBody,
  HeartbeatAnswer,
  HeartbeatBody,
  ItemsAdded,
  ItemsCleared,
  ItemsPage,
  KeyList,
  Memory,
  Message,
  MessageAccepted,
  MessageBody,
  MessageList,
  MintTokenBody,
  MintedToken,
  NewSessionMessageBody,
  OpenExecutionBody,
  OpenedExecution,
  PauseBody,
  PopItemBody,
  PoppedItem,
  PruneBody,
  PutCheckpointBody,
  PutWritesBody,
  Retention,
  RetentionBody,
  Role,
  RunAgentInput,
  Session,
  SessionDocument,
  SessionList,
  SessionStatus,
  Snapshot,
  SnapshotInput,
  SnapshotList,
  Step,
  StepInput,
  StepList,
  StepsAppended,
  Thread,
  ThreadCopied,
  UpdateSessionBody,
} from './schema.gen.js';

export type * from './schema.gen.js';
export { OPERATIONS } from './schema.gen.js';
export type { OperationId } from './schema.gen.js';

/** What the client needs to reach a server. */
export interface ClientOptions {
  /**
   * The server, e.g. `http://127.0.0.1:8420` (no trailing `/v1`), or on Node a Unix socket:
   * `unix:/path/to/stepwise.sock` (`unix:PATH`, the path absolute or relative to the working
   * directory; `stepwise serve --listen unix:PATH`).
   */
  baseUrl: string;
  /** An API key, sent as `Authorization: Bearer <key>` on `/v1` paths. */
  apiKey?: string;
  /**
   * An end user's token ({@link Stepwise.createToken}): the same as `apiKey` (both are the
   * bearer credential), for code that holds a token. Give one of the two.
   */
  token?: string;
  /** Headers added to every request. */
  headers?: Record<string, string>;
  /**
   * The `fetch` to use (default: the platform's; with a `unix:` base URL, one over `node:http`
   * to the socket). A given `fetch` is used for `unix:` too: it gets `http://localhost/...` URLs
   * and must reach the socket itself.
   */
  fetch?: typeof fetch;
  /** How long `events()` waits before reconnecting after a dropped stream, at first (ms, default 200; doubles up to 5 s). */
  reconnectDelayMs?: number;
}

/**
 * Every error the API answers (`{error: {code, message, field}}` with its HTTP status), and
 * network failures (status 0, code `network_error`).
 */
export class StepwiseError extends Error {
  /** The API's snake_case code: `invalid_request`, `not_found`, `conflict`... */
  readonly code: string;
  /** The HTTP status (0 when no answer came). */
  readonly status: number;
  /** The request field the error is about, when the API names one. */
  readonly field: string | null;
  /** The server's request id (`x-request-id`), for its logs. */
  readonly requestId: string | null;
  /** Seconds to wait before retrying (`Retry-After` of a 429 or 503). */
  readonly retryAfter: number | null;

  constructor(init: { status: number; code: string; message: string; field?: string | null; requestId?: string | null; retryAfter?: number | null }) {
    super(init.message);
    this.name = 'StepwiseError';
    this.status = init.status;
    this.code = init.code;
    this.field = init.field ?? null;
    this.requestId = init.requestId ?? null;
    this.retryAfter = init.retryAfter ?? null;
  }
}

/** A page of a list. */
export interface Page<T> {
  items: T[];
  /** The next page's cursor; `null` on the last page. */
  next_cursor?: string | null;
}

/** `limit` (1–500) and `cursor` of a list. */
export interface PageQuery {
  limit?: number;
  cursor?: string;
}

export interface ListSessionsQuery extends PageQuery {
  /** One or more statuses (default: all but `deleted`). */
  status?: SessionStatus | SessionStatus[];
  /** The session of that name (or none). */
  name?: string;
  related_type?: string;
  related_id?: string;
  /** One end user's sessions (an admin's filter; a user's own credential sees only its own). */
  user_id?: string;
}

export interface ListMessagesQuery extends PageQuery {
  /** Only messages after this message id. */
  after?: string;
  roles?: Role | Role[];
}

export interface CheckpointQuery {
  checkpoint_ns?: string;
  /** Blob versions the caller already holds (`channel:version`...), not sent again. */
  have?: string | string[];
}

export interface ListCheckpointsQuery {
  checkpoint_ns?: string;
  /** Only checkpoints before this checkpoint id. */
  before?: string;
  limit?: number;
  cursor?: string;
  /** A JSON object the checkpoints' metadata must contain. */
  filter?: Record<string, unknown> | string;
}

/** A stored event (`id` its position in the session) or a live-only `message.delta` (`id` null). */
export type SessionEvent = Event & { id: number | null };

export interface EventsOptions {
  /** Start after this event id (default: from the first event). */
  after?: number;
  /** `'step'`: each `step.completed` event carries the whole Step in `metadata.step`. */
  include?: 'step';
  /** Ends the iteration (and the connection) when aborted. */
  signal?: AbortSignal;
}

/**
 * The lease of a worker's claim, for the writes of the execution it claimed (docs/workers.md).
 * Without it, a write to a worker's execution is 409 `lease_lost`.
 */
export interface LeaseOptions {
  /** The claim's `lease`, sent as the `Stepwise-Lease` header. */
  lease?: string;
}

/** A part of an AI SDK UI message stream, or an AG-UI event: a JSON object with a `type`. */
export type StreamPart = { type: string; [key: string]: unknown };

type Query = Record<string, string | number | boolean | string[] | undefined | null>;

interface Call {
  method: string;
  path: string;
  query?: Query;
  body?: unknown;
  headers?: Record<string, string>;
  signal?: AbortSignal | undefined;
}

function enc(segment: string): string {
  return encodeURIComponent(segment);
}

/** The `Stepwise-Lease` header of a worker's write, when it has a lease. */
function leaseHeaders(lease: string | undefined): Record<string, string> | undefined {
  return lease === undefined ? undefined : { 'stepwise-lease': lease };
}

/**
 * The Stepwise API. Every method answers what its endpoint answers, or throws a {@link StepwiseError}.
 *
 * `baseUrl` is the server's `http(s)://` URL, or on Node its Unix socket, `unix:PATH`
 * (`new Stepwise({ baseUrl: 'unix:/run/stepwise/stepwise.sock' })`, for `stepwise serve --listen
 * unix:PATH`): every call, the event stream and its reconnects included, then goes over the
 * socket with `node:http` (imported on the first call, so browsers and bundlers never load it).
 * In a browser a `unix:` base URL is a `TypeError`, unless `fetch` is given (which then gets
 * `http://localhost/...` URLs and reaches the socket itself).
 */
export class Stepwise {
  /** The `baseUrl` given, less trailing slashes (a `unix:` one as given). */
  readonly baseUrl: string;
  /** What request URLs start with: `baseUrl`, or `http://localhost` for a Unix socket. */
  private readonly origin: string;
  /** The bearer credential: `apiKey` or `token`. */
  private readonly credential: string | undefined;
  private readonly headers: Record<string, string>;
  private readonly fetchImpl: typeof fetch;
  private readonly reconnectDelayMs: number;

  constructor(options: ClientOptions) {
    const socketPath = typeof options?.baseUrl === 'string' && options.baseUrl.startsWith('unix:') ? options.baseUrl.slice('unix:'.length) : null;
    if (!options || typeof options.baseUrl !== 'string' || (socketPath === null && !/^https?:\/\//.test(options.baseUrl))) {
      throw new TypeError('Stepwise: baseUrl must be an http(s) URL, e.g. http://127.0.0.1:8420, or a Unix socket, unix:/path/to/stepwise.sock');
    }
    if (socketPath === '') {
      throw new TypeError('Stepwise: a unix: baseUrl names the socket: unix:/path/to/stepwise.sock');
    }
    if (socketPath !== null && !options.fetch && !isNode()) {
      throw new TypeError('Stepwise: a unix: baseUrl (a Unix socket) needs Node; in a browser, give the server\'s http(s) URL');
    }
    if (options.apiKey !== undefined && options.token !== undefined) {
      throw new TypeError('Stepwise: give apiKey or token, not both (each is the credential sent as Authorization: Bearer)');
    }
    this.baseUrl = socketPath === null ? options.baseUrl.replace(/\/+$/, '') : options.baseUrl;
    this.origin = socketPath === null ? this.baseUrl : 'http://localhost';
    this.credential = options.apiKey ?? options.token;
    this.headers = { ...(options.headers ?? {}) };
    this.fetchImpl = options.fetch ?? (socketPath === null ? globalThis.fetch.bind(globalThis) : unixFetch(socketPath));
    this.reconnectDelayMs = options.reconnectDelayMs ?? 200;
  }

  // --- the transport -----------------------------------------------------------------

  private url(path: string, query?: Query): string {
    const search = new URLSearchParams();
    for (const [key, value] of Object.entries(query ?? {})) {
      if (value === undefined || value === null) continue;
      search.set(key, Array.isArray(value) ? value.join(',') : String(value));
    }
    const text = search.toString();
    return `${this.origin}${path}${text ? `?${text}` : ''}`;
  }

  private async send(call: Call): Promise<Response> {
    const headers: Record<string, string> = { ...this.headers, ...(call.headers ?? {}) };
    if (this.credential && call.path.startsWith('/v1')) headers.authorization = `Bearer ${this.credential}`;
    let body: string | undefined;
    if (call.body !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(call.body);
    }
    let response: Response;
    try {
      response = await this.fetchImpl(this.url(call.path, call.query), { method: call.method, headers, body, signal: call.signal ?? null });
    } catch (error) {
      if (call.signal?.aborted) throw error;
      throw new StepwiseError({ status: 0, code: 'network_error', message: `${call.method} ${call.path}: ${(error as Error)?.message ?? String(error)}` });
    }
    if (!response.ok) throw await errorOf(response, call);
    return response;
  }

  private async json<T>(call: Call): Promise<T> {
    const response = await this.send(call);
    return (await response.json()) as T;
  }

  private async none(call: Call): Promise<void> {
    const response = await this.send(call);
    await response.body?.cancel();
  }

  /** Every item of a list, page after page (following `next_cursor`). */
  private async *pages<T>(load: (cursor: string | undefined) => Promise<Page<T>>, first?: string): AsyncGenerator<T, void, undefined> {
    let cursor = first;
    for (;;) {
      const page = await load(cursor);
      yield* page.items;
      if (!page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  // --- sessions ----------------------------------------------------------------------

  /**
   * `POST /v1/sessions` (every field optional). `agent: {type, config?}` is the session's default
   * agent: a message that names none runs with it (a built-in type, or a worker's from {@link agents}).
   */
  createSession(body: CreateSessionBody = {}): Promise<Session> {
    return this.json({ method: 'POST', path: '/v1/sessions', body });
  }

  /** `GET /v1/sessions`: one page, newest `updated_at` first. */
  listSessions(query: ListSessionsQuery = {}): Promise<SessionList> {
    return this.json({ method: 'GET', path: '/v1/sessions', query: { ...query } as Query });
  }

  /** Every session of `GET /v1/sessions`, following `next_cursor`. */
  sessions(query: Omit<ListSessionsQuery, 'cursor'> = {}): AsyncGenerator<Session, void, undefined> {
    return this.pages((cursor) => this.listSessions({ ...query, ...(cursor ? { cursor } : {}) }));
  }

  /** `GET /v1/sessions/{id}` */
  getSession(id: string): Promise<Session> {
    return this.json({ method: 'GET', path: `/v1/sessions/${enc(id)}` });
  }

  /**
   * `PATCH /v1/sessions/{id}`: the fields to change (absent: unchanged); `agent: null` drops the
   * session's default agent, `agent: {type, config?}` sets it.
   */
  updateSession(id: string, body: UpdateSessionBody): Promise<Session> {
    return this.json({ method: 'PATCH', path: `/v1/sessions/${enc(id)}`, body });
  }

  /** `DELETE /v1/sessions/{id}` (a soft delete). */
  deleteSession(id: string): Promise<void> {
    return this.none({ method: 'DELETE', path: `/v1/sessions/${enc(id)}` });
  }

  /** `GET /v1/sessions/{id}/messages`: one page, oldest first. */
  listMessages(sessionId: string, query: ListMessagesQuery = {}): Promise<MessageList> {
    return this.json({ method: 'GET', path: `/v1/sessions/${enc(sessionId)}/messages`, query: { ...query } as Query });
  }

  /** Every message of a session, following `next_cursor`. */
  messages(sessionId: string, query: Omit<ListMessagesQuery, 'cursor'> = {}): AsyncGenerator<Message, void, undefined> {
    return this.pages((cursor) => this.listMessages(sessionId, { ...query, ...(cursor ? { cursor } : {}) }));
  }

  /**
   * `POST /v1/sessions/{id}/messages`: answers a paused execution, or queues a new one. While
   * the session is busy, `on_busy` says what happens: `enqueue` (default), `reject` (409
   * `session_busy`), `interrupt` (the busy run cancelled and kept) or `rollback` (removed).
   */
  postMessage(sessionId: string, body: MessageBody): Promise<MessageAccepted> {
    return this.json({ method: 'POST', path: `/v1/sessions/${enc(sessionId)}/messages`, body });
  }

  /** `POST /v1/messages`: a message that creates its session. */
  postMessageNewSession(body: NewSessionMessageBody): Promise<MessageAccepted> {
    return this.json({ method: 'POST', path: '/v1/messages', body });
  }

  /** `GET /v1/sessions/{id}/memory` */
  memory(sessionId: string): Promise<Memory> {
    return this.json({ method: 'GET', path: `/v1/sessions/${enc(sessionId)}/memory` });
  }

  /** `GET /v1/sessions/{id}/executions`: one page. */
  listExecutions(sessionId: string, query: PageQuery = {}): Promise<ExecutionList> {
    return this.json({ method: 'GET', path: `/v1/sessions/${enc(sessionId)}/executions`, query: { ...query } });
  }

  /** Every execution of a session, following `next_cursor`. */
  executions(sessionId: string, query: Omit<PageQuery, 'cursor'> = {}): AsyncGenerator<Execution, void, undefined> {
    return this.pages((cursor) => this.listExecutions(sessionId, { ...query, ...(cursor ? { cursor } : {}) }));
  }

  /**
   * `POST /v1/sessions/{id}/executions`: with `agent_type: 'external'`, a running execution the
   * caller drives itself; with a worker's agent type, a pending execution that type's workers
   * claim (e.g. a worker agent's subagent, with `parent_execution_id`). An external one comes
   * with its `lease` and `heartbeat_interval_s`: send the lease with its writes (the
   * `Stepwise-Lease` header) and heartbeat it while writing nothing, or the server fails it
   * when the lease runs out ("its recorder stopped"); `lease: false` opens one without.
   */
  openExecution(sessionId: string, body: OpenExecutionBody): Promise<OpenedExecution> {
    return this.json({ method: 'POST', path: `/v1/sessions/${enc(sessionId)}/executions`, body });
  }

  /** `GET /v1/sessions/{id}/export`: the session document. */
  exportSession(sessionId: string): Promise<SessionDocument> {
    return this.json({ method: 'GET', path: `/v1/sessions/${enc(sessionId)}/export` });
  }

  /**
   * `POST /v1/sessions/{id}/fork`: a new session holding this one up to a point (after
   * `execution_id`, the latest when absent; at its step `step_number` when given), its agent
   * memory restoring exactly there; the original is untouched.
   */
  forkSession(sessionId: string, body: ForkBody = {}): Promise<Session> {
    return this.json({ method: 'POST', path: `/v1/sessions/${enc(sessionId)}/fork`, body });
  }

  /** `POST /v1/sessions/import`: a session document (or a legacy session file). */
  importSession(document: SessionDocument | Record<string, unknown>): Promise<Session> {
    return this.json({ method: 'POST', path: '/v1/sessions/import', body: document });
  }

  // --- the event stream ----------------------------------------------------------------

  /**
   * `GET /v1/sessions/{id}/events`: every event of the session from `after` on, then live
   * ones, for as long as the caller iterates. A dropped connection (or a server restart) is
   * reconnected with `Last-Event-ID`: no stored event is missed or repeated. Live-only
   * `message.delta` events (`id` null) sent while disconnected are not replayed. Ends when
   * `signal` aborts or the caller stops iterating; an API error (404, 401...) is thrown.
   */
  async *events(sessionId: string, options: EventsOptions = {}): AsyncGenerator<SessionEvent, void, undefined> {
    const { signal } = options;
    let last = options.after ?? null;
    let delay = this.reconnectDelayMs;
    while (!signal?.aborted) {
      const controller = new AbortController();
      const stop = () => controller.abort();
      signal?.addEventListener('abort', stop, { once: true });
      try {
        let response: Response;
        try {
          response = await this.send({
            method: 'GET',
            path: `/v1/sessions/${enc(sessionId)}/events`,
            ...(options.include ? { query: { include: options.include } } : {}),
            headers: { accept: 'text/event-stream', ...(last !== null ? { 'last-event-id': String(last) } : {}) },
            signal: controller.signal,
          });
        } catch (error) {
          if (signal?.aborted) return;
          // The API said no (a 4xx other than a rate limit): that does not get better.
          if (error instanceof StepwiseError && error.status >= 400 && error.status < 500 && error.status !== 429 && error.status !== 408) throw error;
          await sleep(error instanceof StepwiseError && error.retryAfter ? error.retryAfter * 1000 : delay, signal);
          delay = Math.min(delay * 2, 5000);
          continue;
        }
        delay = this.reconnectDelayMs;
        try {
          for await (const frame of sseFrames(response.body, controller.signal)) {
            if (!frame.data) continue;
            const id = frame.id !== undefined && /^\d+$/.test(frame.id) ? Number(frame.id) : null;
            if (id !== null) {
              if (last !== null && id <= last) continue;
              last = id;
            }
            const data = JSON.parse(frame.data) as Event;
            yield { ...data, id };
          }
        } catch (error) {
          if (signal?.aborted) return;
          // A dropped connection: reconnect below.
        }
      } finally {
        signal?.removeEventListener('abort', stop);
        controller.abort();
      }
      if (signal?.aborted) return;
      await sleep(delay, signal);
    }
  }

  // --- executions, steps, snapshots --------------------------------------------------------

  /** `GET /v1/executions/{id}` */
  getExecution(id: string): Promise<Execution> {
    return this.json({ method: 'GET', path: `/v1/executions/${enc(id)}` });
  }

  /** `POST /v1/executions/{id}/cancel` (409 when already finished). */
  cancelExecution(id: string): Promise<Execution> {
    return this.json({ method: 'POST', path: `/v1/executions/${enc(id)}/cancel` });
  }

  /** `GET /v1/executions/{id}/steps`: one page, by step number. */
  listSteps(executionId: string, query: PageQuery = {}): Promise<StepList> {
    return this.json({ method: 'GET', path: `/v1/executions/${enc(executionId)}/steps`, query: { ...query } });
  }

  /** Every step of an execution, following `next_cursor`. */
  steps(executionId: string, query: Omit<PageQuery, 'cursor'> = {}): AsyncGenerator<Step, void, undefined> {
    return this.pages((cursor) => this.listSteps(executionId, { ...query, ...(cursor ? { cursor } : {}) }));
  }

  /**
   * `POST /v1/executions/{id}/steps`: an external agent's step (idempotent by `step_number`).
   * A worker sends its claim's `lease`.
   */
  appendStep(executionId: string, step: StepInput, options: LeaseOptions = {}): Promise<Step> {
    return this.json({ method: 'POST', path: `/v1/executions/${enc(executionId)}/steps`, body: step, headers: leaseHeaders(options.lease) });
  }

  /**
   * `POST /v1/executions/{id}/steps/batch`: 1 to 1,000 steps saved in order with one durable
   * commit. A step without `step_number` takes the number after the one before it; each is
   * idempotent as with {@link appendStep}, and another body at a stored number is a 409 that
   * stops the batch there (the steps before it are saved). A worker sends its claim's `lease`.
   */
  appendSteps(executionId: string, steps: StepInput[], options: LeaseOptions = {}): Promise<StepsAppended> {
    return this.json({ method: 'POST', path: `/v1/executions/${enc(executionId)}/steps/batch`, body: { steps }, headers: leaseHeaders(options.lease) });
  }

  /** `GET /v1/executions/{id}/snapshots`: one page (without `state`). */
  listSnapshots(executionId: string, query: PageQuery = {}): Promise<SnapshotList> {
    return this.json({ method: 'GET', path: `/v1/executions/${enc(executionId)}/snapshots`, query: { ...query } });
  }

  /** Every snapshot of an execution, following `next_cursor`. */
  snapshots(executionId: string, query: Omit<PageQuery, 'cursor'> = {}): AsyncGenerator<Snapshot, void, undefined> {
    return this.pages((cursor) => this.listSnapshots(executionId, { ...query, ...(cursor ? { cursor } : {}) }));
  }

  /** `POST /v1/executions/{id}/snapshots`. A worker sends its claim's `lease`. */
  saveSnapshot(executionId: string, body: SnapshotInput, options: LeaseOptions = {}): Promise<Snapshot> {
    return this.json({ method: 'POST', path: `/v1/executions/${enc(executionId)}/snapshots`, body, headers: leaseHeaders(options.lease) });
  }

  /**
   * `POST /v1/executions/{id}/complete`: `final_message` (or `output` when it is a string) becomes
   * the assistant's message. A worker sends its claim's `lease`.
   */
  completeExecution(executionId: string, body: CompleteBody, options: LeaseOptions = {}): Promise<Execution> {
    return this.json({ method: 'POST', path: `/v1/executions/${enc(executionId)}/complete`, body, headers: leaseHeaders(options.lease) });
  }

  /**
   * `POST /v1/executions/{id}/fail`. With `retry: true` a worker's execution goes back to the
   * queue (the next claim continues from its saved steps) while the server's attempt limit
   * allows. A worker sends its claim's `lease`.
   */
  failExecution(executionId: string, body: FailBody, options: LeaseOptions = {}): Promise<Execution> {
    return this.json({ method: 'POST', path: `/v1/executions/${enc(executionId)}/fail`, body, headers: leaseHeaders(options.lease) });
  }

  /**
   * `POST /v1/executions/{id}/pause`: asks the user `question`. A worker sends its claim's
   * `lease`, which the pause releases: the user's answer queues the execution again, and the
   * next claim carries it as `resume_answer`.
   */
  pauseExecution(executionId: string, body: PauseBody, options: LeaseOptions = {}): Promise<Execution> {
    return this.json({ method: 'POST', path: `/v1/executions/${enc(executionId)}/pause`, body, headers: leaseHeaders(options.lease) });
  }

  /**
   * `POST /v1/executions/{id}/messages`: an `info` or `notification` line of the agent in its
   * session, shown and streamed like the engine's own info lines (a worker passes its `lease`).
   */
  postExecutionMessage(executionId: string, body: AgentLineBody, options: LeaseOptions = {}): Promise<Message> {
    return this.json({ method: 'POST', path: `/v1/executions/${enc(executionId)}/messages`, body, headers: leaseHeaders(options.lease) });
  }

  /** `GET /v1/snapshots/{id}` (with `state`). */
  getSnapshot(id: string): Promise<Snapshot> {
    return this.json({ method: 'GET', path: `/v1/snapshots/${enc(id)}` });
  }

  // --- workers -------------------------------------------------------------------------------

  /**
   * `GET /v1/agents`: the built-in agent types (`builtin: true`, `workers_online: null`) and the
   * types the tenant's workers announced, with how many of their workers are online (seen in the
   * last 60 s).
   */
  agents(): Promise<AgentList> {
    return this.json({ method: 'GET', path: '/v1/agents' });
  }

  /**
   * `GET /v1/limits`: this server's input limits (`max_content_chars`, `max_body_bytes`, ...), to
   * refuse over-long input before sending it.
   */
  limits(): Promise<Limits> {
    return this.json({ method: 'GET', path: '/v1/limits' });
  }

  /**
   * `GET /v1/retention` (an admin's): the day counts the retention cleaner applies to this
   * tenant's sessions, the server's, and the tenant's own.
   */
  retention(): Promise<Retention> {
    return this.json({ method: 'GET', path: '/v1/retention' });
  }

  /**
   * `PUT /v1/retention` (an admin's): the tenant's own day counts (each 1-36500; `null` or left
   * out keeps the server's; all left out: the server's policy again).
   */
  setRetention(body: RetentionBody): Promise<Retention> {
    return this.json({ method: 'PUT', path: '/v1/retention', body });
  }

  /**
   * `POST /v1/workers/claim`: up to `slots` executions of the worker's `agents` types, as soon as
   * one is runnable, else none after `wait_s` (0–25 s, default 25: a long poll). Each claim is
   * `running`, with its `lease` for every write and heartbeat, the saved `steps`, the session's
   * `memory`, the latest `snapshot` and, when it resumes a pause, the user's `resume_answer`.
   * `slots: 0` only records that the worker is alive. `signal` ends the wait.
   */
  claim(body: ClaimBody, options: { signal?: AbortSignal } = {}): Promise<ClaimList> {
    return this.json({ method: 'POST', path: '/v1/workers/claim', body, signal: options.signal });
  }

  /**
   * `POST /v1/executions/{id}/heartbeat`: renews the lease (every `heartbeat_interval_s` of the
   * claim). `cancel_requested: true` means the execution was cancelled: stop its agent and write
   * nothing more. A lease that is no longer current is 409 `lease_lost`.
   */
  heartbeat(executionId: string, lease: string, body: Omit<HeartbeatBody, 'lease'> = {}): Promise<HeartbeatAnswer> {
    return this.json({ method: 'POST', path: `/v1/executions/${enc(executionId)}/heartbeat`, body: { ...body, lease } });
  }

  /**
   * `POST /v1/executions/{id}/deltas`: text the agent is producing (up to 64 KiB), sent to the
   * session's live subscribers as a `message.delta` event; never stored. A worker sends its
   * claim's `lease`.
   */
  sendDelta(executionId: string, text: string, options: LeaseOptions = {}): Promise<void> {
    return this.none({ method: 'POST', path: `/v1/executions/${enc(executionId)}/deltas`, body: { text }, headers: leaseHeaders(options.lease) });
  }

  /**
   * `POST /v1/executions/{id}/release`: hands a claimed execution back to the queue (`pending`)
   * without spending an attempt, e.g. when the worker shuts down.
   */
  release(executionId: string, lease: string): Promise<Execution> {
    return this.json({ method: 'POST', path: `/v1/executions/${enc(executionId)}/release`, headers: leaseHeaders(lease) });
  }

  /**
   * `DELETE /v1/workers/{worker_id}`: a worker that stops cleanly says so and is offline at once
   * (`agents()` counts it no more; its agent types stay known for a day). 404 `not_found` for a
   * worker id the tenant never saw.
   */
  stopWorker(workerId: string): Promise<void> {
    return this.none({ method: 'DELETE', path: `/v1/workers/${enc(workerId)}` });
  }

  // --- conversation items ------------------------------------------------------------------

  /** `GET /v1/sessions/{id}/items`: the latest `limit` items and the version. */
  listItems(sessionId: string, query: { limit?: number } = {}): Promise<ItemsPage> {
    return this.json({ method: 'GET', path: `/v1/sessions/${enc(sessionId)}/items`, query: { ...query } });
  }

  /** `POST /v1/sessions/{id}/items` */
  appendItems(sessionId: string, body: AppendItemsBody): Promise<ItemsAdded> {
    return this.json({ method: 'POST', path: `/v1/sessions/${enc(sessionId)}/items`, body });
  }

  /** `POST /v1/sessions/{id}/items/pop` */
  popItem(sessionId: string, body: PopItemBody = {}): Promise<PoppedItem> {
    return this.json({ method: 'POST', path: `/v1/sessions/${enc(sessionId)}/items/pop`, body });
  }

  /** `DELETE /v1/sessions/{id}/items` */
  clearItems(sessionId: string, query: { version?: number; op_id?: string } = {}): Promise<ItemsCleared> {
    return this.json({ method: 'DELETE', path: `/v1/sessions/${enc(sessionId)}/items`, query: { ...query } });
  }

  // --- LangGraph checkpoints -----------------------------------------------------------------

  /** `PUT /v1/threads/{thread_id}/checkpoints/{checkpoint_id}` */
  putCheckpoint(threadId: string, checkpointId: string, body: PutCheckpointBody): Promise<CheckpointStored> {
    return this.json({ method: 'PUT', path: `/v1/threads/${enc(threadId)}/checkpoints/${enc(checkpointId)}`, body });
  }

  /** `PUT /v1/threads/{thread_id}/checkpoints/{checkpoint_id}/writes` */
  putCheckpointWrites(threadId: string, checkpointId: string, body: PutWritesBody): Promise<void> {
    return this.none({ method: 'PUT', path: `/v1/threads/${enc(threadId)}/checkpoints/${enc(checkpointId)}/writes`, body });
  }

  /** `GET /v1/threads/{thread_id}/checkpoints/latest` */
  getLatestCheckpoint(threadId: string, query: CheckpointQuery = {}): Promise<CheckpointTuple> {
    return this.json({ method: 'GET', path: `/v1/threads/${enc(threadId)}/checkpoints/latest`, query: { ...query } as Query });
  }

  /** `GET /v1/threads/{thread_id}/checkpoints/{checkpoint_id}` */
  getCheckpoint(threadId: string, checkpointId: string, query: CheckpointQuery = {}): Promise<CheckpointTuple> {
    return this.json({ method: 'GET', path: `/v1/threads/${enc(threadId)}/checkpoints/${enc(checkpointId)}`, query: { ...query } as Query });
  }

  /** `GET /v1/threads/{thread_id}/checkpoints`: one page, newest first. */
  listCheckpoints(threadId: string, query: ListCheckpointsQuery = {}): Promise<CheckpointPage> {
    return this.json({ method: 'GET', path: `/v1/threads/${enc(threadId)}/checkpoints`, query: checkpointQuery(query) });
  }

  /** Every checkpoint of a thread, following `next_cursor`. */
  checkpoints(threadId: string, query: Omit<ListCheckpointsQuery, 'cursor'> = {}): AsyncGenerator<CheckpointTuple, void, undefined> {
    return this.pages((cursor) => this.listCheckpoints(threadId, { ...query, ...(cursor ? { cursor } : {}) }));
  }

  /** `GET /v1/checkpoints`: one page over every thread of the tenant. */
  listAllCheckpoints(query: ListCheckpointsQuery = {}): Promise<CheckpointPage> {
    return this.json({ method: 'GET', path: '/v1/checkpoints', query: checkpointQuery(query) });
  }

  /** Every checkpoint of the tenant, following `next_cursor`. */
  allCheckpoints(query: Omit<ListCheckpointsQuery, 'cursor'> = {}): AsyncGenerator<CheckpointTuple, void, undefined> {
    return this.pages((cursor) => this.listAllCheckpoints({ ...query, ...(cursor ? { cursor } : {}) }));
  }

  /** `GET /v1/threads/{thread_id}` */
  getThread(threadId: string): Promise<Thread> {
    return this.json({ method: 'GET', path: `/v1/threads/${enc(threadId)}` });
  }

  /** `DELETE /v1/threads/{thread_id}` (deletes the thread's session and every row of it). */
  deleteThread(threadId: string): Promise<void> {
    return this.none({ method: 'DELETE', path: `/v1/threads/${enc(threadId)}` });
  }

  /** `POST /v1/threads/{thread_id}/copy` */
  copyThread(threadId: string, body: CopyThreadBody): Promise<ThreadCopied> {
    return this.json({ method: 'POST', path: `/v1/threads/${enc(threadId)}/copy`, body });
  }

  /** `POST /v1/checkpoints/delete-for-runs` */
  deleteCheckpointsForRuns(body: DeleteForRunsBody): Promise<CheckpointsDeleted> {
    return this.json({ method: 'POST', path: '/v1/checkpoints/delete-for-runs', body });
  }

  /** `POST /v1/checkpoints/prune` */
  pruneCheckpoints(body: PruneBody): Promise<CheckpointsDeleted> {
    return this.json({ method: 'POST', path: '/v1/checkpoints/prune', body });
  }

  // --- front-end protocols ---------------------------------------------------------------------

  /** `POST /v1/ai-sdk/chat`: a chat turn, answered as AI SDK UI message stream parts. */
  aiSdkChat(body: ChatBody, options: { signal?: AbortSignal } = {}): AsyncGenerator<StreamPart, void, undefined> {
    return this.parts({ method: 'POST', path: '/v1/ai-sdk/chat', body, signal: options.signal });
  }

  /** `GET /v1/ai-sdk/chat/{chat_id}/stream`: the running turn from its start; `null` when nothing runs (204). */
  async aiSdkResume(chatId: string, options: { signal?: AbortSignal } = {}): Promise<AsyncGenerator<StreamPart, void, undefined> | null> {
    const response = await this.send({ method: 'GET', path: `/v1/ai-sdk/chat/${enc(chatId)}/stream`, signal: options.signal });
    if (response.status === 204) return null;
    return dataParts(response, options.signal);
  }

  /** `POST /v1/ai-sdk/chat/{chat_id}/cancel` */
  aiSdkCancel(chatId: string): Promise<Execution> {
    return this.json({ method: 'POST', path: `/v1/ai-sdk/chat/${enc(chatId)}/cancel` });
  }

  /** `POST /v1/ag-ui`: a `RunAgentInput`, answered as AG-UI events. */
  agUiRun(input: RunAgentInput, options: { signal?: AbortSignal } = {}): AsyncGenerator<StreamPart, void, undefined> {
    return this.parts({ method: 'POST', path: '/v1/ag-ui', body: input, signal: options.signal });
  }

  /** `POST /v1/ag-ui/connect`: the thread's messages and its running turn. */
  agUiConnect(input: RunAgentInput, options: { signal?: AbortSignal } = {}): AsyncGenerator<StreamPart, void, undefined> {
    return this.parts({ method: 'POST', path: '/v1/ag-ui/connect', body: input, signal: options.signal });
  }

  private async *parts(call: Call): AsyncGenerator<StreamPart, void, undefined> {
    const response = await this.send(call);
    yield* dataParts(response, call.signal);
  }

  // --- end users: tokens and keys -------------------------------------------------------------

  /**
   * `POST /v1/tokens` (an admin credential): a token for end user `user_id` of the tenant, for
   * `ttl_s` seconds (60–86,400, default 3,600). With it as `token` (or `apiKey`), a client sees and
   * changes only that user's sessions; another user's session is 404 `not_found`, an admin
   * operation 403 `forbidden`.
   */
  createToken(body: MintTokenBody): Promise<MintedToken> {
    return this.json({ method: 'POST', path: '/v1/tokens', body });
  }

  /**
   * `POST /v1/keys` (an admin credential): an API key for `user_id` with `role` (`admin`: the whole
   * tenant; `user`: only the user's own sessions; `worker`). The answer's `key` is the secret, shown
   * in this answer only.
   */
  createKey(body: CreateKeyBody): Promise<CreatedKey> {
    return this.json({ method: 'POST', path: '/v1/keys', body });
  }

  /** `GET /v1/keys` (an admin credential): the tenant's working keys, without their secrets, on one page. */
  listKeys(): Promise<KeyList> {
    return this.json({ method: 'GET', path: '/v1/keys' });
  }

  /** `DELETE /v1/keys/{id}` (an admin credential): revokes the key; servers refuse it within seconds. */
  deleteKey(id: string): Promise<void> {
    return this.none({ method: 'DELETE', path: `/v1/keys/${enc(id)}` });
  }

  // --- operations --------------------------------------------------------------------------------

  /** `GET /healthz`: resolves while the server is up. */
  async healthz(): Promise<void> {
    await this.none({ method: 'GET', path: '/healthz' });
  }

  /** `GET /readyz`: resolves when the database answers (else a 503 StepwiseError). */
  async readyz(): Promise<void> {
    await this.none({ method: 'GET', path: '/readyz' });
  }

  /** `GET /metrics`: Prometheus text. */
  async metrics(): Promise<string> {
    return (await this.send({ method: 'GET', path: '/metrics' })).text();
  }

  /** `GET /openapi.json`: the API as an OpenAPI 3.1 document. */
  openapi(): Promise<Record<string, unknown>> {
    return this.json({ method: 'GET', path: '/openapi.json' });
  }
}

/** The error of a response that is not 2xx. */
async function errorOf(response: Response, call: Call): Promise<StepwiseError> {
  let code = `http_${response.status}`;
  let message = `${call.method} ${call.path}: HTTP ${response.status}`;
  let field: string | null = null;
  try {
    const body = (await response.json()) as { error?: { code?: string; message?: string; field?: string | null } };
    if (body?.error) {
      code = body.error.code ?? code;
      message = body.error.message ?? message;
      field = body.error.field ?? null;
    }
  } catch {
    // Not the error shape: keep the status.
  }
  const retry = response.headers.get('retry-after');
  return new StepwiseError({
    status: response.status,
    code,
    message,
    field,
    requestId: response.headers.get('x-request-id'),
    retryAfter: retry && /^\d+$/.test(retry) ? Number(retry) : null,
  });
}

function checkpointQuery(query: ListCheckpointsQuery): Query {
  const { filter, ...rest } = query;
  return { ...rest, ...(filter === undefined ? {} : { filter: typeof filter === 'string' ? filter : JSON.stringify(filter) }) };
}

/** The `data:` JSON objects of an SSE body (`data: [DONE]` ends it). */
async function* dataParts(response: Response, signal?: AbortSignal): AsyncGenerator<StreamPart, void, undefined> {
  for await (const frame of sseFrames(response.body, signal)) {
    if (!frame.data) continue;
    if (frame.data === '[DONE]') return;
    yield JSON.parse(frame.data) as StreamPart;
  }
}

interface SseFrame {
  id?: string;
  event?: string;
  data: string;
}

/** The frames of a Server-Sent Events body (comments skipped), per the HTML standard's parsing rules. */
async function* sseFrames(body: ReadableStream<Uint8Array> | null, signal?: AbortSignal): AsyncGenerator<SseFrame, void, undefined> {
  if (!body) return;
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let frame: SseFrame = { data: '' };
  let hasData = false;
  const onAbort = () => {
    reader.cancel().catch(() => {});
  };
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let newline: number;
      while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + (buffer.startsWith('\r\n', newline) ? 2 : 1));
        if (line === '') {
          if (hasData) yield frame;
          frame = { data: '' };
          hasData = false;
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const name = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (name === 'data') {
          frame.data = hasData ? `${frame.data}\n${value}` : value;
          hasData = true;
        } else if (name === 'id') {
          frame.id = value;
        } else if (name === 'event') {
          frame.event = value;
        }
      }
    }
  } finally {
    signal?.removeEventListener('abort', onAbort);
    // Stopped early (or done): let the connection go.
    reader.cancel().catch(() => {});
  }
}

// --- a Unix socket (Node) ------------------------------------------------------------------

/** What `unixFetch` uses of `node:http` (the package goes without Node's types). */
interface NodeHttp {
  request(options: { socketPath: string; method: string; path: string; headers: Record<string, string> }): NodeRequest;
}

interface NodeRequest {
  on(event: 'response', listener: (response: NodeResponse) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  end(body?: Uint8Array): unknown;
  destroy(error?: Error): unknown;
}

interface NodeResponse {
  statusCode?: number;
  statusMessage?: string;
  /** Names and values in turn, as received. */
  rawHeaders: string[];
  /** Whether the whole answer arrived. */
  complete: boolean;
  on(event: 'data', listener: (chunk: Uint8Array) => void): unknown;
  on(event: 'end' | 'close', listener: () => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  pause(): unknown;
  resume(): unknown;
  destroy(error?: Error): unknown;
}

/** In a variable (and with the bundlers' comments) so that bundlers leave the import alone. */
const NODE_HTTP = 'node:http';

function isNode(): boolean {
  const process = (globalThis as { process?: { versions?: { node?: unknown } } }).process;
  return typeof process?.versions?.node === 'string';
}

/**
 * A `fetch` to the HTTP server on the Unix socket at `socketPath`, over `node:http` (imported at
 * the first call): the request's method, path and query, headers and body (a string or bytes);
 * the URL's origin is not used. It answers a `Response` whose body is a `ReadableStream` read as
 * it arrives (an SSE stream's frames come as they are sent). `init.signal` aborts the request or,
 * once answered, the body being read, and closes the connection.
 */
function unixFetch(socketPath: string): typeof fetch {
  let http: Promise<NodeHttp> | undefined;
  return async (input, init = {}) => {
    const signal = init.signal ?? undefined;
    signal?.throwIfAborted();
    http ??= import(/* webpackIgnore: true */ /* @vite-ignore */ NODE_HTTP) as Promise<NodeHttp>;
    const { request } = await http;
    signal?.throwIfAborted();
    const url = new URL(typeof input === 'string' ? input : input instanceof URL ? input.href : input.url);
    const method = init.method ?? 'GET';
    const headers: Record<string, string> = {};
    new Headers(init.headers).forEach((value, name) => {
      headers[name] = value;
    });
    let bytes: Uint8Array | undefined;
    const body = init.body;
    if (typeof body === 'string') bytes = new TextEncoder().encode(body);
    else if (body instanceof Uint8Array) bytes = body;
    else if (body instanceof ArrayBuffer) bytes = new Uint8Array(body);
    else if (body !== undefined && body !== null) throw new TypeError('Stepwise: a request body over a Unix socket is a string or bytes');
    if (bytes) headers['content-length'] = String(bytes.byteLength);
    else if (method !== 'GET' && method !== 'HEAD') headers['content-length'] = '0';

    return new Promise<Response>((resolve, reject) => {
      const req = request({ socketPath, method, path: `${url.pathname}${url.search}`, headers });
      /** The answer's body, once there is one; `finished` once it is closed, errored or cancelled. */
      let stream: ReadableStreamDefaultController<Uint8Array> | null = null;
      let finished = false;
      const finish = (error?: unknown) => {
        signal?.removeEventListener('abort', onAbort);
        if (finished) return;
        finished = true;
        if (!stream) return reject(error);
        if (error === undefined) stream.close();
        else stream.error(error);
      };
      function onAbort() {
        finish(signal?.reason);
        req.destroy();
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      req.on('error', (error) => finish(error));
      req.on('response', (res) => {
        const answerHeaders = new Headers();
        for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) answerHeaders.append(res.rawHeaders[i]!, res.rawHeaders[i + 1]!);
        const status = res.statusCode ?? 0;
        const init = { status, statusText: res.statusMessage ?? '', headers: answerHeaders };
        if (method === 'HEAD' || status === 204 || status === 205 || status === 304) {
          // No body: read the (empty) rest so the connection can serve the next request.
          res.on('close', () => signal?.removeEventListener('abort', onAbort));
          res.resume();
          finished = true;
          try {
            resolve(new Response(null, init));
          } catch (error) {
            reject(error);
          }
          return;
        }
        let answer: Response;
        try {
          answer = new Response(
            new ReadableStream<Uint8Array>({
              start(controller) {
                stream = controller;
              },
              pull() {
                res.resume();
              },
              cancel() {
                signal?.removeEventListener('abort', onAbort);
                finished = true;
                res.destroy();
              },
            }),
            init,
          );
        } catch (error) {
          // An answer the platform's Response refuses (a status outside 200–599).
          stream = null;
          finish(error);
          res.destroy();
          return;
        }
        res.on('data', (chunk) => {
          if (finished || !stream) return;
          stream.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
          if ((stream.desiredSize ?? 0) <= 0) res.pause();
        });
        res.on('end', () => finish());
        res.on('error', (error) => finish(error));
        res.on('close', () => {
          if (!res.complete) finish(new TypeError('terminated: the connection closed before the answer ended'));
        });
        resolve(answer);
      });
      req.end(bytes);
    });
  };
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

export type { AgentBody };

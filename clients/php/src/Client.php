<?php

declare(strict_types=1);

namespace Stepwise;

use Stepwise\Internal\EventStream;
use Stepwise\Internal\Http;
use Stepwise\Internal\RetryPolicy;

/**
 * The Stepwise HTTP API client (docs/api.md).
 *
 * ```php
 * $client = new Stepwise\Client('http://127.0.0.1:7777', getenv('STEPWISE_API_KEY') ?: null);
 * $answer = $client->sendMessage('Where is my order?', session: ['title' => 'Order 1042']);
 * $execution = $client->wait($answer['execution']['id'], timeout: 60);
 * ```
 *
 * Answers are the API's JSON decoded into PHP arrays (objects as associative arrays, every
 * field present, absent values null). List methods return a Generator that fetches the pages
 * lazily, following `next_cursor`. Every error is a StepwiseException (NotFoundException,
 * ConflictException, ...) with the API's `errorCode`. Reads, and writes that are safe to
 * repeat, are retried `maxRetries` times on connection failures, 5xx and 429, with exponential
 * backoff (`backoff` seconds first) and jitter, honouring `Retry-After`; other writes only
 * when the request was certainly not sent (the connection could not be opened) or refused
 * with 429.
 *
 * The credential (an API key, or an end user's token from createToken(): the same on the
 * wire) is sent as `Authorization: Bearer ...` and never appears in an error message.
 */
class Client
{
    /** The agent type of executions opened for an agent that runs outside the server. */
    public const EXTERNAL = 'external';

    /** Execution statuses wait() keeps waiting on. */
    private const UNFINISHED = ['pending', 'running'];

    /** The base URL, less trailing slashes. */
    public readonly string $baseUrl;

    private readonly Http $http;

    /** @var array<string, string> leases of the external executions this client opened */
    private array $leases = [];

    /**
     * @param string                $baseUrl        the server, e.g. `http://127.0.0.1:7777`, or its Unix socket,
     *                                              `unix:PATH` (`stepwise serve --listen unix:PATH`)
     * @param string|null           $apiKey         an API key or an end user's token; null for a
     *                                              server that runs open (loopback, no keys)
     * @param float                 $timeout        seconds a request may take, answer included
     * @param int                   $maxRetries     retries of a failed request (0: none)
     * @param float                 $backoff        the first wait between retries, in seconds
     * @param float                 $connectTimeout seconds to open a connection
     * @param array<string, string> $headers        extra headers sent with every request
     */
    public function __construct(
        string $baseUrl,
        ?string $apiKey = null,
        float $timeout = 30.0,
        int $maxRetries = 3,
        float $backoff = 0.25,
        float $connectTimeout = 10.0,
        array $headers = [],
    ) {
        if (!preg_match('#^(https?://[^/]|unix:.)#i', $baseUrl)) {
            throw new \InvalidArgumentException(sprintf(
                'baseUrl must be an http(s) URL such as http://127.0.0.1:7777, or a server\'s Unix socket such as unix:/run/stepwise.sock, got %s',
                var_export($baseUrl, true),
            ));
        }
        if ($timeout <= 0) {
            throw new \InvalidArgumentException('timeout must be > 0 seconds, got ' . $timeout);
        }
        $this->baseUrl = rtrim($baseUrl, '/');
        $this->http = new Http(
            $this->baseUrl,
            $apiKey === '' ? null : $apiKey,
            $timeout,
            $connectTimeout,
            new RetryPolicy($maxRetries, $backoff),
            $headers,
        );
    }

    /**
     * A client from the environment: `STEPWISE_URL` (default `http://127.0.0.1:7777`) and
     * `STEPWISE_API_KEY`, else `STEPWISE_TOKEN`.
     */
    public static function fromEnvironment(float $timeout = 30.0, int $maxRetries = 3): self
    {
        $url = getenv('STEPWISE_URL') ?: 'http://127.0.0.1:7777';
        $credential = getenv('STEPWISE_API_KEY') ?: (getenv('STEPWISE_TOKEN') ?: null);
        return new self($url, $credential, $timeout, $maxRetries);
    }

    public function __debugInfo(): array
    {
        return ['baseUrl' => $this->baseUrl]; // never the credential
    }

    /** Closes the kept-alive connection (a later call opens a new one). */
    public function close(): void
    {
        $this->http->close();
    }

    /** @internal the transport, shared with Worker */
    public function transport(): Http
    {
        return $this->http;
    }

    // --- low level ---------------------------------------------------------------------------

    /**
     * Sends one request to any path of the API and returns its parsed JSON answer (null when
     * empty, e.g. a 204): the escape hatch for endpoints this client has no method for.
     *
     * `$idempotent` says whether a retry is safe; by default GET, HEAD, PUT and DELETE are,
     * POST and PATCH are not.
     *
     * @param array<string, scalar|null> $query
     * @param array<string, string>      $headers
     * @throws StepwiseException
     */
    public function request(
        string $method,
        string $path,
        mixed $body = null,
        array $query = [],
        ?bool $idempotent = null,
        array $headers = [],
    ): mixed {
        $method = strtoupper($method);
        if (!str_starts_with($path, '/')) {
            throw new \InvalidArgumentException(sprintf("path must start with '/', got %s", var_export($path, true)));
        }
        $idempotent ??= in_array($method, ['GET', 'HEAD', 'PUT', 'DELETE'], true);
        return $this->http->call(
            $method,
            $path,
            $body === null ? null : Http::encode($body === [] ? new \stdClass() : $body),
            $query,
            $headers,
            $idempotent,
            expect: 'raw',
        );
    }

    // --- operations --------------------------------------------------------------------------

    /**
     * `GET /healthz`: whether the server process is up.
     *
     * @return array<string, mixed>
     */
    public function health(): array
    {
        return $this->get('/healthz');
    }

    /**
     * `GET /readyz`: whether the server can serve (database reachable, migrations applied).
     *
     * @return array<string, mixed>
     */
    public function ready(): array
    {
        return $this->get('/readyz');
    }

    /**
     * `GET /v1/limits`: this server's input limits (`max_content_chars`, `max_body_bytes`, ...),
     * to refuse over-long input before sending it.
     *
     * @return array<string, int>
     */
    public function limits(): array
    {
        return $this->get('/v1/limits');
    }

    /**
     * `GET /v1/retention`: the day counts the retention cleaner applies to the caller's tenant
     * (an admin's call; ForbiddenException otherwise).
     *
     * @return array<string, mixed>
     */
    public function getRetention(): array
    {
        return $this->get('/v1/retention');
    }

    /**
     * `PUT /v1/retention`: the tenant's own retention (an admin's call). Each count (1–36500
     * days) overrides the server's for this tenant; a null one keeps the server's; all null:
     * the server's policy again. Returns what getRetention() returns.
     *
     * @return array<string, mixed>
     */
    public function setRetention(
        ?int $completedDays = null,
        ?int $abandonedDays = null,
        ?int $deletedDays = null,
        ?int $markAbandonedDays = null,
    ): array {
        return $this->json('PUT', '/v1/retention', [
            'completed_days' => $completedDays,
            'abandoned_days' => $abandonedDays,
            'deleted_days' => $deletedDays,
            'mark_abandoned_days' => $markAbandonedDays,
        ], idempotent: true);
    }

    // --- sessions ----------------------------------------------------------------------------

    /**
     * Creates a session (`POST /v1/sessions`) and returns it (201 Session).
     *
     * `$name` is unique within the tenant (a second one is a ConflictException). `$agent` is the
     * session's default agent: a type (`'demo'`, a worker's type) or `['type' => ..., 'config' =>
     * [...]]`. Not retried (it could create two sessions) unless the request was never sent.
     *
     * @param array<string, mixed>|null        $metadata
     * @param string|array<string, mixed>|null $agent
     * @return array<string, mixed>
     */
    public function createSession(
        ?string $title = null,
        ?string $name = null,
        ?string $relatedType = null,
        ?string $relatedId = null,
        ?string $initialContextUrl = null,
        ?array $metadata = null,
        string|array|null $agent = null,
    ): array {
        return $this->json('POST', '/v1/sessions', self::fields([
            'title' => $title,
            'name' => $name,
            'related_type' => $relatedType,
            'related_id' => $relatedId,
            'initial_context_url' => $initialContextUrl,
            'metadata' => self::object($metadata),
            'agent' => self::agent($agent),
        ]));
    }

    /**
     * The session with this id (`GET /v1/sessions/{id}`); a soft-deleted one too, with status
     * `deleted`. NotFoundException for an unknown id, or another tenant's or another user's.
     *
     * @return array<string, mixed>
     */
    public function getSession(string $sessionId): array
    {
        return $this->get('/v1/sessions/' . self::seg($sessionId, 'sessionId'));
    }

    /**
     * The session of this name in the caller's tenant, or null (`GET /v1/sessions?name=`).
     * Deleted sessions are not found.
     *
     * @return array<string, mixed>|null
     */
    public function findSession(string $name): ?array
    {
        if ($name === '') {
            throw new \InvalidArgumentException('name must be a non-empty string');
        }
        $page = $this->get('/v1/sessions', ['name' => $name]);
        foreach ($page['items'] ?? [] as $item) {
            if (is_array($item) && ($item['name'] ?? null) === $name) {
                return $item;
            }
        }
        return null;
    }

    /**
     * The sessions the caller may see, newest `updated_at` first, fetched page by page as the
     * loop goes (`GET /v1/sessions`).
     *
     * An admin credential sees the whole tenant (`$userId` keeps one end user's sessions), an end
     * user's token or `user` key only that user's own. `$status` is one status or several
     * (default: all but `deleted`). `$metadata` keeps the sessions whose top-level metadata key
     * KEY equals VALUE for each entry (up to 8). `$pageSize` is the items per request (1–500).
     *
     * @param string|list<string>|null   $status
     * @param array<string, scalar>|null $metadata
     * @return \Generator<int, array<string, mixed>>
     */
    public function listSessions(
        string|array|null $status = null,
        ?string $relatedType = null,
        ?string $relatedId = null,
        ?string $name = null,
        ?string $userId = null,
        ?array $metadata = null,
        ?int $pageSize = null,
    ): \Generator {
        $query = [
            'status' => self::csv($status),
            'related_type' => $relatedType,
            'related_id' => $relatedId,
            'name' => $name,
            'user_id' => $userId,
            'limit' => $pageSize,
        ];
        foreach ($metadata ?? [] as $key => $value) {
            if (!is_string($key) || $key === '') {
                throw new \InvalidArgumentException('metadata filter keys must be non-empty strings');
            }
            $query['metadata.' . $key] = is_bool($value) ? ($value ? 'true' : 'false') : (string) $value;
        }
        return $this->pages('/v1/sessions', $query);
    }

    /**
     * Changes a session (`PATCH /v1/sessions/{id}`) and returns it. Arguments left null are
     * unchanged; `$status` is `active`, `completed`, `archived` or `closed`; `$agent` sets the
     * session's default agent, and `false` removes it. Retried like a read (the same values
     * twice have the effect of once).
     *
     * @param array<string, mixed>|null              $metadata
     * @param string|array<string, mixed>|false|null $agent
     * @return array<string, mixed>
     */
    public function updateSession(
        string $sessionId,
        ?string $title = null,
        ?string $status = null,
        ?array $metadata = null,
        string|array|false|null $agent = null,
    ): array {
        $body = self::fields(['title' => $title, 'status' => $status, 'metadata' => self::object($metadata)]);
        if ($agent === false) {
            $body['agent'] = null;
        } elseif ($agent !== null) {
            $body['agent'] = self::agent($agent);
        }
        return $this->json('PATCH', '/v1/sessions/' . self::seg($sessionId, 'sessionId'), $body ?: new \stdClass(), idempotent: true);
    }

    /**
     * Soft-deletes a session (`DELETE /v1/sessions/{id}`): its status becomes `deleted`; it is
     * listed only with `status: 'deleted'`, and getSession() still returns it.
     */
    public function deleteSession(string $sessionId): void
    {
        $this->http->call('DELETE', '/v1/sessions/' . self::seg($sessionId, 'sessionId'), idempotent: true, expect: 'none');
    }

    /**
     * The session's agent memory (`GET /v1/sessions/{id}/memory`): `['restored' => 'full' |
     * 'summary' | 'empty', 'steps' => [...], 'summary' => ... | null]`.
     *
     * @return array<string, mixed>
     */
    public function getMemory(string $sessionId): array
    {
        return $this->get('/v1/sessions/' . self::seg($sessionId, 'sessionId') . '/memory');
    }

    /**
     * The whole session as one document (`GET /v1/sessions/{id}/export`): `format_version`,
     * `session`, `messages`, `executions`, `steps`, `snapshots`; importSession() takes it back.
     *
     * @return array<string, mixed>
     */
    public function exportSession(string $sessionId): array
    {
        return $this->get('/v1/sessions/' . self::seg($sessionId, 'sessionId') . '/export');
    }

    /**
     * Imports a session document (from exportSession()) as a new session and returns it
     * (`POST /v1/sessions/import`); ids that exist already get new ones. Not retried.
     *
     * @param array<string, mixed> $document
     * @return array<string, mixed>
     */
    public function importSession(array $document): array
    {
        return $this->json('POST', '/v1/sessions/import', $document);
    }

    /**
     * A session's executions, subagents' included (`GET /v1/sessions/{id}/executions`), page by
     * page.
     *
     * @return \Generator<int, array<string, mixed>>
     */
    public function listSessionExecutions(string $sessionId, ?int $pageSize = null): \Generator
    {
        return $this->pages('/v1/sessions/' . self::seg($sessionId, 'sessionId') . '/executions', ['limit' => $pageSize]);
    }

    // --- messages ----------------------------------------------------------------------------

    /**
     * Posts a user message to a session (`POST /v1/sessions/{id}/messages`): 202
     * `['session_id', 'message', 'execution']`.
     *
     * The message starts an execution of `$agent` (a type, or `['type' => ..., 'config' => [...],
     * 'wait' => true]`; default: the session's agent). On a session whose latest execution is
     * paused, it is the user's answer and resumes that execution; behind a running one it is
     * queued. `$relatedType`, `$relatedId`, `$contextUrl` and `$metadata` say where it came from
     * (the agent sees them as the execution's `input.context`). With `$wait` (0 < S ≤ 60
     * seconds) the call waits for the execution to end and, when it did within S, the answer
     * also holds `answer` (the assistant's message). UnknownAgentException for an agent type
     * nobody runs. Not retried unless the request was never sent.
     *
     * @param string|array<string, mixed>|null $agent
     * @param array<string, mixed>|null        $metadata
     * @return array<string, mixed>
     */
    public function postMessage(
        string $sessionId,
        string $content,
        string|array|null $agent = null,
        ?string $relatedType = null,
        ?string $relatedId = null,
        ?string $contextUrl = null,
        ?array $metadata = null,
        ?float $wait = null,
    ): array {
        return $this->json(
            'POST',
            '/v1/sessions/' . self::seg($sessionId, 'sessionId') . '/messages',
            self::message($content, $agent, $relatedType, $relatedId, $contextUrl, $metadata),
            query: ['wait' => $wait],
            timeout: $wait === null ? null : $this->http->timeout + $wait,
        );
    }

    /**
     * Creates a session and posts its first message in one call (`POST /v1/messages`): 202
     * `['session_id', 'message', 'execution']`. `$session` holds the new session's fields
     * (`title`, `name`, `related_type`, `related_id`, `initial_context_url`, `metadata`,
     * `agent`); the other arguments are postMessage()'s. Not retried unless never sent.
     *
     * @param array<string, mixed>|null        $session
     * @param string|array<string, mixed>|null $agent
     * @param array<string, mixed>|null        $metadata
     * @return array<string, mixed>
     */
    public function sendMessage(
        string $content,
        ?array $session = null,
        string|array|null $agent = null,
        ?string $relatedType = null,
        ?string $relatedId = null,
        ?string $contextUrl = null,
        ?array $metadata = null,
        ?float $wait = null,
    ): array {
        $body = self::message($content, $agent, $relatedType, $relatedId, $contextUrl, $metadata);
        if ($session !== null) {
            $body['session'] = self::objects($session, ['metadata']);
            if (isset($session['agent'])) {
                $body['session']['agent'] = self::agent($session['agent']);
            }
        }
        return $this->json(
            'POST',
            '/v1/messages',
            $body,
            query: ['wait' => $wait],
            timeout: $wait === null ? null : $this->http->timeout + $wait,
        );
    }

    /**
     * A session's messages, oldest first (`GET /v1/sessions/{id}/messages`), page by page.
     * `$after` is a message id (only later ones); `$roles` one role or several (`user`,
     * `assistant`, `info`, `notification`).
     *
     * @param string|list<string>|null $roles
     * @return \Generator<int, array<string, mixed>>
     */
    public function listMessages(string $sessionId, ?string $after = null, string|array|null $roles = null, ?int $pageSize = null): \Generator
    {
        return $this->pages(
            '/v1/sessions/' . self::seg($sessionId, 'sessionId') . '/messages',
            ['after' => $after, 'roles' => self::csv($roles), 'limit' => $pageSize],
        );
    }

    // --- executions, steps, snapshots --------------------------------------------------------

    /**
     * The execution with this id (`GET /v1/executions/{id}`).
     *
     * @return array<string, mixed>
     */
    public function getExecution(string $executionId): array
    {
        return $this->get('/v1/executions/' . self::seg($executionId, 'executionId'));
    }

    /**
     * Cancels a pending, running or paused execution and returns it (`POST
     * /v1/executions/{id}/cancel`, 202); ConflictException when it has finished already.
     *
     * @return array<string, mixed>
     */
    public function cancelExecution(string $executionId): array
    {
        return $this->json('POST', '/v1/executions/' . self::seg($executionId, 'executionId') . '/cancel');
    }

    /**
     * Waits until an execution is no longer `pending` or `running` and returns it (then
     * `completed`, `failed`, `cancelled` or `paused`), polling every `$pollInterval` seconds.
     * TimeoutException when `$timeout` seconds pass first.
     *
     * @return array<string, mixed>
     */
    public function wait(string $executionId, ?float $timeout = null, float $pollInterval = 0.1): array
    {
        if ($pollInterval <= 0) {
            throw new \InvalidArgumentException('pollInterval must be > 0');
        }
        $deadline = $timeout === null ? null : microtime(true) + $timeout;
        while (true) {
            $execution = $this->getExecution($executionId);
            if (!in_array($execution['status'] ?? null, self::UNFINISHED, true)) {
                return $execution;
            }
            $sleep = $pollInterval;
            if ($deadline !== null) {
                $left = $deadline - microtime(true);
                if ($left <= 0) {
                    throw new TimeoutException(
                        'timeout',
                        sprintf('execution %s is still %s after %s s', $executionId, $execution['status'], $timeout),
                    );
                }
                $sleep = min($sleep, $left);
            }
            usleep((int) round($sleep * 1e6));
        }
    }

    /**
     * An execution's steps by `step_number` (`GET /v1/executions/{id}/steps`), page by page.
     *
     * @return \Generator<int, array<string, mixed>>
     */
    public function listSteps(string $executionId, ?int $pageSize = null): \Generator
    {
        return $this->pages('/v1/executions/' . self::seg($executionId, 'executionId') . '/steps', ['limit' => $pageSize]);
    }

    /**
     * An execution's snapshots, without their `state` (`GET /v1/executions/{id}/snapshots`).
     *
     * @return \Generator<int, array<string, mixed>>
     */
    public function listSnapshots(string $executionId, ?int $pageSize = null): \Generator
    {
        return $this->pages('/v1/executions/' . self::seg($executionId, 'executionId') . '/snapshots', ['limit' => $pageSize]);
    }

    /**
     * One snapshot with its `state` (`GET /v1/snapshots/{id}`).
     *
     * @return array<string, mixed>
     */
    public function getSnapshot(string $snapshotId): array
    {
        return $this->get('/v1/snapshots/' . self::seg($snapshotId, 'snapshotId'));
    }

    /**
     * Opens an execution in a session (`POST /v1/sessions/{id}/executions`, 201).
     *
     * With the default `$agentType` `external` it is an agent that runs in your app (a
     * recorder): the answer is `running` and holds `lease`, `lease_expires_at` and
     * `heartbeat_interval_s`. This client remembers the lease and sends it with the
     * execution's writes (appendStep(), completeExecution(), ...); each write renews it, and
     * heartbeat() renews it while nothing is written — PHP has no background thread to do it,
     * so a recorder silent for longer than the lease gets LeaseLostException and opens a new
     * execution. `$lease = false` opens one without a lease. Another `$agentType` (a worker's,
     * or a built-in one) queues a subagent's execution, `$parentExecutionId` its parent.
     *
     * @return array<string, mixed>
     */
    public function createExecution(
        string $sessionId,
        mixed $input = null,
        string $agentType = self::EXTERNAL,
        mixed $agentConfig = null,
        ?string $parentExecutionId = null,
        bool $lease = true,
    ): array {
        $body = ['agent_type' => $agentType, 'input' => $input] + self::fields([
            'agent_config' => $agentConfig,
            'parent_execution_id' => $parentExecutionId,
        ]);
        if (!$lease) {
            $body['lease'] = false;
        }
        $execution = $this->json('POST', '/v1/sessions/' . self::seg($sessionId, 'sessionId') . '/executions', $body);
        if (is_string($execution['lease'] ?? null) && is_string($execution['id'] ?? null)) {
            $this->leases[$execution['id']] = $execution['lease'];
        }
        return $execution;
    }

    /**
     * Records one step of an external or worker execution (`POST /v1/executions/{id}/steps`)
     * and returns it as stored (201; 200 for the same step again).
     *
     * `$step` holds the Step fields without ids: `kind` (`task`, `system_prompt`, `planning`,
     * `action`, `user_input`, `final_answer`), `model_output`, `tool_calls` (`[['id', 'name',
     * 'arguments']]`), `code`, `observations`, `error` (`['kind', 'message']`), `output`,
     * `token_usage`, `started_at`, `ended_at`, and `step_number`. With a `step_number` the write
     * is idempotent (the same body again is accepted), so it is retried like a read; another
     * body at a saved number is a ConflictException. `$lease` is the `Stepwise-Lease` header
     * (default: the lease of an execution this client opened).
     *
     * @param array<string, mixed> $step
     * @return array<string, mixed>
     */
    public function appendStep(string $executionId, array $step, ?string $lease = null): array
    {
        return $this->json(
            'POST',
            $this->executionPath($executionId, '/steps'),
            self::step($step),
            idempotent: isset($step['step_number']),
            headers: $this->leaseHeader($executionId, $lease),
        );
    }

    /**
     * Records 1 to 1,000 steps in one request and one durable commit (`POST
     * /v1/executions/{id}/steps/batch`): `['items' => [stored steps], 'created' => N]`. A step
     * without `step_number` takes the number after the one before it; each is idempotent as
     * with appendStep(); another body at a saved number is a ConflictException that stops the
     * batch there (the steps before it are saved).
     *
     * @param list<array<string, mixed>> $steps
     * @return array<string, mixed>
     */
    public function appendSteps(string $executionId, array $steps, ?string $lease = null): array
    {
        if ($steps === [] || count($steps) > 1000 || !array_is_list($steps)) {
            throw new \InvalidArgumentException('steps must be a list of 1 to 1,000 steps');
        }
        return $this->json(
            'POST',
            $this->executionPath($executionId, '/steps/batch'),
            ['steps' => array_map(self::step(...), $steps)],
            idempotent: isset($steps[0]['step_number']),
            headers: $this->leaseHeader($executionId, $lease),
        );
    }

    /**
     * Saves a snapshot of an execution's state (any JSON) and returns it (`POST
     * /v1/executions/{id}/snapshots`, 201). `$replace` deletes its earlier snapshots in the
     * same write. Not retried.
     *
     * @return array<string, mixed>
     */
    public function saveSnapshot(
        string $executionId,
        mixed $state,
        ?int $stepNumber = null,
        ?bool $isFinal = null,
        ?string $parentSnapshotId = null,
        ?string $agentId = null,
        ?string $agentName = null,
        ?bool $debugMode = null,
        bool $replace = false,
        ?string $lease = null,
    ): array {
        $body = ['state' => $state] + self::fields([
            'step_number' => $stepNumber,
            'is_final' => $isFinal,
            'parent_snapshot_id' => $parentSnapshotId,
            'agent_id' => $agentId,
            'agent_name' => $agentName,
            'debug_mode' => $debugMode,
            'replace' => $replace ? true : null,
        ]);
        return $this->json('POST', $this->executionPath($executionId, '/snapshots'), $body, headers: $this->leaseHeader($executionId, $lease));
    }

    /**
     * Completes an external or worker execution with its `$output` (any JSON) and returns it
     * (`POST /v1/executions/{id}/complete`). `$finalMessage` (or `$output` when it is a string)
     * becomes the assistant's message.
     *
     * @return array<string, mixed>
     */
    public function completeExecution(string $executionId, mixed $output = null, ?string $finalMessage = null, ?string $lease = null): array
    {
        $body = ['output' => $output] + self::fields(['final_message' => $finalMessage]);
        return $this->ending($executionId, '/complete', $body, $lease);
    }

    /**
     * Fails an external or worker execution and returns it (`POST /v1/executions/{id}/fail`).
     * With `$retry` a worker's execution goes back to the queue (until the server's
     * `--max-attempts`), and the next claim continues from its saved steps.
     *
     * @return array<string, mixed>
     */
    public function failExecution(string $executionId, string $errorMessage, bool $retry = false, ?string $lease = null): array
    {
        $body = ['error_message' => $errorMessage] + ($retry ? ['retry' => true] : []);
        return $this->ending($executionId, '/fail', $body, $lease);
    }

    /**
     * Pauses an execution with a question for the user and returns it (`POST
     * /v1/executions/{id}/pause`): the user's next message in the session answers it and
     * resumes the execution (a worker's is claimed again with `resume_answer`).
     *
     * @return array<string, mixed>
     */
    public function pauseExecution(string $executionId, string $question, ?string $lease = null): array
    {
        return $this->ending($executionId, '/pause', ['question' => $question], $lease);
    }

    /**
     * Posts a line of the agent's to its session (`POST /v1/executions/{id}/messages`, 201
     * Message): `$role` `info` (a status line) or `notification`, streamed as `message.created`.
     *
     * @return array<string, mixed>
     */
    public function postExecutionMessage(string $executionId, string $content, string $role = 'info', ?string $lease = null): array
    {
        return $this->json(
            'POST',
            $this->executionPath($executionId, '/messages'),
            ['role' => $role, 'content' => $content],
            headers: $this->leaseHeader($executionId, $lease),
        );
    }

    /**
     * Renews an execution's lease (`POST /v1/executions/{id}/heartbeat`): `['execution_id',
     * 'lease_expires_at', 'cancel_requested']`. `cancel_requested: true` means the execution
     * was cancelled: stop, write nothing more. LeaseLostException once the lease is gone.
     * Retried like a read.
     *
     * @return array<string, mixed>
     */
    public function heartbeat(string $executionId, ?string $lease = null, ?string $workerId = null): array
    {
        $lease ??= $this->leases[$executionId] ?? null;
        if ($lease === null) {
            throw new \InvalidArgumentException(sprintf('no lease for execution %s: pass the lease of its claim', $executionId));
        }
        return $this->json(
            'POST',
            $this->executionPath($executionId, '/heartbeat'),
            ['lease' => $lease] + self::fields(['worker_id' => $workerId]),
            idempotent: true,
            headers: [Worker::LEASE_HEADER => $lease],
        );
    }

    /**
     * Streams live tokens to the session's watchers as a `message.delta` event (`POST
     * /v1/executions/{id}/deltas`, 202; up to 64 KiB of text). Never stored. Not retried.
     */
    public function postDelta(string $executionId, string $text, ?string $lease = null): void
    {
        $this->http->call(
            'POST',
            $this->executionPath($executionId, '/deltas'),
            Http::encode(['text' => $text]),
            headers: $this->leaseHeader($executionId, $lease),
            expect: 'none',
        );
    }

    /**
     * Hands a worker's execution back to the queue at once without spending an attempt (`POST
     * /v1/executions/{id}/release`): a worker shutting down. Returns it, `pending` again.
     *
     * @return array<string, mixed>
     */
    public function releaseExecution(string $executionId, ?string $lease = null): array
    {
        return $this->ending($executionId, '/release', new \stdClass(), $lease);
    }

    // --- workers -----------------------------------------------------------------------------

    /**
     * The agent types messages can name (`GET /v1/agents`): each `['type', 'description',
     * 'builtin', 'workers_online', 'last_seen_at', 'config_schema']`, the built-in ones and
     * those the tenant's workers announced in the last 24 hours.
     *
     * @return list<array<string, mixed>>
     */
    public function listAgents(): array
    {
        return $this->get('/v1/agents')['items'] ?? [];
    }

    /**
     * Claims up to `$slots` executions of `$agents` (`POST /v1/workers/claim`): waits up to
     * `$waitS` seconds (0–25) for one to be runnable and returns the Claims (`execution`,
     * `session`, `attempt`, `lease`, `lease_expires_at`, `lease_s`, `heartbeat_interval_s`,
     * `input`, `input_text`, `resume_answer`, `steps`, `memory`, `snapshot`), maybe none.
     * `$slots = 0` only says the worker is alive. Worker does all of this for you.
     *
     * @param list<string|array<string, mixed>> $agents types, or `['type', 'description', 'config_schema']`
     * @return list<array<string, mixed>>
     */
    public function claim(string $workerId, array $agents, int $slots = 1, float $waitS = 0.0): array
    {
        $announced = array_map(static fn ($agent) => is_string($agent) ? ['type' => $agent] : $agent, $agents);
        $answer = $this->json(
            'POST',
            '/v1/workers/claim',
            ['worker_id' => $workerId, 'agents' => $announced, 'slots' => $slots, 'wait_s' => $waitS],
            timeout: $this->http->timeout + $waitS,
        );
        return $answer['items'] ?? [];
    }

    /**
     * Says a worker stopped cleanly (`DELETE /v1/workers/{worker_id}`): it is offline at once.
     * NotFoundException for a worker id the tenant never saw.
     */
    public function stopWorker(string $workerId): void
    {
        $this->http->call('DELETE', '/v1/workers/' . self::seg($workerId, 'workerId'), idempotent: true, expect: 'none');
    }

    // --- credentials -------------------------------------------------------------------------

    /**
     * Mints an end user's token (`POST /v1/tokens`, an admin's call): `['token', 'user_id',
     * 'expires_at']`. The token acts as user `$userId` of the caller's tenant with role `user`:
     * `new Client($url, $token)` sees and changes only that user's own sessions (another
     * user's are NotFoundException). `$ttlS` is 60 to 86,400 seconds (default 3,600). Hand it
     * to that user's browser. Retried like a read (minting twice stores nothing).
     *
     * @return array<string, mixed>
     */
    public function createToken(string $userId, ?int $ttlS = null): array
    {
        if ($userId === '') {
            throw new \InvalidArgumentException('userId must be a non-empty string');
        }
        return $this->json('POST', '/v1/tokens', self::fields(['user_id' => $userId, 'ttl_s' => $ttlS]), idempotent: true);
    }

    /**
     * Creates an API key (`POST /v1/keys`, an admin's call): `['id', 'key', 'user_id', 'role',
     * 'name', 'created_at']`, `key` being the secret, in this answer only. `$role` is `admin`,
     * `user` or `worker`. Not retried unless never sent.
     *
     * @return array<string, mixed>
     */
    public function createKey(string $userId, string $role = 'user', ?string $name = null): array
    {
        return $this->json('POST', '/v1/keys', self::fields(['user_id' => $userId, 'role' => $role, 'name' => $name]));
    }

    /**
     * The tenant's keys that still work, oldest first, never a secret (`GET /v1/keys`, an
     * admin's call).
     *
     * @return \Generator<int, array<string, mixed>>
     */
    public function listKeys(): \Generator
    {
        return $this->pages('/v1/keys', []);
    }

    /** Revokes a key (`DELETE /v1/keys/{id}`, an admin's call); NotFoundException for no such key. */
    public function deleteKey(string $keyId): void
    {
        $this->http->call('DELETE', '/v1/keys/' . self::seg($keyId, 'keyId'), idempotent: true, expect: 'none');
    }

    // --- events ------------------------------------------------------------------------------

    /**
     * A session's events (`GET /v1/sessions/{id}/events`, server-sent events) as they happen:
     * first the stored ones after event id `$after` (all of them when null), then live ones.
     *
     * When the connection drops (a server restart, the network, a proxy's timeout) it
     * reconnects by itself with `Last-Event-ID`, so no stored event is missed and none is
     * yielded twice. `message.delta` events (streamed tokens) are live only: their `id` is null
     * and they are not replayed. The loop ends when the caller breaks out of it, after the
     * event for which `$until` returns true (see Event::executionEnds()), or once `$timeout`
     * seconds have passed (without an error). `$includeStep` adds the whole Step to each
     * `step.completed` (`metadata.step`). A StepwiseException when the server refuses the
     * stream (NotFoundException, UnauthorizedException, ...).
     *
     * ```php
     * foreach ($client->events($sessionId, until: Event::executionEnds($executionId), timeout: 120) as $event) {
     *     echo $event->id, ' ', $event->event, ' ', $event->content(), "\n";
     * }
     * ```
     *
     * @param (callable(Event): bool)|null $until
     * @return \Generator<int, Event>
     */
    public function events(
        string $sessionId,
        ?int $after = null,
        ?callable $until = null,
        ?float $timeout = null,
        bool $includeStep = false,
    ): \Generator {
        if ($after !== null && $after < 0) {
            throw new \InvalidArgumentException('after must be an event id >= 0, got ' . $after);
        }
        $stream = new EventStream(
            $this->http,
            '/v1/sessions/' . self::seg($sessionId, 'sessionId') . '/events',
            $after,
            $includeStep ? ['include' => 'step'] : [],
            $timeout,
            $until,
        );
        return $stream->events();
    }

    // --- helpers -----------------------------------------------------------------------------

    /**
     * @param array<string, scalar|null> $query
     * @return array<string, mixed>
     */
    private function get(string $path, array $query = []): array
    {
        return $this->http->call('GET', $path, null, $query, idempotent: true);
    }

    /**
     * @param array<string, scalar|null> $query
     * @param array<string, string>      $headers
     * @return array<string, mixed>
     */
    private function json(
        string $method,
        string $path,
        mixed $body = null,
        bool $idempotent = false,
        array $query = [],
        array $headers = [],
        ?float $timeout = null,
    ): array {
        $answer = $this->http->call(
            $method,
            $path,
            $body === null ? null : Http::encode($body === [] ? new \stdClass() : $body),
            $query,
            $headers,
            $idempotent,
            $timeout,
        );
        if (!is_array($answer)) {
            throw new StepwiseException('invalid_response', sprintf('the answer to %s %s is not a JSON object', $method, $path));
        }
        return $answer;
    }

    /**
     * A write that ends the execution's run (complete, fail, pause, release): its lease goes.
     *
     * @return array<string, mixed>
     */
    private function ending(string $executionId, string $suffix, mixed $body, ?string $lease): array
    {
        try {
            $answer = $this->json('POST', $this->executionPath($executionId, $suffix), $body, headers: $this->leaseHeader($executionId, $lease));
        } catch (LeaseLostException $e) {
            unset($this->leases[$executionId]);
            throw $e;
        }
        unset($this->leases[$executionId]);
        return $answer;
    }

    /**
     * Every item of a list, page after page: nothing is requested until the loop starts.
     *
     * @param array<string, scalar|null> $query
     * @return \Generator<int, array<string, mixed>>
     */
    private function pages(string $path, array $query): \Generator
    {
        while (true) {
            $page = $this->get($path, $query);
            if (!is_array($page['items'] ?? null)) {
                throw new StepwiseException('invalid_response', sprintf('the answer to GET %s is not a list page', $path));
            }
            foreach ($page['items'] as $item) {
                yield $item;
            }
            $cursor = $page['next_cursor'] ?? null;
            if (!is_string($cursor) || $cursor === '') {
                return;
            }
            $query['cursor'] = $cursor;
        }
    }

    private function executionPath(string $executionId, string $suffix): string
    {
        return '/v1/executions/' . self::seg($executionId, 'executionId') . $suffix;
    }

    /** @return array<string, string> */
    private function leaseHeader(string $executionId, ?string $lease): array
    {
        $lease ??= $this->leases[$executionId] ?? null;
        return $lease === null ? [] : [Worker::LEASE_HEADER => $lease];
    }

    /** One path segment: a non-empty id, percent-encoded. */
    private static function seg(string $value, string $name): string
    {
        if (trim($value) === '') {
            throw new \InvalidArgumentException($name . ' must be a non-empty string');
        }
        return rawurlencode($value);
    }

    /**
     * The fields that are not null.
     *
     * @param array<string, mixed> $fields
     * @return array<string, mixed>
     */
    private static function fields(array $fields): array
    {
        return array_filter($fields, static fn ($value) => $value !== null);
    }

    /**
     * An array that must go out as a JSON object (`[]` would be a JSON list).
     *
     * @param array<string, mixed>|null $value
     * @return array<string, mixed>|\stdClass|null
     */
    private static function object(?array $value): array|\stdClass|null
    {
        return $value === [] ? new \stdClass() : $value;
    }

    /**
     * `$fields` with the empty arrays at `$keys` made JSON objects.
     *
     * @param array<string, mixed> $fields
     * @param list<string>         $keys
     * @return array<string, mixed>
     */
    private static function objects(array $fields, array $keys): array
    {
        foreach ($keys as $key) {
            if (($fields[$key] ?? null) === []) {
                $fields[$key] = new \stdClass();
            }
        }
        return $fields;
    }

    /**
     * A step's body: JSON objects where the API wants them.
     *
     * @param array<string, mixed> $step
     * @return array<string, mixed>|\stdClass
     */
    private static function step(array $step): array|\stdClass
    {
        if ($step === []) {
            return new \stdClass();
        }
        if (is_array($step['tool_calls'] ?? null)) {
            foreach ($step['tool_calls'] as $n => $call) {
                if (is_array($call)) {
                    $step['tool_calls'][$n] = self::objects($call, ['arguments']);
                }
            }
        }
        return self::objects($step, ['token_usage', 'error']);
    }

    /**
     * @param string|array<string, mixed>|null $agent
     * @return array<string, mixed>|null
     */
    private static function agent(string|array|null $agent): ?array
    {
        if ($agent === null) {
            return null;
        }
        if (is_string($agent)) {
            return ['type' => $agent];
        }
        if (!is_string($agent['type'] ?? null)) {
            throw new \InvalidArgumentException("agent must be a type or ['type' => ..., 'config' => [...]]");
        }
        return self::objects($agent, ['config']);
    }

    /** @param string|list<string>|null $value */
    private static function csv(string|array|null $value): ?string
    {
        return is_array($value) ? implode(',', $value) : $value;
    }

    /**
     * @param string|array<string, mixed>|null $agent
     * @param array<string, mixed>|null        $metadata
     * @return array<string, mixed>
     */
    private static function message(
        string $content,
        string|array|null $agent,
        ?string $relatedType,
        ?string $relatedId,
        ?string $contextUrl,
        ?array $metadata,
    ): array {
        return ['content' => $content] + self::fields([
            'agent' => self::agent($agent),
            'related_type' => $relatedType,
            'related_id' => $relatedId,
            'context_url' => $contextUrl,
            'metadata' => self::object($metadata),
        ]);
    }
}

<?php

declare(strict_types=1);

namespace Stepwise;

use Stepwise\Internal\Http;
use Stepwise\Internal\Paused;
use Stepwise\Internal\Text;

/**
 * Runs agent types of yours for Stepwise (docs/workers.md): claims their executions from the
 * server's queue (`POST /v1/workers/claim`, a long poll), runs your PHP callable for each one
 * with a Run, and writes its steps, live tokens, question and answer back under the claim's
 * lease.
 *
 * ```php
 * $worker = new Stepwise\Worker(new Stepwise\Client('http://127.0.0.1:7777', $key));
 * $worker->agent('greeter', function (Stepwise\Run $run): string {
 *     $run->step(['model_output' => 'Greeting the user', 'observations' => 'said hello']);
 *     return 'Hello, ' . $run->inputText;      // the final answer: the execution completes
 * }, description: 'Says hello');
 * $worker->run();                              // until SIGTERM/SIGINT
 * ```
 *
 * The callable's return value is the answer (a string becomes the assistant's message; any
 * other JSON value the execution's output); an exception fails the execution (Retry fails it
 * with `retry: true`, so it runs again); $run->ask() / $run->pause() pause it for the user's
 * answer.
 *
 * One worker process runs one execution at a time (PHP has no threads): run several processes
 * for more (supervisor, systemd, Kubernetes replicas), as with `php artisan queue:work`. The
 * lease is renewed by the run's own writes and by $run->check() (see Run).
 *
 * **Stopping.** run() installs SIGTERM and SIGINT handlers when the pcntl extension is loaded:
 * the first signal stops claiming (a claim in flight is cut short), and the running execution
 * either finishes (a callable that returns completes as usual) or, at its next write or
 * check(), gets Cancelled with reason `shutdown` and is handed back to the queue (`release`,
 * no attempt spent) for another worker to resume from its saved steps. Then the worker says
 * it stopped (`DELETE /v1/workers/{id}`) and run() returns. A second signal exits at once.
 * Without pcntl, call stop() (from a callable) or send SIGKILL (the lease then runs out and
 * another worker resumes the execution).
 */
final class Worker
{
    /** The header every write of a worker's execution carries its lease in. */
    public const LEASE_HEADER = 'Stepwise-Lease';

    private const MAX_WAIT_S = 25.0;

    /** This worker's id, `[A-Za-z0-9._:-]`, 1–128 characters (one per process). */
    public readonly string $workerId;

    /** @var array<string, array{handler: callable, description: ?string, config_schema: ?array<string, mixed>}> */
    private array $agents = [];
    private bool $stopping = false;
    private int $signals = 0;
    private ?Run $current = null;
    /** @var \Closure(string, string): void */
    private \Closure $log;
    private Http $http;
    private int $executed = 0;

    /**
     * @param Client      $client             the server and credential to work for
     * @param string|null $workerId           default `<host>-<pid>-<4 hex>`
     * @param float       $waitS              how long one claim waits for work (0–25 s)
     * @param float       $retryForS          how long a run's write is retried while the server is away
     * @param float       $maxBackoffS        the longest wait between claims while the server cannot be reached
     * @param callable|object|null $logger    a PSR-3 style logger (anything with `log($level, $message)`,
     *                                        e.g. Laravel's `Log::channel(...)`), a callable
     *                                        `fn(string $level, string $message)`, or null for lines on STDERR
     *                                        (info and above)
     */
    public function __construct(
        private readonly Client $client,
        ?string $workerId = null,
        private readonly float $waitS = self::MAX_WAIT_S,
        private readonly float $retryForS = 60.0,
        private readonly float $maxBackoffS = 10.0,
        callable|object|null $logger = null,
    ) {
        $this->workerId = $workerId ?? self::defaultWorkerId();
        if (!preg_match('/^[A-Za-z0-9._:-]{1,128}$/', $this->workerId)) {
            throw new \InvalidArgumentException('workerId must be 1-128 characters of [A-Za-z0-9._:-], got ' . var_export($this->workerId, true));
        }
        if ($waitS < 0 || $waitS > self::MAX_WAIT_S) {
            throw new \InvalidArgumentException(sprintf('waitS must be from 0 to %d, got %s', self::MAX_WAIT_S, $waitS));
        }
        $this->http = $client->transport();
        $this->log = self::logger($logger);
    }

    /**
     * Runs `$handler(Run $run)` for each execution of agent type `$type`.
     *
     * `$type` is 1–64 characters of `[A-Za-z0-9._-]` and not a built-in type of the server;
     * `$description` (up to 1,000 characters) and `$configSchema` (a JSON schema) are shown in
     * `GET /v1/agents` and the web UI's agent picker.
     *
     * @param callable(Run): mixed          $handler
     * @param array<string, mixed>|null     $configSchema
     */
    public function agent(string $type, callable $handler, ?string $description = null, ?array $configSchema = null): self
    {
        if (!preg_match('/^[A-Za-z0-9._-]{1,64}$/', $type)) {
            throw new \InvalidArgumentException('an agent type is 1-64 characters of [A-Za-z0-9._-], got ' . var_export($type, true));
        }
        if (isset($this->agents[$type])) {
            throw new \InvalidArgumentException(sprintf('agent %s is registered on this worker already', $type));
        }
        if ($description !== null && Text::length($description) > 1000) {
            throw new \InvalidArgumentException('description is at most 1,000 characters');
        }
        if (count($this->agents) >= 64) {
            throw new \InvalidArgumentException('a worker runs at most 64 agent types');
        }
        $this->agents[$type] = ['handler' => $handler, 'description' => $description, 'config_schema' => $configSchema];
        return $this;
    }

    /** @return list<string> the agent types this worker runs */
    public function agentTypes(): array
    {
        return array_keys($this->agents);
    }

    /**
     * Tells the server the agent types this worker runs, taking nothing (a claim with `slots:
     * 0`): messages may name them from now on. run() does it first.
     *
     * @throws StepwiseException
     */
    public function announce(): void
    {
        $this->requireAgents();
        $this->http->call('POST', '/v1/workers/claim', Http::encode($this->claimBody(0, 0.0)), timeout: 10.0);
    }

    /**
     * Claims and runs executions until stop() or SIGTERM/SIGINT (see the class notes), or until
     * `$maxExecutions` have run, or `$maxSeconds` have passed (checked between claims). Returns
     * how many executions it ran. Transient failures (the server restarting, 5xx) are retried
     * with backoff; a refusal that does not get better (a bad key: UnauthorizedException, a
     * `user` key: ForbiddenException, a bad agent name: InvalidRequestException) is thrown.
     *
     * @throws StepwiseException
     */
    public function run(?int $maxExecutions = null, ?float $maxSeconds = null): int
    {
        $this->requireAgents();
        $this->stopping = false;
        $this->signals = 0;
        $ran = 0;
        $restore = $this->installSignals();
        $deadline = $maxSeconds === null ? null : microtime(true) + $maxSeconds;
        $failures = 0;
        $failingSince = null;
        try {
            ($this->log)('info', sprintf(
                'worker %s serving %s at %s',
                $this->workerId,
                implode(', ', array_keys($this->agents)),
                $this->client->baseUrl,
            ));
            while (!$this->stopping) {
                if ($maxExecutions !== null && $ran >= $maxExecutions) {
                    break;
                }
                $wait = $this->waitS;
                if ($deadline !== null) {
                    $left = $deadline - microtime(true);
                    if ($left <= 0) {
                        break;
                    }
                    $wait = min($wait, $left);
                }
                try {
                    $claims = $this->claim(1, $wait);
                } catch (StepwiseException $e) {
                    if ($this->stopping) {
                        break;
                    }
                    if (!self::isTransient($e)) {
                        ($this->log)('error', 'the server refused this worker\'s claim: ' . $e->getMessage());
                        throw $e;
                    }
                    if ($failingSince === null) {
                        $failingSince = microtime(true);
                        ($this->log)('warning', sprintf('cannot claim (%s); retrying', $e->getMessage()));
                    }
                    $delay = min($this->maxBackoffS, 0.5 * (2 ** $failures)) * (0.75 + mt_rand() / mt_getrandmax() / 4);
                    $failures++;
                    $this->sleep($delay);
                    continue;
                }
                if ($failingSince !== null) {
                    ($this->log)('info', sprintf('reconnected to %s after %.1f s', $this->client->baseUrl, microtime(true) - $failingSince));
                    $failingSince = null;
                }
                $failures = 0;
                foreach ($claims ?? [] as $claim) {
                    $this->execute($claim);
                    $ran++;
                }
            }
        } finally {
            $this->sayStopped();
            $restore();
        }
        ($this->log)('info', sprintf('worker %s stopped', $this->workerId));
        return $ran;
    }

    /**
     * One claim (waiting up to `$waitS` seconds, default the worker's) and the run of what it
     * got: returns how many executions ran (0 or 1). For a loop of your own — a scheduled
     * Laravel command, a test. Installs no signal handlers and does not say the worker stopped.
     *
     * @throws StepwiseException
     */
    public function runOnce(?float $waitS = null): int
    {
        $this->requireAgents();
        $this->stopping = false;
        $claims = $this->claim(1, $waitS ?? $this->waitS);
        foreach ($claims ?? [] as $claim) {
            $this->execute($claim);
        }
        return count($claims ?? []);
    }

    /**
     * Stops the worker gracefully: no more claims; the running execution finishes, or at its
     * next write or check() is handed back to the queue. Callable from an agent or a signal
     * handler.
     */
    public function stop(): void
    {
        $this->stopping = true;
    }

    /** Whether stop() was called or a stop signal arrived. */
    public function stopping(): bool
    {
        return $this->stopping;
    }

    /** The run in progress, or null. */
    public function current(): ?Run
    {
        return $this->current;
    }

    /** How many executions this worker object has run (completed, failed, paused or handed back). */
    public function executed(): int
    {
        return $this->executed;
    }

    // --- claiming ----------------------------------------------------------------------------

    /**
     * @return list<array<string, mixed>>|null null when the claim was cut short by a stop
     * @throws StepwiseException
     */
    private function claim(int $slots, float $waitS): ?array
    {
        $path = '/v1/workers/claim';
        $response = $this->http->sendAbortable(
            'POST',
            $path,
            Http::encode($this->claimBody($slots, $waitS)),
            [],
            $waitS + 15.0,
            fn (): bool => $this->stopping,
        );
        if ($response === null) {
            return null;
        }
        $answer = $this->http->read('POST', $path, [], $response);
        $items = is_array($answer) ? ($answer['items'] ?? []) : [];
        return array_values(array_filter($items, 'is_array'));
    }

    /** @return array<string, mixed> */
    private function claimBody(int $slots, float $waitS): array
    {
        $agents = [];
        foreach ($this->agents as $type => $spec) {
            $agents[] = [
                'type' => $type,
                'description' => $spec['description'],
                'config_schema' => $spec['config_schema'] === null ? null : (object) $spec['config_schema'],
            ];
        }
        return ['worker_id' => $this->workerId, 'agents' => $agents, 'slots' => $slots, 'wait_s' => $waitS];
    }

    // --- running -----------------------------------------------------------------------------

    /** @param array<string, mixed> $claim */
    private function execute(array $claim): void
    {
        $run = new Run(
            $claim,
            $this->http,
            $this->workerId,
            $this->retryForS,
            fn (): bool => $this->stopping,
            $this->log,
        );
        $spec = $this->agents[$run->agentType] ?? null;
        $this->executed++;
        if ($spec === null || $this->stopping) {
            if ($spec === null) {
                ($this->log)('error', sprintf('claimed execution %s of agent type %s, which this worker does not run; handing it back', $run->executionId, $run->agentType));
            }
            $this->release($run);
            return;
        }
        ($this->log)('info', sprintf(
            'execution %s (%s) claimed%s%s',
            $run->executionId,
            $run->agentType,
            $run->attempt > 1 ? ', attempt ' . $run->attempt : '',
            $run->answer !== null ? ', resuming with the user\'s answer' : '',
        ));
        $this->current = $run;
        try {
            $outcome = $this->call($run, $spec['handler']);
            $this->finish($run, $outcome);
        } catch (\Throwable $e) {
            ($this->log)('error', sprintf('execution %s: the worker could not end it (%s); its lease runs out and it runs again', $run->executionId, $e->getMessage()));
        } finally {
            $this->current = null;
        }
    }

    /**
     * Runs the callable; its outcome: ['complete', result] | ['fail', [message, retry]] |
     * ['paused', null] | ['stopped', null].
     *
     * @return array{0: string, 1: mixed}
     */
    private function call(Run $run, callable $handler): array
    {
        try {
            $run->recordAnswer();
            $result = $handler($run);
            $outcome = ['complete', $result];
        } catch (Paused) {
            $outcome = ['paused', null];
        } catch (Cancelled $e) {
            // Thrown by the agent itself, not by a cancel: a failure like any other.
            $outcome = $run->cancelReason() === null ? ['fail', [self::summary($e), false]] : ['stopped', null];
        } catch (Retry $e) {
            $outcome = ['fail', [self::summary($e), true]];
        } catch (\Throwable $e) {
            if ($run->cancelled()) {
                $outcome = ['stopped', null]; // e.g. an agent that wrapped the Cancelled
            } else {
                ($this->log)('error', sprintf('execution %s (%s) failed: %s', $run->executionId, $run->agentType, $e));
                $outcome = ['fail', [self::summary($e), false]];
            }
        }
        if ($run->isPaused()) {
            $outcome = ['paused', null]; // whatever the agent did after its question
        }
        return $outcome;
    }

    /** @param array{0: string, 1: mixed} $outcome */
    private function finish(Run $run, array $outcome): void
    {
        [$kind, $value] = $outcome;
        if ($kind === 'paused') {
            ($this->log)('info', sprintf('execution %s paused: waiting for the user\'s answer', $run->executionId));
            return;
        }
        if ($run->leaseLost()) {
            ($this->log)('info', sprintf(
                'execution %s %s; nothing more written',
                $run->executionId,
                $run->cancelReason() === 'cancelled' ? 'was cancelled' : 'lost its lease (taken over)',
            ));
            return;
        }
        if ($run->cancelReason() === 'shutdown') {
            // Told to stop: whatever it returned may be a bail-out, not its answer.
            $this->release($run);
            return;
        }
        if ($kind === 'stopped') {
            ($this->log)('info', sprintf('execution %s stopped', $run->executionId));
            return;
        }
        try {
            if ($kind === 'complete') {
                $body = self::completion($value);
                if ($body !== null) {
                    $run->end('/complete', $body);
                    ($this->log)('info', sprintf('execution %s completed', $run->executionId));
                    return;
                }
                $value = ['the answer cannot be sent as JSON: ' . json_last_error_msg(), false];
            }
            [$message, $retry] = $value;
            $run->end('/fail', ['error_message' => $message] + ($retry ? ['retry' => true] : []));
            ($this->log)('info', sprintf('execution %s failed%s: %s', $run->executionId, $retry ? ' (retry)' : '', $message));
        } catch (Cancelled) {
            ($this->log)('info', sprintf('execution %s: its lease was lost before it ended; nothing written', $run->executionId));
        }
    }

    /** Hands an execution back to the queue without spending an attempt. */
    private function release(Run $run): void
    {
        try {
            $run->end('/release', new \stdClass());
            ($this->log)('info', sprintf('execution %s handed back to the queue', $run->executionId));
        } catch (Cancelled) {
            // its lease is gone already: nothing to hand back
        } catch (StepwiseException $e) {
            ($this->log)('warning', sprintf('execution %s could not be handed back (%s); it runs again when its lease ends', $run->executionId, $e->getMessage()));
        }
        $run->cancel('shutdown', true);
    }

    /**
     * The `complete` body for a callable's return value; null when it is not JSON.
     *
     * @return array<string, mixed>|null
     */
    private static function completion(mixed $result): ?array
    {
        if (is_string($result)) {
            return ['output' => $result, 'final_message' => $result];
        }
        if ($result === null) {
            return ['output' => null];
        }
        if ($result instanceof \Stringable && !$result instanceof \JsonSerializable) {
            return ['output' => (string) $result, 'final_message' => (string) $result];
        }
        if (json_encode($result) === false) {
            return null;
        }
        return ['output' => $result];
    }

    /** `Class: first line of the message`, short enough for `error_message`. */
    private static function summary(\Throwable $error): string
    {
        $lines = preg_split('/\R/', trim($error->getMessage())) ?: [''];
        $short = (new \ReflectionClass($error))->getShortName();
        $summary = $lines[0] === '' ? $short : $short . ': ' . $lines[0];
        return Text::length($summary) > 2000 ? Text::cut($summary, 1999) . '…' : $summary;
    }

    private static function isTransient(StepwiseException $e): bool
    {
        return $e->status === null || $e->status >= 500 || $e->status === 408 || $e->status === 429;
    }

    // --- stopping ----------------------------------------------------------------------------

    /**
     * Installs the SIGTERM/SIGINT handlers (when pcntl is there); returns what puts the previous
     * ones back.
     *
     * @return \Closure(): void
     */
    private function installSignals(): \Closure
    {
        if (!function_exists('pcntl_signal') || !function_exists('pcntl_async_signals')) {
            return static function (): void {
            };
        }
        $async = pcntl_async_signals(true);
        $previous = [];
        foreach ([SIGTERM, SIGINT] as $signal) {
            $previous[$signal] = pcntl_signal_get_handler($signal);
            pcntl_signal($signal, function (int $signo): void {
                $this->signals++;
                $name = $signo === SIGTERM ? 'SIGTERM' : 'SIGINT';
                if ($this->signals > 1) {
                    ($this->log)('warning', $name . ' again: exiting at once');
                    exit(128 + $signo);
                }
                ($this->log)('info', $name . ': stopping (the running execution finishes or goes back to the queue; ' . $name . ' again exits at once)');
                $this->stop();
            });
        }
        return static function () use ($previous, $async): void {
            foreach ($previous as $signal => $handler) {
                pcntl_signal($signal, $handler ?? SIG_DFL);
            }
            pcntl_async_signals($async);
        };
    }

    private function sayStopped(): void
    {
        try {
            $this->http->call('DELETE', '/v1/workers/' . rawurlencode($this->workerId), timeout: 5.0, expect: 'none');
        } catch (StepwiseException $e) {
            // A server that went away: the worker counts as offline once its last claim ran out.
            ($this->log)('debug', 'could not say the worker stopped: ' . $e->getMessage());
        }
    }

    /** Sleeps up to `$seconds`, waking early when the worker stops. */
    private function sleep(float $seconds): void
    {
        $until = microtime(true) + $seconds;
        while (!$this->stopping && ($left = $until - microtime(true)) > 0) {
            usleep((int) round(min($left, 0.1) * 1e6));
        }
    }

    private function requireAgents(): void
    {
        if ($this->agents === []) {
            throw new \LogicException('the worker has no agents: register some with $worker->agent(...) first');
        }
    }

    /** `<host>-<pid>-<4 hex>`, in the characters a worker id may hold. */
    private static function defaultWorkerId(): string
    {
        $host = trim((string) preg_replace('/[^A-Za-z0-9._-]+/', '-', gethostname() ?: 'worker'), '-') ?: 'worker';
        return substr($host, 0, 100) . '-' . getmypid() . '-' . bin2hex(random_bytes(2));
    }

    /** @return \Closure(string, string): void */
    private static function logger(callable|object|null $logger): \Closure
    {
        if ($logger === null) {
            return static function (string $level, string $message): void {
                if (in_array($level, ['info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'], true)) {
                    fwrite(STDERR, sprintf("[%s] stepwise.worker %s: %s\n", gmdate('H:i:s'), $level, $message));
                }
            };
        }
        if (is_callable($logger)) {
            return \Closure::fromCallable($logger);
        }
        if (method_exists($logger, 'log')) {
            return static function (string $level, string $message) use ($logger): void {
                $logger->log($level, $message);
            };
        }
        throw new \InvalidArgumentException('logger must be callable or have a log($level, $message) method');
    }
}

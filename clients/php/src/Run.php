<?php

declare(strict_types=1);

namespace Stepwise;

use Stepwise\Internal\Http;
use Stepwise\Internal\Paused;
use Stepwise\Internal\RetryPolicy;
use Stepwise\Internal\Text;

/**
 * One claimed execution, as a Worker's agent callable sees it.
 *
 * The callable takes a Run and returns the final answer (a string, any JSON value, or null).
 * Everything it writes (step(), call(), delta(), ask(), ...) carries the lease of this claim in
 * the `Stepwise-Lease` header; once the lease is gone (the execution was cancelled, or taken
 * over by another worker after this one froze past its lease) a write throws Cancelled and
 * writes nothing.
 *
 * **Resuming.** On a new claim of the same execution — a worker that died, a Retry, the user's
 * answer to a question — the callable runs again from its first line and *replays*: the k-th
 * step() returns the k-th saved step without writing it, the k-th call() returns its saved
 * result without calling its function, the k-th ask() its saved answer; steps are written
 * again only past the saved ones, numbered on. `$savedSteps` holds what earlier attempts saved
 * (`attempt` > 1 after a lost worker), for a callable that prefers to pick up from them by
 * itself (then call skipReplay()).
 *
 * **Heartbeats.** PHP has no threads, so the lease is renewed by the run's own calls: every
 * write renews it, and check() sends a heartbeat when one is due (every
 * `heartbeatIntervalS`, a third of the lease). A step that runs longer than the lease
 * without writing must call `$run->check()` (or heartbeat()) now and then — in the loop of a
 * long computation, between chunks of a slow API's answer — or the server gives the execution
 * to another worker (this one then gets Cancelled with reason `lease_lost`). Alternatively
 * start the server with a `--lease-secs` that covers the longest step.
 */
final class Run
{
    /** Step fields that differ from one attempt to the next by nature: not compared on replay. */
    private const NOT_COMPARED = ['step_number', 'started_at', 'ended_at'];
    private const MAX_ERROR_CHARS = 4000;

    /** The execution's id. */
    public readonly string $executionId;
    /** Its session's id (null for an execution without a session). */
    public readonly ?string $sessionId;
    /** @var array<string, mixed>|null the session, as claimed */
    public readonly ?array $session;
    /** @var array<string, mixed> the execution, as claimed (`running`) */
    public readonly array $execution;
    /** The agent type this run is for. */
    public readonly string $agentType;
    /** The message's `agent.config` (null when it gave none). */
    public readonly mixed $agentConfig;
    /** 1 for the first run; 2+ when an earlier worker was lost or an attempt failed with Retry. */
    public readonly int $attempt;
    /** The lease token, sent with every write. */
    public readonly string $lease;
    /** The lease's length, in seconds. */
    public readonly float $leaseS;
    /** How often the lease should be renewed, in seconds (a third of it). */
    public readonly float $heartbeatIntervalS;
    /** The execution's input as stored (`['message' => ...]` for a message, with `context`). */
    public readonly mixed $input;
    /** The input's text: the user's message. */
    public readonly string $inputText;
    /** @var array<string, mixed>|null where the message came from: related_type, related_id, context_url, metadata */
    public readonly ?array $context;
    /** The user's answer when this claim resumes a pause, else null. */
    public readonly mixed $answer;
    /** @var array<string, mixed> the session's agent memory before this execution: restored, steps, summary */
    public readonly array $memory;
    /** @var list<array<string, mixed>> the steps this execution saved before this claim, by step_number */
    public readonly array $savedSteps;
    /** @var array<string, mixed> the whole claim, as the server sent it */
    public readonly array $claim;

    /** @var list<array<string, mixed>> */
    private array $steps;
    /** @var array<string, mixed>|null */
    private ?array $snapshot;
    private ?string $leaseExpiresAt;
    private ?string $cancelReason = null;
    private bool $dead = false;
    private bool $paused = false;
    private int $asked = 0;
    /** @var list<mixed> the answers saved as user_input steps, in order */
    private array $answers = [];
    /** @var list<int> their indexes in $steps */
    private array $answerAt = [];
    /** The index in $steps of the next saved step that step() or call() replays. */
    private int $cursor = 0;
    private float $lastRenewal;
    private RetryPolicy $once;

    /**
     * @param array<string, mixed>              $claim        a Claim of `POST /v1/workers/claim`
     * @param (\Closure(): bool)|null             $stopRequested whether the worker is stopping
     * @param (\Closure(string, string): void)|null $log        (level, message)
     * @internal made by the Worker
     */
    public function __construct(
        array $claim,
        private readonly Http $http,
        private readonly ?string $workerId = null,
        private readonly float $retryFor = 60.0,
        private readonly ?\Closure $stopRequested = null,
        private readonly ?\Closure $log = null,
    ) {
        $execution = is_array($claim['execution'] ?? null) ? $claim['execution'] : [];
        $this->claim = $claim;
        $this->execution = $execution;
        $this->executionId = (string) ($execution['id'] ?? '');
        $this->sessionId = is_string($execution['session_id'] ?? null) ? $execution['session_id'] : null;
        $this->session = is_array($claim['session'] ?? null) ? $claim['session'] : null;
        $this->agentType = (string) ($execution['agent_type'] ?? '');
        $this->agentConfig = $execution['agent_config'] ?? null;
        $this->attempt = (int) ($claim['attempt'] ?? 1) ?: 1;
        $this->lease = (string) ($claim['lease'] ?? '');
        $this->leaseExpiresAt = is_string($claim['lease_expires_at'] ?? null) ? $claim['lease_expires_at'] : null;
        $this->leaseS = (float) ($claim['lease_s'] ?? 15.0) ?: 15.0;
        $interval = (float) ($claim['heartbeat_interval_s'] ?? 0.0);
        $this->heartbeatIntervalS = $interval > 0 ? $interval : $this->leaseS / 3;
        $this->input = array_key_exists('input', $claim) ? $claim['input'] : ($execution['input'] ?? null);
        $text = $claim['input_text'] ?? null;
        if (!is_string($text)) {
            $raw = is_array($this->input) && array_key_exists('message', $this->input) ? $this->input['message'] : $this->input;
            $text = self::textOf($raw);
        }
        $this->inputText = $text;
        $context = is_array($this->input) ? ($this->input['context'] ?? null) : null;
        $this->context = is_array($context) ? $context : null;
        $this->answer = $claim['resume_answer'] ?? null;
        $memory = $claim['memory'] ?? null;
        $this->memory = is_array($memory) ? $memory : ['restored' => 'empty', 'steps' => [], 'summary' => null];
        $steps = array_values(array_filter($claim['steps'] ?? [], 'is_array'));
        usort($steps, static fn (array $a, array $b): int => ((int) ($a['step_number'] ?? 0)) <=> ((int) ($b['step_number'] ?? 0)));
        $this->savedSteps = $steps;
        $this->steps = $steps;
        $this->snapshot = is_array($claim['snapshot'] ?? null) ? $claim['snapshot'] : null;
        foreach ($steps as $index => $step) {
            if (self::isAnswer($step)) {
                $this->answers[] = self::answerIn($step);
                $this->answerAt[] = $index;
            }
        }
        $this->lastRenewal = microtime(true);
        $this->once = new RetryPolicy(0);
    }

    public function __debugInfo(): array
    {
        return [
            'executionId' => $this->executionId,
            'agentType' => $this->agentType,
            'attempt' => $this->attempt,
            'cancelReason' => $this->cancelReason,
        ];
    }

    // --- state -------------------------------------------------------------------------------

    /**
     * This execution's steps so far: the saved ones, then those this run wrote.
     *
     * @return list<array<string, mixed>>
     */
    public function steps(): array
    {
        return $this->steps;
    }

    /**
     * This execution's latest snapshot (from the claim, or the last saveSnapshot()), or null.
     *
     * @return array<string, mixed>|null
     */
    public function snapshot(): ?array
    {
        return $this->snapshot;
    }

    /** When the lease runs out unless renewed (RFC 3339), as last heard from the server. */
    public function leaseExpiresAt(): ?string
    {
        return $this->leaseExpiresAt;
    }

    /** Whether this run is a resume: an earlier attempt or question saved steps. */
    public function resumed(): bool
    {
        return $this->savedSteps !== [];
    }

    /** Whether the next step() or call() replays a saved step rather than writing one. */
    public function replaying(): bool
    {
        for ($i = $this->cursor, $n = count($this->steps); $i < $n; $i++) {
            if (($this->steps[$i]['kind'] ?? null) !== 'user_input') {
                return true;
            }
        }
        return false;
    }

    /**
     * Leaves the saved steps as they are: the next step() or call() writes the step after the
     * last saved one. For a callable that goes on from `$savedSteps` by itself instead of
     * running again from its start.
     */
    public function skipReplay(): void
    {
        $this->cursor = count($this->steps);
    }

    // --- cancellation and heartbeats ---------------------------------------------------------

    /** Whether the run must stop (cancelled, lease lost, or the worker is shutting down). */
    public function cancelled(): bool
    {
        return $this->cancelReason !== null;
    }

    /** Why the run must stop: `cancelled`, `lease_lost`, `shutdown`, or null while it may go on. */
    public function cancelReason(): ?string
    {
        return $this->cancelReason;
    }

    /** Whether the lease is gone (cancelled, taken over, paused): nothing more is written. */
    public function leaseLost(): bool
    {
        return $this->dead;
    }

    /**
     * Call it between units of long work: sends a heartbeat when one is due (PHP has no thread
     * to do it), and throws Cancelled when the run must stop — the execution was cancelled,
     * another worker took it over, or the worker got SIGTERM/SIGINT.
     *
     * @throws Cancelled
     */
    public function check(): void
    {
        $this->stopIfAsked();
        if ($this->cancelReason !== null) {
            throw new Cancelled($this->cancelReason);
        }
        if (microtime(true) - $this->lastRenewal >= $this->heartbeatIntervalS) {
            $this->heartbeat();
        }
    }

    /**
     * Renews the lease now (`POST /v1/executions/{id}/heartbeat`). Throws Cancelled when the
     * server says the execution was cancelled or the lease is gone; a heartbeat that gets no
     * answer is only logged (the lease has two more intervals to go).
     *
     * @throws Cancelled
     */
    public function heartbeat(): void
    {
        if ($this->dead) {
            throw new Cancelled($this->cancelReason ?? 'lease_lost');
        }
        $body = ['lease' => $this->lease];
        if ($this->workerId !== null) {
            $body['worker_id'] = $this->workerId;
        }
        try {
            $answer = $this->http->call(
                'POST',
                $this->path('/heartbeat'),
                Http::encode($body),
                headers: [Worker::LEASE_HEADER => $this->lease],
                idempotent: true,
                timeout: max(1.0, min($this->heartbeatIntervalS, 10.0)),
                retry: $this->once,
            );
        } catch (StepwiseException $e) {
            if ($e->errorCode === 'lease_lost' || $e->errorCode === 'not_found') {
                $this->cancel('lease_lost', true);
                throw new Cancelled('lease_lost', $e);
            }
            $this->log('warning', sprintf('execution %s: a heartbeat failed (%s); the next call tries again', $this->executionId, $e->getMessage()));
            return;
        }
        $this->lastRenewal = microtime(true);
        if (is_string($answer['lease_expires_at'] ?? null)) {
            $this->leaseExpiresAt = $answer['lease_expires_at'];
        }
        if (($answer['cancel_requested'] ?? false) === true) {
            $this->cancel('cancelled', true);
            throw new Cancelled('cancelled');
        }
    }

    // --- writes ------------------------------------------------------------------------------

    /**
     * Saves the next step of this execution and returns it as stored, or replays it.
     *
     * `$fields` are the Step fields of `POST /v1/executions/{id}/steps`: `kind` (`action` by
     * default; `planning`, `task`, `user_input`, `final_answer`), `model_output`, `tool_calls`
     * (`[['id' => ..., 'name' => ..., 'arguments' => [...]]]`), `code`, `observations`, `error`
     * (`['kind' => ..., 'message' => ...]`), `output`, `token_usage`, `started_at`, `ended_at`.
     * The step gets the number after the last saved one (numbering goes on across attempts)
     * and is retried while the server is away without being written twice.
     *
     * Replay: while this claim has saved steps not replayed yet (replaying()), it returns the
     * next one as stored and writes nothing (a warning is logged when `$fields` differ from it).
     *
     * @param array<string, mixed> $fields
     * @return array<string, mixed>
     * @throws Cancelled when the run must stop
     */
    public function step(array $fields = []): array
    {
        $body = array_filter($fields, static fn ($v) => $v !== null);
        $body['kind'] ??= 'action';
        $saved = $this->takeSaved($body['kind'] === 'user_input');
        if ($saved !== null) {
            if (isset($body['step_number']) && $body['step_number'] !== ($saved['step_number'] ?? null)) {
                throw new \LogicException(sprintf('this call replays step %s, not %s', $saved['step_number'] ?? '?', $body['step_number']));
            }
            [$called, $stored] = self::differences($body, $saved);
            if ($called !== []) {
                $this->log('warning', sprintf(
                    'execution %s: replaying step %s, which differs from this call: called with %s, saved %s',
                    $this->executionId,
                    $saved['step_number'] ?? '?',
                    self::short($called),
                    self::short($stored),
                ));
            }
            return $saved;
        }
        $this->stopIfAsked();
        $stored = $this->append($body);
        $this->cursor = count($this->steps);
        return $stored;
    }

    /**
     * Runs `$fn(...$args)` once for this position of the run and saves its result as a step:
     * a tool call `$name` with the arguments, the result JSON-encoded in `observations`. On a
     * later claim (a lost worker, a Retry, the user's answer) the same call returns the saved
     * result without calling `$fn` (an activity, as in Temporal): a tool that charges a card or
     * sends a mail runs once per run, not once per attempt.
     *
     * A result comes back equal when it is JSON (strings, numbers, booleans, null, arrays of
     * them); an object comes back as what json_encode() makes of it. An exception of `$fn` is
     * saved as the step's `error` and thrown; a replay throws it again (the same class with the
     * saved message when it can be made so, else a CallError). Cancelled and Retry are not
     * saved. Calls are matched by their order in the run.
     *
     * @throws Cancelled when the run must stop
     */
    public function call(string $name, callable $fn, mixed ...$args): mixed
    {
        $arguments = self::callArguments($args);
        $saved = $this->takeSaved(false);
        if ($saved !== null) {
            $replayed = $this->replayCall($name, $arguments, $saved, $hit);
            if ($hit) {
                return $replayed;
            }
        }
        $this->check();
        try {
            $result = $fn(...$args);
        } catch (Retry | Cancelled | Paused $e) {
            throw $e;
        } catch (\Throwable $e) {
            if ($saved === null) {
                $this->saveCall($name, $arguments, null, $e);
            }
            throw $e;
        }
        if ($saved === null) {
            $this->saveCall($name, $arguments, $result, null);
        }
        return $result;
    }

    /**
     * Asks the user `$question`: returns the answer when this run has it, else pauses the
     * execution (see pause()) and the callable stops here. When the user answers, the callable
     * runs again from its start on a new claim and this same call returns the answer. Several
     * questions get their answers in order.
     *
     * @throws Cancelled when the run must stop
     */
    public function ask(string $question): string
    {
        if ($this->asked < count($this->answers)) {
            $answer = $this->answers[$this->asked];
            $at = $this->answerAt[$this->asked] ?? null;
            $this->asked++;
            if ($at !== null && $at >= $this->cursor) {
                $this->cursor = $at + 1;
            }
            return self::textOf($answer);
        }
        $this->pause($question);
    }

    /**
     * Asks the user `$question` and ends this run: the question is saved as a `user_input`
     * step, the execution pauses (`execution.paused`) and gives its lease up; the user's answer
     * (their next message in the session) queues it again, and the next claim — on any worker —
     * has it in `$answer` and in ask(). Never returns.
     *
     * @throws Cancelled when the run must stop
     */
    public function pause(string $question): never
    {
        $question = trim($question) === '' ? '?' : trim($question);
        $last = $this->steps === [] ? null : $this->steps[count($this->steps) - 1];
        $askedAlready = $last !== null && count($this->steps) > $this->cursor
            && ($last['kind'] ?? null) === 'user_input' && self::isQuestion($last)
            && ($last['model_output'] ?? null) === $question;
        if (!$askedAlready) {
            $this->append([
                'kind' => 'user_input',
                'model_output' => $question,
                'tool_calls' => [[
                    'id' => 'ask-' . $this->nextNumber(),
                    'name' => 'user_input',
                    'arguments' => ['question' => $question],
                ]],
                'output' => ['question' => $question],
            ]);
        }
        $this->cursor = count($this->steps);
        $this->write('/pause', ['question' => $question]);
        // The lease went with the pause: nothing more is written by this run.
        $this->paused = true;
        $this->dead = true;
        throw new Paused($question);
    }

    /**
     * Posts a line of the agent's to its session (`POST /v1/executions/{id}/messages`): an
     * `info` status line ("Looking up order 1042…"), or a `notification` for the user. Returns
     * the stored Message; null while replaying (the attempt that saved those steps posted it).
     *
     * @return array<string, mixed>|null
     * @throws Cancelled when the run must stop
     */
    public function info(string $text, bool $notification = false): ?array
    {
        if (trim($text) === '') {
            throw new \InvalidArgumentException('an info line needs some text');
        }
        if ($this->replaying()) {
            return null;
        }
        return $this->write('/messages', ['role' => $notification ? 'notification' : 'info', 'content' => $text]);
    }

    /**
     * Streams `$text` (live tokens) to the session's watchers as `message.delta` events. Best
     * effort: never stored, never retried; a delta that fails is dropped (a lost lease shows
     * at the next write). Up to 64 KiB a call.
     */
    public function delta(string $text): void
    {
        if ($text === '' || $this->dead || $this->paused) {
            return;
        }
        try {
            $this->http->call(
                'POST',
                $this->path('/deltas'),
                Http::encode(['text' => $text]),
                headers: [Worker::LEASE_HEADER => $this->lease],
                timeout: 10.0,
                expect: 'none',
                retry: $this->once,
            );
            $this->lastRenewal = microtime(true);
        } catch (StepwiseException $e) {
            if ($e->errorCode === 'lease_lost' || $e->errorCode === 'not_found') {
                $this->cancel('lease_lost', true);
            }
        }
    }

    /**
     * Saves a snapshot of this execution's state (any JSON) and returns it; `$fields` as
     * `POST /v1/executions/{id}/snapshots` (`step_number`, `is_final`, `replace`, ...).
     *
     * @param array<string, mixed> $fields
     * @return array<string, mixed>
     * @throws Cancelled when the run must stop
     */
    public function saveSnapshot(mixed $state, array $fields = []): array
    {
        $body = ['state' => $state] + array_filter($fields, static fn ($v) => $v !== null);
        $saved = $this->write('/snapshots', $body, retry: false);
        $this->snapshot = $saved;
        return $saved;
    }

    /**
     * Runs another worker's agent type on `$inputText` as a child of this execution, in this
     * session, and returns its answer text: the child is queued (`POST
     * /v1/sessions/{id}/executions`) and run by a worker of that type (another process: this
     * one is busy); this polls it, heartbeating meanwhile. A StepwiseException (errorCode `subagent_failed`) when it fails or
     * is cancelled, TimeoutException after `$timeout` seconds.
     *
     * @throws Cancelled when the run must stop
     */
    public function subagent(string $agentType, string $inputText, mixed $config = null, float $pollInterval = 0.25, ?float $timeout = null): string
    {
        if ($this->sessionId === null) {
            throw new \LogicException('this execution has no session to start a subagent in');
        }
        $this->check();
        $body = ['agent_type' => $agentType, 'input' => ['message' => $inputText], 'parent_execution_id' => $this->executionId];
        if ($config !== null) {
            $body['agent_config'] = $config;
        }
        $child = $this->http->call('POST', '/v1/sessions/' . rawurlencode($this->sessionId) . '/executions', Http::encode($body));
        $childId = (string) $child['id'];
        $deadline = $timeout === null ? null : microtime(true) + $timeout;
        while (in_array($child['status'] ?? null, ['pending', 'running', 'paused'], true)) {
            $this->check();
            if ($deadline !== null && microtime(true) > $deadline) {
                throw new TimeoutException('timeout', sprintf('subagent %s is still %s after %s s', $childId, $child['status'], $timeout));
            }
            usleep((int) round($pollInterval * 1e6));
            $child = $this->http->call('GET', '/v1/executions/' . rawurlencode($childId), idempotent: true);
        }
        if (($child['status'] ?? null) !== 'completed') {
            throw new StepwiseException(
                'subagent_failed',
                sprintf('subagent %s (%s) %s: %s', $agentType, $childId, $child['status'] ?? '?', $child['error_message'] ?? 'no answer'),
                body: $child,
            );
        }
        $output = $child['output'] ?? null;
        if (is_array($output)) {
            foreach (['final_message', 'final_answer', 'answer', 'text', 'output'] as $key) {
                if (is_string($output[$key] ?? null)) {
                    return $output[$key];
                }
            }
        }
        return self::textOf($output);
    }

    // --- used by the Worker ------------------------------------------------------------------

    /** @internal whether the run paused (its question is asked) */
    public function isPaused(): bool
    {
        return $this->paused;
    }

    /**
     * Makes sure the resume answer is the last step (a `user_input` step), once: the server
     * saves it so; this covers one that does not.
     *
     * @internal
     */
    public function recordAnswer(): void
    {
        if ($this->answer === null) {
            return;
        }
        $last = $this->steps === [] ? null : $this->steps[count($this->steps) - 1];
        if ($last !== null && self::isAnswer($last)) {
            return;
        }
        $this->append(['kind' => 'user_input', 'observations' => self::textOf($this->answer), 'output' => ['answer' => $this->answer]]);
        $this->answers[] = $this->answer;
        $this->answerAt[] = count($this->steps) - 1;
    }

    /** @internal marks the run cancelled (the first reason wins) */
    public function cancel(string $reason, bool $dead): void
    {
        if ($dead) {
            $this->dead = true;
        }
        $this->cancelReason ??= $reason;
    }

    /**
     * A write that ends the run (complete, fail, release), made by the Worker even while it
     * stops.
     *
     * @internal
     * @return array<string, mixed>|null
     */
    public function end(string $suffix, mixed $body): ?array
    {
        return $this->write($suffix, $body, final: true);
    }

    // --- internals ---------------------------------------------------------------------------

    private function stopIfAsked(): void
    {
        if ($this->cancelReason === null && $this->stopRequested !== null && ($this->stopRequested)()) {
            $this->cancel('shutdown', false);
        }
    }

    /**
     * One write of this run with its lease, retried while the server is away (up to
     * `retryFor` seconds) when `$retry`.
     *
     * @return array<string, mixed>|null
     * @throws Cancelled
     */
    private function write(string $suffix, mixed $body, bool $retry = true, bool $final = false): ?array
    {
        if ($this->paused && !$final) {
            throw new Paused('the run paused');
        }
        if ($this->dead) {
            throw new Cancelled($this->cancelReason ?? 'lease_lost');
        }
        if (!$final) {
            $this->stopIfAsked();
            if ($this->cancelReason !== null) {
                throw new Cancelled($this->cancelReason);
            }
        }
        $deadline = microtime(true) + $this->retryFor;
        $failures = 0;
        while (true) {
            try {
                $answer = $this->http->call(
                    'POST',
                    $this->path($suffix),
                    Http::encode($body),
                    headers: [Worker::LEASE_HEADER => $this->lease],
                    expect: 'raw',
                    retry: $this->once,
                );
                $this->lastRenewal = microtime(true);
                return is_array($answer) ? $answer : null;
            } catch (StepwiseException $e) {
                if ($e->errorCode === 'lease_lost' || $e->errorCode === 'not_found') {
                    $this->cancel('lease_lost', true);
                    throw new Cancelled('lease_lost', $e);
                }
                $transient = $e->status === null || $e->status >= 500 || $e->status === 408 || $e->status === 429;
                $delay = $e->retryAfter ?? min(5.0, 0.2 * (2 ** $failures)) * (0.75 + mt_rand() / mt_getrandmax() / 4);
                if (!$retry || !$transient || $this->dead || microtime(true) + $delay > $deadline) {
                    throw $e;
                }
                if ($failures === 0) {
                    $this->log('warning', sprintf('execution %s: POST %s failed (%s); retrying', $this->executionId, $suffix, $e->getMessage()));
                }
                $failures++;
                usleep((int) round($delay * 1e6));
            }
        }
    }

    /**
     * Writes `$body` as the step after the last saved one (no replay).
     *
     * @param array<string, mixed> $body
     * @return array<string, mixed>
     */
    private function append(array $body): array
    {
        $number = $this->nextNumber();
        if (isset($body['step_number']) && $body['step_number'] !== $number) {
            throw new \LogicException(sprintf('the next step is number %d, not %s', $number, $body['step_number']));
        }
        $body['step_number'] = $number;
        $stored = $this->write('/steps', $body);
        $this->steps[] = $stored ?? $body;
        return $this->steps[count($this->steps) - 1];
    }

    private function nextNumber(): int
    {
        return $this->steps === [] ? 1 : ((int) ($this->steps[count($this->steps) - 1]['step_number'] ?? 0)) + 1;
    }

    /**
     * The next saved step to replay (past the questions and answers, which ask() replays,
     * unless `$userInput`), or null when all are replayed.
     *
     * @return array<string, mixed>|null
     */
    private function takeSaved(bool $userInput): ?array
    {
        $index = $this->cursor;
        $count = count($this->steps);
        while ($index < $count) {
            $saved = $this->steps[$index];
            $index++;
            if ($userInput || ($saved['kind'] ?? null) !== 'user_input') {
                $this->cursor = $index;
                return $saved;
            }
        }
        $this->cursor = $index;
        return null;
    }

    /**
     * @param array<string, mixed> $arguments
     */
    private function saveCall(string $name, array $arguments, mixed $result, ?\Throwable $error): void
    {
        $body = [
            'kind' => 'action',
            'tool_calls' => [['id' => 'call-' . $this->nextNumber(), 'name' => $name, 'arguments' => $arguments ?: new \stdClass()]],
        ];
        if ($error === null) {
            $body['observations'] = self::encodeResult($result);
            $body['output'] = ['call' => $name];
        } else {
            $short = (new \ReflectionClass($error))->getShortName();
            $body['error'] = ['kind' => $short, 'message' => Text::cut($error->getMessage(), self::MAX_ERROR_CHARS)];
            $body['output'] = ['call' => $name, 'raised' => $error::class];
        }
        $this->append($body);
        $this->cursor = count($this->steps);
    }

    /**
     * The saved result of a call (or throws its saved error); `$hit` false when the saved step
     * is not a call's.
     *
     * @param array<string, mixed> $arguments
     * @param array<string, mixed> $saved
     */
    private function replayCall(string $name, array $arguments, array $saved, ?bool &$hit): mixed
    {
        $output = $saved['output'] ?? null;
        $mark = is_array($output) ? ($output['call'] ?? null) : null;
        if (!is_string($mark)) {
            $hit = false;
            $this->log('warning', sprintf(
                'execution %s: call %s replays step %s, which holds no call\'s result; calling it again without saving it',
                $this->executionId,
                $name,
                $saved['step_number'] ?? '?',
            ));
            return null;
        }
        $hit = true;
        $savedArguments = $saved['tool_calls'][0]['arguments'] ?? null;
        if ($mark !== $name || self::comparable($savedArguments ?: []) != self::comparable($arguments)) {
            $this->log('warning', sprintf(
                'execution %s: replaying step %s, which differs from this call: called %s %s, saved %s %s',
                $this->executionId,
                $saved['step_number'] ?? '?',
                $name,
                self::short($arguments),
                $mark,
                self::short($savedArguments),
            ));
        }
        $raised = $output['raised'] ?? null;
        if (is_string($raised) || is_array($saved['error'] ?? null)) {
            $error = is_array($saved['error'] ?? null) ? $saved['error'] : [];
            throw self::rebuiltError($mark, (string) $raised, (string) ($error['kind'] ?? 'Exception'), (string) ($error['message'] ?? ''));
        }
        $text = $saved['observations'] ?? null;
        if (!is_string($text)) {
            return null;
        }
        try {
            return json_decode($text, true, 512, JSON_THROW_ON_ERROR);
        } catch (\JsonException) {
            return $text;
        }
    }

    private static function rebuiltError(string $name, string $raised, string $kind, string $message): \Throwable
    {
        if ($raised !== '' && class_exists($raised) && is_subclass_of($raised, \Exception::class)
            && !is_a($raised, Retry::class, true) && !is_a($raised, Cancelled::class, true)) {
            try {
                $error = new $raised($message);
                if ($error instanceof \Exception) {
                    return $error;
                }
            } catch (\Throwable) {
                // a class that wants other arguments: a CallError below
            }
        }
        return new CallError($name, $kind, $message);
    }

    /**
     * A call's arguments as its tool call keeps them: `['args' => [...], 'kwargs' => [...]]`
     * (named arguments in kwargs), each only when given.
     *
     * @param array<int|string, mixed> $args
     * @return array<string, mixed>
     */
    private static function callArguments(array $args): array
    {
        $positional = [];
        $named = [];
        foreach ($args as $key => $value) {
            if (is_int($key)) {
                $positional[] = $value;
            } else {
                $named[$key] = $value;
            }
        }
        $arguments = [];
        if ($positional !== []) {
            $arguments['args'] = $positional;
        }
        if ($named !== []) {
            $arguments['kwargs'] = $named;
        }
        $comparable = self::comparable($arguments);
        return is_array($comparable) ? $comparable : [];
    }

    /**
     * The fields of a step() call that differ from the saved step it replays.
     *
     * @param array<string, mixed> $called
     * @param array<string, mixed> $saved
     * @return array{0: array<string, mixed>, 1: array<string, mixed>}
     */
    private static function differences(array $called, array $saved): array
    {
        $mine = [];
        $theirs = [];
        foreach ($called as $key => $value) {
            if (in_array($key, self::NOT_COMPARED, true)) {
                continue;
            }
            if (self::comparable($value) != self::comparable($saved[$key] ?? null)) {
                $mine[$key] = $value;
                $theirs[$key] = $saved[$key] ?? null;
            }
        }
        return [$mine, $theirs];
    }

    /** A value as JSON gives it back, to compare. */
    private static function comparable(mixed $value): mixed
    {
        try {
            return json_decode(self::encodeResult($value), true, 512, JSON_THROW_ON_ERROR);
        } catch (\JsonException) {
            return $value;
        }
    }

    private static function encodeResult(mixed $value): string
    {
        $json = json_encode($value, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION | JSON_PARTIAL_OUTPUT_ON_ERROR);
        return $json === false ? 'null' : $json;
    }

    private static function short(mixed $value, int $limit = 300): string
    {
        $text = self::encodeResult($value);
        return strlen($text) <= $limit ? $text : substr($text, 0, $limit - 3) . '...';
    }

    private static function textOf(mixed $value): string
    {
        if ($value === null) {
            return '';
        }
        if (is_string($value)) {
            return $value;
        }
        return self::encodeResult($value);
    }

    /** @param array<string, mixed> $step */
    private static function isQuestion(array $step): bool
    {
        $output = $step['output'] ?? null;
        return is_array($output) && array_key_exists('question', $output) && !array_key_exists('answer', $output);
    }

    /**
     * A `user_input` step that holds the user's answer (not the question asked).
     *
     * @param array<string, mixed> $step
     */
    private static function isAnswer(array $step): bool
    {
        return ($step['kind'] ?? null) === 'user_input' && !self::isQuestion($step);
    }

    /** @param array<string, mixed> $step */
    private static function answerIn(array $step): mixed
    {
        $output = $step['output'] ?? null;
        if (is_array($output) && array_key_exists('answer', $output)) {
            return $output['answer'];
        }
        return $step['observations'] ?? null;
    }

    private function path(string $suffix): string
    {
        return '/v1/executions/' . rawurlencode($this->executionId) . $suffix;
    }

    private function log(string $level, string $message): void
    {
        if ($this->log !== null) {
            ($this->log)($level, $message);
        }
    }
}

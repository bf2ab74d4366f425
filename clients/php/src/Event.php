<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * One event of a session's stream (`GET /v1/sessions/{id}/events`).
 *
 * `id` is the event's integer id, strictly increasing within the session, or null for the
 * live-only `message.delta` events (streamed tokens), which are never stored or replayed.
 * `event` is the event type (`message.created`, `execution.started`, `step.completed`,
 * `execution.paused`, `execution.completed`, ...) and `data` the decoded JSON payload:
 * `session_id`, `message_id`, `execution_id`, `event_type`, `content`, `metadata`, `timestamp`.
 */
final class Event
{
    /** The event types that end an execution for good. */
    public const FINISHED = ['execution.completed', 'execution.failed', 'execution.cancelled'];

    /**
     * @param array<string, mixed> $data
     */
    public function __construct(
        public readonly ?int $id,
        public readonly string $event,
        public readonly array $data,
    ) {
    }

    /** The session the event belongs to. */
    public function sessionId(): ?string
    {
        return self::str($this->data['session_id'] ?? null);
    }

    /** The execution the event is about, if any. */
    public function executionId(): ?string
    {
        return self::str($this->data['execution_id'] ?? null);
    }

    /** The message the event is about, if any. */
    public function messageId(): ?string
    {
        return self::str($this->data['message_id'] ?? null);
    }

    /** The event's text (for `message.delta`: the streamed tokens). */
    public function content(): ?string
    {
        return self::str($this->data['content'] ?? null);
    }

    /**
     * The event's metadata (`[]` when it has none), e.g. `['step_number' => 1, 'tool' => 'search']`.
     *
     * @return array<string, mixed>
     */
    public function metadata(): array
    {
        $metadata = $this->data['metadata'] ?? null;
        return is_array($metadata) ? $metadata : [];
    }

    /** When it happened (RFC 3339 UTC with microseconds). */
    public function timestamp(): ?string
    {
        return self::str($this->data['timestamp'] ?? null);
    }

    /**
     * Whether this event ends execution `$executionId`: completed, failed or cancelled, and
     * also paused (waiting for the user's answer) unless `$orPaused` is false.
     */
    public function endsExecution(string $executionId, bool $orPaused = true): bool
    {
        if ($this->executionId() !== $executionId) {
            return false;
        }
        return in_array($this->event, self::FINISHED, true)
            || ($orPaused && $this->event === 'execution.paused');
    }

    /**
     * An `until` condition for Client::events(): stops the stream after the event that ends
     * `$executionId` (see endsExecution()).
     *
     * ```php
     * foreach ($client->events($sessionId, until: Event::executionEnds($executionId)) as $event) { ... }
     * ```
     *
     * @return \Closure(Event): bool
     */
    public static function executionEnds(string $executionId, bool $orPaused = true): \Closure
    {
        return static fn (Event $event): bool => $event->endsExecution($executionId, $orPaused);
    }

    private static function str(mixed $value): ?string
    {
        return is_string($value) ? $value : null;
    }
}

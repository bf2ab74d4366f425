<?php

declare(strict_types=1);

namespace Stepwise\Internal;

use Stepwise\Event;
use Stepwise\StepwiseException;

/**
 * A session's event stream, read with curl_multi so that events are handed out as they
 * arrive, and reconnected with `Last-Event-ID` when the connection ends or breaks.
 *
 * Every event whose id is at or below the last one seen is dropped, so a replay after a
 * reconnect never yields an event twice; the server replays every stored event after the id
 * sent, so none is missed.
 *
 * @internal
 */
final class EventStream
{
    /** Longest wait between reconnects after failures (exponential up to it, with jitter). */
    private const MAX_DELAY = 5.0;
    /** The server sends a keep-alive comment at least every 15 s: a quiet connection for this long is dead. */
    private const STALL_SECONDS = 60.0;

    private int $failures = 0;
    private ?int $serverRetryMs = null;

    /**
     * @param array<string, scalar|null> $query
     * @param (callable(Event): bool)|null $until
     */
    public function __construct(
        private readonly Http $http,
        private readonly string $path,
        private ?int $lastId,
        private readonly array $query,
        private readonly ?float $timeout,
        private readonly mixed $until,
        private readonly float $firstDelay = 0.05,
    ) {
    }

    /**
     * The events, as they come.
     *
     * @return \Generator<int, Event>
     * @throws StepwiseException when the server refuses the stream (not_found, unauthorized, ...)
     */
    public function events(): \Generator
    {
        $deadline = $this->timeout === null ? null : microtime(true) + $this->timeout;
        while (true) {
            $outcome = yield from $this->connection($deadline);
            if ($outcome === 'stop') {
                return;
            }
            $delay = is_float($outcome) ? $outcome : $this->ended();
            if ($deadline !== null) {
                $left = $deadline - microtime(true);
                if ($left <= 0) {
                    return;
                }
                $delay = min($delay, $left);
            }
            usleep((int) round($delay * 1e6));
        }
    }

    /**
     * One connection: yields its events; returns 'stop' (the caller is done: deadline, until),
     * a float (the wait before reconnecting after a refusal worth retrying), or null (the
     * connection ended or broke).
     *
     * @return \Generator<int, Event, mixed, string|float|null>
     */
    private function connection(?float $deadline): \Generator
    {
        $parser = new SseParser();
        /** @var list<array{id: ?string, event: string, data: string}> $queue */
        $queue = [];
        $state = ['status' => 0, 'error' => '', 'last_byte' => microtime(true)];
        $headers = ['Accept' => 'text/event-stream', 'Cache-Control' => 'no-cache'];
        if ($this->lastId !== null) {
            $headers['Last-Event-ID'] = (string) $this->lastId;
        }
        $received = [];
        $ch = curl_init();
        // No overall timeout: the stream lasts as long as the caller reads it.
        $this->http->configure($ch, 'GET', $this->path, null, $this->query, $headers, 0.0, $received);
        curl_setopt_array($ch, [
            CURLOPT_TIMEOUT_MS => 0,
            CURLOPT_CONNECTTIMEOUT_MS => (int) round($this->http->connectTimeout * 1000),
            CURLOPT_WRITEFUNCTION => static function ($handle, string $chunk) use ($parser, &$queue, &$state): int {
                $state['last_byte'] = microtime(true);
                if ($state['status'] === 0) {
                    $state['status'] = (int) curl_getinfo($handle, CURLINFO_RESPONSE_CODE);
                }
                if ($state['status'] !== 200) {
                    if (strlen($state['error']) < 65536) {
                        $state['error'] .= $chunk;
                    }
                    return strlen($chunk);
                }
                foreach ($parser->feed($chunk) as $raw) {
                    $queue[] = $raw;
                }
                return strlen($chunk);
            },
        ]);
        $multi = curl_multi_init();
        curl_multi_add_handle($multi, $ch);
        try {
            while (true) {
                do {
                    $code = curl_multi_exec($multi, $running);
                } while ($code === CURLM_CALL_MULTI_PERFORM);
                while ($queue !== []) {
                    $event = $this->toEvent(array_shift($queue));
                    if ($event === null) {
                        continue;
                    }
                    yield $event;
                    if ($this->until !== null && ($this->until)($event) === true) {
                        return 'stop';
                    }
                }
                if ($parser->retry !== null) {
                    $this->serverRetryMs = $parser->retry;
                }
                if ($running === 0 || $code !== CURLM_OK) {
                    break;
                }
                $now = microtime(true);
                if ($deadline !== null && $now >= $deadline) {
                    return 'stop';
                }
                if ($now - $state['last_byte'] > self::STALL_SECONDS) {
                    return null; // a dead connection: reconnect
                }
                $wait = 1.0;
                if ($deadline !== null) {
                    $wait = max(0.0, min($wait, $deadline - $now));
                }
                if (curl_multi_select($multi, $wait) === -1) {
                    usleep(10_000);
                }
            }
            $status = $state['status'] ?: (int) curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
            if ($status !== 0 && $status !== 200) {
                return $this->refused($status, $state['error'], $received['headers'] ?? []);
            }
            return null;
        } finally {
            curl_multi_remove_handle($multi, $ch);
            curl_multi_close($multi);
            curl_close($ch);
        }
    }

    /**
     * After a non-200 answer to the stream request: the wait before trying again, or the error.
     *
     * @param array<string, string> $headers
     * @throws StepwiseException
     */
    private function refused(int $status, string $body, array $headers): float
    {
        if ($status === 429 || $status === 408 || $status >= 500) {
            $this->failures++;
            return RetryPolicy::retryAfterSeconds($headers) ?? $this->delay();
        }
        $parsed = null;
        try {
            $parsed = $body === '' ? null : json_decode($body, true, 512, JSON_THROW_ON_ERROR);
        } catch (\JsonException) {
        }
        throw Http::errorFromAnswer($status, $parsed, $parsed === null ? $body : '', $headers, 'GET', $this->http->baseUrl . $this->path);
    }

    /** @param array{id: ?string, event: string, data: string} $raw */
    private function toEvent(array $raw): ?Event
    {
        $id = null;
        if ($raw['id'] !== null && ctype_digit($raw['id'])) {
            $id = (int) $raw['id'];
            if ($this->lastId !== null && $id <= $this->lastId) {
                return null; // seen before this reconnect
            }
            $this->lastId = $id;
        }
        // A stream that delivers something is a healthy one: back off from zero next time.
        $this->failures = 0;
        try {
            $data = json_decode($raw['data'], true, 512, JSON_THROW_ON_ERROR);
        } catch (\JsonException) {
            $data = ['content' => $raw['data']];
        }
        if (!is_array($data) || array_is_list($data) && $data !== []) {
            $data = ['content' => $data];
        }
        $type = $raw['event'];
        if ($type === 'message' && is_string($data['event_type'] ?? null)) {
            $type = $data['event_type'];
        }
        return new Event($id, $type, $data);
    }

    /** The stream ended or broke: count it, and say how long to wait. */
    private function ended(): float
    {
        $this->failures++;
        return $this->delay();
    }

    private function delay(): float
    {
        if ($this->serverRetryMs !== null && $this->failures <= 1) {
            return $this->serverRetryMs / 1000.0;
        }
        if ($this->failures <= 1) {
            return $this->firstDelay;
        }
        $base = min(self::MAX_DELAY, 0.1 * (2 ** ($this->failures - 1)));
        return $base * (0.5 + mt_rand() / mt_getrandmax() / 2);
    }
}

<?php

declare(strict_types=1);

namespace Stepwise\Internal;

/**
 * Turns chunks of a `text/event-stream` body into raw events, incrementally.
 *
 * Follows the WHATWG rules that matter for Stepwise: lines end with CRLF, LF or CR; a line
 * starting with `:` is a comment (keep-alive); `field: value` loses one space after the colon;
 * several `data:` lines join with newlines; an empty line dispatches the event; `id:` and
 * `event:` apply to the event being built; `retry:` sets the reconnection delay.
 *
 * @internal
 */
final class SseParser
{
    private string $pending = '';
    private bool $first = true;
    /** @var list<string> */
    private array $data = [];
    private string $type = '';
    private ?string $id = null;
    /** The last `retry:` value, in milliseconds. */
    public ?int $retry = null;
    /** Bytes read so far (comments included): a stream that sends them is alive. */
    public int $bytes = 0;

    /**
     * Reads a chunk; returns the events it completed.
     *
     * @return list<array{id: ?string, event: string, data: string}>
     */
    public function feed(string $chunk): array
    {
        $this->bytes += strlen($chunk);
        if ($this->first && $chunk !== '') {
            $this->first = false;
            if (str_starts_with($chunk, "\u{FEFF}")) {
                $chunk = substr($chunk, 3);
            }
        }
        $buffer = $this->pending . $chunk;
        $events = [];
        $start = 0;
        $length = strlen($buffer);
        while ($start < $length) {
            $cr = strpos($buffer, "\r", $start);
            $lf = strpos($buffer, "\n", $start);
            if ($cr === false && $lf === false) {
                break;
            }
            if ($cr !== false && ($lf === false || $cr < $lf)) {
                if ($cr + 1 === $length) {
                    break; // a CR at the end: wait for the next byte, which may be its LF
                }
                $end = $cr;
                $next = $buffer[$cr + 1] === "\n" ? $cr + 2 : $cr + 1;
            } else {
                $end = $lf;
                $next = $lf + 1;
            }
            $event = $this->line(substr($buffer, $start, $end - $start));
            if ($event !== null) {
                $events[] = $event;
            }
            $start = $next;
        }
        $this->pending = (string) substr($buffer, $start);
        return $events;
    }

    /** @return array{id: ?string, event: string, data: string}|null */
    private function line(string $line): ?array
    {
        if ($line === '') {
            return $this->dispatch();
        }
        if ($line[0] === ':') {
            return null;
        }
        $colon = strpos($line, ':');
        if ($colon === false) {
            $name = $line;
            $value = '';
        } else {
            $name = substr($line, 0, $colon);
            $value = substr($line, $colon + 1);
            if (str_starts_with($value, ' ')) {
                $value = substr($value, 1);
            }
        }
        switch ($name) {
            case 'data':
                $this->data[] = $value;
                break;
            case 'event':
                $this->type = $value;
                break;
            case 'id':
                if (!str_contains($value, "\0")) {
                    $this->id = $value;
                }
                break;
            case 'retry':
                if (ctype_digit($value)) {
                    $this->retry = (int) $value;
                }
                break;
        }
        return null;
    }

    /** @return array{id: ?string, event: string, data: string}|null */
    private function dispatch(): ?array
    {
        [$data, $type, $id] = [$this->data, $this->type, $this->id];
        $this->data = [];
        $this->type = '';
        $this->id = null;
        if ($data === []) {
            return null;
        }
        return ['id' => $id, 'event' => $type === '' ? 'message' : $type, 'data' => implode("\n", $data)];
    }
}

<?php

declare(strict_types=1);

namespace Stepwise\Tests;

use PHPUnit\Framework\TestCase;
use Stepwise\Internal\SseParser;

/** The event-stream parser, fed whole and byte by byte. */
final class SseParserTest extends TestCase
{
    private const STREAM = "\u{FEFF}: keep-alive\r\n"
        . "id: 1\r\nevent: message.created\r\ndata: {\"content\": \"hé\"}\r\n\r\n"
        . "retry: 1500\n"
        . "id: 2\nevent: step.completed\ndata: line one\ndata:line two\n\n"
        . "event: message.delta\rdata: {\"content\": \"tok\"}\r\r"
        . "data\n\n"
        . ": only a comment\n\n"
        . "id: 3\ndata: {\"event_type\": \"execution.completed\"}\n\n";

    /** @return list<array{id: ?string, event: string, data: string}> */
    private static function expected(): array
    {
        return [
            ['id' => '1', 'event' => 'message.created', 'data' => '{"content": "hé"}'],
            ['id' => '2', 'event' => 'step.completed', 'data' => "line one\nline two"],
            ['id' => null, 'event' => 'message.delta', 'data' => '{"content": "tok"}'],
            ['id' => null, 'event' => 'message', 'data' => ''],
            ['id' => '3', 'event' => 'message', 'data' => '{"event_type": "execution.completed"}'],
        ];
    }

    public function testWholeStream(): void
    {
        $parser = new SseParser();
        $this->assertSame(self::expected(), $parser->feed(self::STREAM));
        $this->assertSame(1500, $parser->retry);
    }

    public function testByteByByte(): void
    {
        $parser = new SseParser();
        $events = [];
        foreach (str_split(self::STREAM) as $byte) {
            array_push($events, ...$parser->feed($byte));
        }
        $this->assertSame(self::expected(), $events);
    }

    public function testAnUnfinishedEventWaits(): void
    {
        $parser = new SseParser();
        $this->assertSame([], $parser->feed("id: 9\ndata: {\"a\": 1}\n"));
        $this->assertSame([['id' => '9', 'event' => 'message', 'data' => '{"a": 1}']], $parser->feed("\n"));
    }
}

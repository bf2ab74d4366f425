<?php

declare(strict_types=1);

namespace Stepwise\Tests;

use PHPUnit\Framework\TestCase;
use Stepwise\Event;
use Stepwise\NotFoundException;
use Stepwise\Tests\Support\LocalServer;

/**
 * The event stream goes on across server restarts (a crash, then a graceful restart) on the
 * same database and port: it reconnects with Last-Event-ID, with no gap and no duplicate.
 */
final class EventStreamTest extends TestCase
{
    private ?LocalServer $server = null;

    protected function tearDown(): void
    {
        $this->server?->close();
    }

    public function testReconnectsAcrossRestartsWithNoGapAndNoDuplicate(): void
    {
        $this->server = (new LocalServer())->start();
        $client = $this->server->client(maxRetries: 8);
        $session = $client->createSession(title: 'watched');
        $execution = $client->createExecution($session['id'], ['message' => 'watch me'], lease: false);
        $id = $execution['id'];
        $client->appendStep($id, ['step_number' => 1, 'kind' => 'action', 'model_output' => 'one']);

        $stream = $client->events($session['id'], timeout: 120);
        $seen = [];
        $restarts = 0;
        $stepCompleted = static fn (Event $e, int $n): bool => $e->event === 'step.completed' && ($e->metadata()['step_number'] ?? null) === $n;
        while ($stream->valid()) {
            $event = $stream->current();
            $seen[] = $event;
            if ($stepCompleted($event, 1) && $restarts === 0) {
                // A crash while the stream is open; step 2 is written while nobody watches.
                $this->server->kill();
                $this->server->start();
                $restarts++;
                $client->appendStep($id, ['step_number' => 2, 'kind' => 'action', 'model_output' => 'two']);
            } elseif ($stepCompleted($event, 2) && $restarts === 1) {
                // A graceful restart, then the rest is written live.
                $this->server->restart();
                $restarts++;
                $client->appendStep($id, ['step_number' => 3, 'kind' => 'action', 'model_output' => 'three']);
                $client->completeExecution($id, 'all three');
            } elseif ($event->endsExecution($id)) {
                break;
            }
            $stream->next();
        }

        $this->assertSame(2, $restarts);
        $last = end($seen);
        $this->assertSame('execution.completed', $last->event);
        $ids = array_map(static fn (Event $e): ?int => $e->id, $seen);
        $this->assertSame(range(1, count($seen)), $ids, 'no gap, no duplicate');
        $completedSteps = array_values(array_map(
            static fn (Event $e): int => $e->metadata()['step_number'],
            array_filter($seen, static fn (Event $e): bool => $e->event === 'step.completed'),
        ));
        $this->assertSame([1, 2, 3], $completedSteps);

        // The stream read across restarts is the stored one, event for event.
        $stored = iterator_to_array($client->events($session['id'], until: Event::executionEnds($id), timeout: 30), false);
        $this->assertSame(
            array_map(static fn (Event $e): array => [$e->id, $e->event, $e->content()], $stored),
            array_map(static fn (Event $e): array => [$e->id, $e->event, $e->content()], $seen),
        );
        $this->assertSame(3, substr_count($this->server->log(), '--- '), 'the server ran three times');
    }

    public function testAStreamOfAnUnknownSessionIsNotFound(): void
    {
        $this->server = (new LocalServer())->start();
        $this->expectException(NotFoundException::class);
        iterator_to_array($this->server->client()->events('01a21f9a-9aaf-73fe-9a7a-000000000000', timeout: 10));
    }
}

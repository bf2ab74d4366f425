<?php

declare(strict_types=1);

namespace Stepwise\Tests;

use PHPUnit\Framework\TestCase;
use Stepwise\Client;
use Stepwise\Event;
use Stepwise\Tests\Support\LocalServer;
use Stepwise\Tests\Support\Wait;
use Stepwise\Tests\Support\WorkerProcess;

/**
 * Worker processes (tests/fixtures/worker.php) against a server with 2-second leases: an
 * execution end to end, a worker killed mid-run whose execution another resumes, and clean
 * stops on SIGTERM.
 */
final class WorkerTest extends TestCase
{
    private static LocalServer $server;
    private Client $client;
    private string $dir;
    /** @var list<WorkerProcess> */
    private array $workers = [];

    public static function setUpBeforeClass(): void
    {
        self::$server = (new LocalServer(['--lease-secs', '2']))->start();
    }

    public static function tearDownAfterClass(): void
    {
        self::$server->close();
    }

    protected function setUp(): void
    {
        $this->client = self::$server->client();
        $this->dir = LocalServer::tempDir('stepwise-php-worker-');
    }

    protected function tearDown(): void
    {
        foreach ($this->workers as $worker) {
            $worker->close();
        }
        LocalServer::removeTree($this->dir);
    }

    /** @param list<string> $agents */
    private function worker(array $agents, string $id, ?int $maxExecutions = null): WorkerProcess
    {
        $worker = new WorkerProcess(self::$server, $agents, $this->dir, $id, $maxExecutions);
        $this->workers[] = $worker;
        return $worker->waitReady();
    }

    /** @return list<string> the lines of a marker file the fixture's agents write */
    private function marks(string $name): array
    {
        return array_values(array_filter(explode("\n", (string) @file_get_contents($this->dir . '/' . $name))));
    }

    private function online(string $type): int
    {
        foreach ($this->client->listAgents() as $agent) {
            if ($agent['type'] === $type) {
                return (int) $agent['workers_online'];
            }
        }
        return 0;
    }

    public function testAnExecutionEndToEnd(): void
    {
        $worker = $this->worker(['php-e2e'], 'php-e2e-worker');
        $session = $this->client->createSession(title: 'e2e');
        // A demo turn first, so that the stream is connected before the worker's turn starts:
        // its live tokens (message.delta) are sent once, to the streams open at the time.
        $warmup = $this->client->postMessage($session['id'], 'hi', agent: 'demo');
        $stream = $this->client->events($session['id'], timeout: 120);
        $seen = [];
        $execution = null;
        while ($stream->valid()) {
            $event = $stream->current();
            $seen[] = $event;
            if ($event->endsExecution($warmup['execution']['id'])) {
                $execution = $this->client->postMessage($session['id'], 'red shirt', agent: 'php-e2e')['execution'];
            } elseif ($execution !== null && $event->endsExecution($execution['id'], orPaused: false)) {
                break;
            } elseif ($execution !== null && $event->endsExecution($execution['id'])) {
                $this->assertSame('execution.paused', $event->event);
                $resumed = $this->client->postMessage($session['id'], 'M');
                $this->assertSame($execution['id'], $resumed['execution']['id'], 'the answer resumes the paused execution');
            }
            $stream->next();
        }
        $this->assertNotNull($execution);
        $mine = array_values(array_filter($seen, static fn (Event $e): bool => $e->executionId() === $execution['id']));
        $types = array_map(static fn (Event $e): string => $e->event, $mine);
        $this->assertContains('execution.started', $types);
        $this->assertContains('execution.paused', $types);
        $this->assertSame('execution.completed', end($types));
        $deltas = array_filter($mine, static fn (Event $e): bool => $e->event === 'message.delta');
        $this->assertSame('Your size is M', implode('', array_map(static fn (Event $e): string => (string) $e->content(), $deltas)));
        foreach ($deltas as $delta) {
            $this->assertNull($delta->id, 'deltas are live only');
        }

        $done = $this->client->getExecution($execution['id']);
        $this->assertSame('completed', $done['status']);
        $this->assertSame('Size M for red shirt', $done['output']);
        $steps = iterator_to_array($this->client->listSteps($execution['id']), false);
        $this->assertSame([1, 2, 3, 4], array_column($steps, 'step_number'));
        $this->assertSame(['action', 'planning', 'user_input', 'user_input'], array_column($steps, 'kind'));
        $this->assertSame('lookup', $steps[0]['tool_calls'][0]['name']);
        $this->assertSame(['query' => 'red shirt', 'length' => 9], json_decode($steps[0]['observations'], true));
        $this->assertSame('Which size?', $steps[2]['model_output']);
        $this->assertSame(['red shirt'], $this->marks('e2e-lookup-calls'), 'the resumed run replayed the lookup');
        // The server keeps a snapshot of the pause; the run saved the final one.
        $snapshots = iterator_to_array($this->client->listSnapshots($execution['id']), false);
        $final = end($snapshots);
        $this->assertTrue($final['is_final']);
        $this->assertEquals(['size' => 'M', 'query' => 'red shirt'], $this->client->getSnapshot($final['id'])['state']);
        $conversation = iterator_to_array($this->client->listMessages($session['id'], roles: ['user', 'assistant']), false);
        $this->assertSame(
            ['red shirt', 'Which size?', 'M', 'Size M for red shirt'],
            array_slice(array_column($conversation, 'content'), -4),
        );
        $this->assertContains('Looking things up', array_column(iterator_to_array($this->client->listMessages($session['id'], roles: 'info'), false), 'content'));
        $worker->signal(15);
        $this->assertSame(0, $worker->waitExit());
    }

    public function testAWorkerKilledMidRunIsResumedByAnother(): void
    {
        $first = $this->worker(['php-crash'], 'php-crash-a');
        $posted = $this->client->sendMessage('crash me', agent: 'php-crash');
        $id = $posted['execution']['id'];
        Wait::until(fn (): bool => $this->marks('crash-step1') !== [], 60.0, 'the first worker to save its first step');
        $first->signal(9);
        $this->assertSame(137, $first->waitExit(), 'SIGKILL');
        $this->assertSame('running', $this->client->getExecution($id)['status']);

        // Its lease runs out (2 s); another worker takes the execution over and goes on.
        $second = $this->worker(['php-crash'], 'php-crash-b', maxExecutions: 1);
        $this->assertSame(0, $second->waitExit(), $second->output());
        $done = $this->client->getExecution($id);
        $this->assertSame('completed', $done['status'], (string) $done['error_message']);
        $this->assertSame(2, $done['attempts']);
        [$attempt1, $pidA] = explode(' ', $this->marks('crash-step1')[0]);
        $this->assertSame('1', $attempt1);
        $this->assertSame(sprintf('attempt 2 went on after step 1 (first ran in %s, second done)', $pidA), $done['output']);
        $this->assertSame([$pidA], $this->marks('crash-first-calls'), 'step 1 ran once: the resumed run replayed it');
        $this->assertSame('2', explode(' ', $this->marks('crash-step1')[1])[0]);
        $steps = iterator_to_array($this->client->listSteps($id), false);
        $this->assertSame([1, 2], array_column($steps, 'step_number'));
        $this->assertSame(['first', 'second'], array_map(static fn (array $s): string => $s['tool_calls'][0]['name'], $steps));
        $lines = array_column(iterator_to_array($this->client->listMessages($posted['session_id'], roles: 'info'), false), 'content');
        $this->assertNotEmpty(array_filter($lines, static fn (string $line): bool => str_contains($line, 'Worker lost')), implode("\n", $lines));
    }

    public function testSigtermHandsTheRunningExecutionBackAndStopsCleanly(): void
    {
        $first = $this->worker(['php-term'], 'php-term-a');
        $posted = $this->client->sendMessage('stop me', agent: 'php-term');
        $id = $posted['execution']['id'];
        Wait::until(fn (): bool => $this->marks('term-step1') !== [], 60.0, 'the worker to save its first step');
        $this->assertSame(1, $this->online('php-term'));
        $first->signal(15);
        $this->assertSame(0, $first->waitExit(), $first->output());
        $this->assertStringContainsString('handed back to the queue', $first->output());
        $this->assertStringContainsString('stopped after 1', $first->output());
        $released = $this->client->getExecution($id);
        $this->assertSame('pending', $released['status']);
        $this->assertSame(0, $this->online('php-term'), 'a worker that stopped cleanly is offline at once');

        $second = $this->worker(['php-term'], 'php-term-b', maxExecutions: 1);
        $this->assertSame(0, $second->waitExit(), $second->output());
        $done = $this->client->getExecution($id);
        $this->assertSame('completed', $done['status']);
        $this->assertSame('finished after a clean stop', $done['output']);
        $this->assertSame(1, $done['attempts'], 'a release spends no attempt');
        $this->assertCount(1, $this->marks('term-first-calls'));
        $this->assertSame([1], array_column(iterator_to_array($this->client->listSteps($id), false), 'step_number'));
    }

    public function testSigtermWhileWaitingForWork(): void
    {
        $worker = $this->worker(['php-idle'], 'php-idle-worker');
        Wait::until(fn (): bool => $this->online('php-idle') === 1, 30.0, 'the worker to be online');
        $worker->signal(15);
        $this->assertSame(0, $worker->waitExit(), $worker->output());
        $this->assertStringContainsString('stopped after 0', $worker->output());
        $this->assertSame(0, $this->online('php-idle'));
    }
}

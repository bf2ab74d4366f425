<?php

declare(strict_types=1);

namespace Stepwise\Tests;

use PHPUnit\Framework\TestCase;
use Stepwise\Client;
use Stepwise\ConflictException;
use Stepwise\Event;
use Stepwise\ForbiddenException;
use Stepwise\InvalidRequestException;
use Stepwise\InvalidStateException;
use Stepwise\LeaseLostException;
use Stepwise\NotFoundException;
use Stepwise\StepwiseException;
use Stepwise\Tests\Support\LocalServer;
use Stepwise\Tests\Support\SharedServer;
use Stepwise\TimeoutException;
use Stepwise\UnauthorizedException;
use Stepwise\UnknownAgentException;

/** Every method of Client against a live server, and the typed errors it raises. */
final class ClientTest extends TestCase
{
    private static LocalServer $server;
    private Client $client;

    public static function setUpBeforeClass(): void
    {
        self::$server = SharedServer::get();
    }

    protected function setUp(): void
    {
        $this->client = self::$server->client();
    }

    public function testOperations(): void
    {
        $this->assertSame('ok', $this->client->health()['status']);
        $this->assertIsArray($this->client->ready());
        $limits = $this->client->limits();
        $this->assertGreaterThan(0, $limits['max_content_chars']);
        $this->assertGreaterThan(0, $limits['max_body_bytes']);

        $retention = $this->client->setRetention(completedDays: 7);
        $this->assertSame(7, $retention['completed_days']);
        $this->assertSame(7, $retention['own']['completed_days']);
        $this->assertSame(7, $this->client->getRetention()['completed_days']);
        $back = $this->client->setRetention();
        $this->assertNull($back['own']['completed_days']);
        $this->assertSame($back['server']['completed_days'], $back['completed_days']);
    }

    public function testSessions(): void
    {
        $name = 'php-sessions-' . bin2hex(random_bytes(3));
        $session = $this->client->createSession(
            title: 'Order 1042',
            name: $name,
            relatedType: 'order',
            relatedId: '1042',
            initialContextUrl: 'https://shop.test/orders/1042',
            metadata: ['shop' => 'eu', 'priority' => 2],
            agent: 'demo',
        );
        $this->assertSame('Order 1042', $session['title']);
        $this->assertSame('active', $session['status']);
        $this->assertSame(['type' => 'demo', 'config' => null], $session['agent']);
        $this->assertEquals(['shop' => 'eu', 'priority' => 2], $session['metadata']);

        $this->assertSame($session['id'], $this->client->getSession($session['id'])['id']);
        $this->assertSame($session['id'], $this->client->findSession($name)['id']);
        $this->assertNull($this->client->findSession($name . '-missing'));

        $found = iterator_to_array($this->client->listSessions(metadata: ['shop' => 'eu', 'priority' => 2], relatedType: 'order', relatedId: '1042'), false);
        $this->assertContains($session['id'], array_column($found, 'id'));
        $this->assertSame([$session['id']], array_column(iterator_to_array($this->client->listSessions(name: $name), false), 'id'));

        $updated = $this->client->updateSession($session['id'], title: 'Order 1042 (late)', status: 'completed', metadata: ['shop' => 'eu', 'late' => true]);
        $this->assertSame('Order 1042 (late)', $updated['title']);
        $this->assertSame('completed', $updated['status']);
        $this->assertTrue($updated['metadata']['late']);
        $this->assertNull($this->client->updateSession($session['id'], agent: false)['agent']);
        $this->assertSame('demo', $this->client->updateSession($session['id'], agent: ['type' => 'demo'])['agent']['type']);

        $this->client->deleteSession($session['id']);
        $this->assertSame('deleted', $this->client->getSession($session['id'])['status']);
        $this->assertNotContains($session['id'], array_column(iterator_to_array($this->client->listSessions(), false), 'id'));
        $deleted = iterator_to_array($this->client->listSessions(status: 'deleted'), false);
        $this->assertContains($session['id'], array_column($deleted, 'id'));
        $this->assertNull($this->client->findSession($name));
    }

    public function testMessagesExecutionsMemoryExportImport(): void
    {
        $answer = $this->client->sendMessage(
            'steps: 2',
            session: ['title' => 'demo run', 'metadata' => []],
            agent: 'demo',
            relatedType: 'order',
            relatedId: '7',
            contextUrl: 'https://shop.test/orders/7',
            metadata: ['source' => 'sidebar'],
        );
        $sessionId = $answer['session_id'];
        $this->assertSame('user', $answer['message']['role']);
        $this->assertSame('https://shop.test/orders/7', $answer['message']['context_url']);
        $this->assertSame('order', $answer['execution']['input']['context']['related_type']);
        $execution = $this->client->wait($answer['execution']['id'], timeout: 60);
        $this->assertSame('completed', $execution['status']);

        // ?wait=S: the answer comes back with the ended execution.
        $waited = $this->client->postMessage($sessionId, '2+3', agent: 'demo', wait: 30);
        $this->assertSame('completed', $waited['execution']['status']);
        $this->assertSame('assistant', $waited['answer']['role']);

        $this->assertSame($execution['id'], $this->client->getExecution($execution['id'])['id']);
        $executions = iterator_to_array($this->client->listSessionExecutions($sessionId), false);
        $this->assertEqualsCanonicalizing([$execution['id'], $waited['execution']['id']], array_column($executions, 'id'));

        $messages = iterator_to_array($this->client->listMessages($sessionId), false);
        $this->assertSame('steps: 2', $messages[0]['content']);
        $users = iterator_to_array($this->client->listMessages($sessionId, roles: ['user']), false);
        $this->assertSame(['steps: 2', '2+3'], array_column($users, 'content'));
        $later = iterator_to_array($this->client->listMessages($sessionId, after: $users[0]['id'], roles: 'user'), false);
        $this->assertSame(['2+3'], array_column($later, 'content'));

        $steps = iterator_to_array($this->client->listSteps($execution['id']), false);
        $this->assertSame([1, 2, 3], array_column($steps, 'step_number'));

        $memory = $this->client->getMemory($sessionId);
        $this->assertContains($memory['restored'], ['full', 'summary', 'empty']);
        $this->assertNotEmpty($memory['steps']);

        $document = $this->client->exportSession($sessionId);
        $this->assertSame($sessionId, $document['session']['id']);
        $this->assertCount(2, $document['executions']);
        $imported = $this->client->importSession($document);
        $this->assertNotSame($sessionId, $imported['id']);
        $this->assertSame('demo run', $imported['title']);

        // wait() gives up with a TimeoutException on an execution that waits for its user.
        $paused = $this->client->postMessage($sessionId, 'ask me', agent: 'demo');
        $this->assertSame('paused', $this->client->wait($paused['execution']['id'], timeout: 60)['status']);
        $cancelled = $this->client->cancelExecution($paused['execution']['id']);
        $this->assertSame($paused['execution']['id'], $cancelled['id']);
        $this->assertSame('cancelled', $this->client->wait($paused['execution']['id'], timeout: 30)['status']);
        try {
            $this->client->cancelExecution($paused['execution']['id']);
            $this->fail('cancelling a cancelled execution must be a conflict');
        } catch (ConflictException $e) {
            $this->assertSame('conflict', $e->errorCode);
            $this->assertSame(409, $e->status);
        }
    }

    public function testWaitTimesOut(): void
    {
        $session = $this->client->createSession();
        $execution = $this->client->createExecution($session['id'], ['message' => 'recorded'], lease: false);
        try {
            $this->client->wait($execution['id'], timeout: 0.2, pollInterval: 0.05);
            $this->fail('a running execution does not end by itself');
        } catch (TimeoutException $e) {
            $this->assertSame('timeout', $e->errorCode);
            $this->assertNull($e->status);
        }
        $this->client->failExecution($execution['id'], 'test over');
    }

    public function testExternalExecutionWithLease(): void
    {
        $session = $this->client->createSession(title: 'recorded');
        $execution = $this->client->createExecution($session['id'], ['message' => 'hello'], agentConfig: ['model' => 'x']);
        $this->assertSame('running', $execution['status']);
        $this->assertIsString($execution['lease']);
        $this->assertGreaterThan(0, $execution['heartbeat_interval_s']);
        $id = $execution['id'];

        // The client sends the lease it got with every write.
        $step = $this->client->appendStep($id, ['step_number' => 1, 'kind' => 'planning', 'model_output' => 'plan']);
        $this->assertSame(1, $step['step_number']);
        $this->assertSame($step['id'], $this->client->appendStep($id, ['step_number' => 1, 'kind' => 'planning', 'model_output' => 'plan'])['id']);
        try {
            $this->client->appendStep($id, ['step_number' => 1, 'kind' => 'planning', 'model_output' => 'another plan']);
            $this->fail('another body at a saved step number must be a conflict');
        } catch (ConflictException $e) {
            $this->assertSame('conflict', $e->errorCode);
        }
        $batch = $this->client->appendSteps($id, [
            ['kind' => 'action', 'tool_calls' => [['id' => 'c1', 'name' => 'search', 'arguments' => ['q' => 'php']]], 'observations' => 'found'],
            ['kind' => 'action', 'model_output' => 'second'],
        ]);
        $this->assertSame(2, $batch['created']);
        $this->assertSame([2, 3], array_column($batch['items'], 'step_number'));
        $this->assertSame([1, 2, 3], array_column(iterator_to_array($this->client->listSteps($id), false), 'step_number'));

        $beat = $this->client->heartbeat($id);
        $this->assertSame($id, $beat['execution_id']);
        $this->assertFalse($beat['cancel_requested']);

        $this->client->postDelta($id, 'tok');
        $line = $this->client->postExecutionMessage($id, 'Looking it up', 'info');
        $this->assertSame('info', $line['role']);

        $snapshot = $this->client->saveSnapshot($id, ['memory' => [1, 2]], stepNumber: 3, isFinal: false, agentName: 'recorder');
        $this->assertSame(3, $snapshot['step_number']);
        $listed = iterator_to_array($this->client->listSnapshots($id), false);
        $this->assertSame([$snapshot['id']], array_column($listed, 'id'));
        $this->assertSame(['memory' => [1, 2]], $this->client->getSnapshot($snapshot['id'])['state']);
        $this->client->saveSnapshot($id, ['memory' => [3]], replace: true);
        $this->assertCount(1, iterator_to_array($this->client->listSnapshots($id), false));

        $done = $this->client->completeExecution($id, ['answer' => 42], finalMessage: 'The answer is 42');
        $this->assertSame('completed', $done['status']);
        $this->assertSame(['answer' => 42], $done['output']);
        try {
            $this->client->heartbeat($id, $execution['lease']);
            $this->fail('a heartbeat after the end must be lease_lost');
        } catch (LeaseLostException $e) {
            $this->assertSame('lease_lost', $e->errorCode);
            $this->assertSame(409, $e->status);
        }

        // fail and pause end an execution too.
        $failing = $this->client->createExecution($session['id'], 'x');
        $this->assertSame('failed', $this->client->failExecution($failing['id'], 'it broke')['status']);
        $pausing = $this->client->createExecution($session['id'], 'y');
        $this->assertSame('paused', $this->client->pauseExecution($pausing['id'], 'Which one?')['status']);
    }

    public function testWorkerCallsByHand(): void
    {
        $type = 'php-hand-' . bin2hex(random_bytes(3));
        $workerId = 'php-hand-worker';
        $this->assertSame([], $this->client->claim($workerId, [['type' => $type, 'description' => 'by hand']], slots: 0));
        $agents = array_column($this->client->listAgents(), null, 'type');
        $this->assertTrue($agents['demo']['builtin']);
        $this->assertSame(1, $agents[$type]['workers_online']);
        $this->assertSame('by hand', $agents[$type]['description']);

        $posted = $this->client->sendMessage('by hand', agent: $type);
        $claims = $this->client->claim($workerId, [$type], slots: 1, waitS: 10);
        $this->assertCount(1, $claims);
        $claim = $claims[0];
        $this->assertSame($posted['execution']['id'], $claim['execution']['id']);
        $this->assertSame('by hand', $claim['input_text']);
        $this->assertSame(1, $claim['attempt']);
        $id = $claim['execution']['id'];

        try {
            $this->client->appendStep($id, ['kind' => 'action', 'model_output' => 'no lease']);
            $this->fail('a worker execution takes no write without its lease');
        } catch (LeaseLostException $e) {
            $this->assertSame('lease_lost', $e->errorCode);
        }
        $this->client->appendStep($id, ['step_number' => 1, 'kind' => 'action', 'model_output' => 'leased'], lease: $claim['lease']);
        $this->assertSame($id, $this->client->heartbeat($id, $claim['lease'], $workerId)['execution_id']);
        $this->client->postDelta($id, 'partial', lease: $claim['lease']);
        $released = $this->client->releaseExecution($id, lease: $claim['lease']);
        $this->assertSame('pending', $released['status']);

        $again = $this->client->claim($workerId, [$type], slots: 1, waitS: 10);
        $this->assertSame($id, $again[0]['execution']['id']);
        $this->assertSame([1], array_column($again[0]['steps'], 'step_number'));
        $this->client->completeExecution($id, 'done by hand', lease: $again[0]['lease']);
        $this->assertSame('completed', $this->client->getExecution($id)['status']);

        $this->client->stopWorker($workerId);
        $agents = array_column($this->client->listAgents(), null, 'type');
        $this->assertSame(0, $agents[$type]['workers_online']);
        $this->expectException(NotFoundException::class);
        $this->client->stopWorker('php-never-seen-' . bin2hex(random_bytes(3)));
    }

    public function testRequestEscapeHatch(): void
    {
        $session = $this->client->request('POST', '/v1/sessions', ['title' => 'raw']);
        $this->assertSame('raw', $session['title']);
        $this->assertSame('raw', $this->client->request('GET', '/v1/sessions/' . $session['id'])['title']);
        $this->assertNull($this->client->request('DELETE', '/v1/sessions/' . $session['id']));
    }

    public function testEventsOfAFinishedExecution(): void
    {
        $answer = $this->client->sendMessage('steps: 1', agent: 'demo');
        $events = iterator_to_array($this->client->events($answer['session_id'], until: Event::executionEnds($answer['execution']['id']), timeout: 60), false);
        $types = array_map(static fn (Event $e): string => $e->event, $events);
        $this->assertSame('message.created', $types[0]);
        $this->assertContains('execution.started', $types);
        $this->assertContains('step.completed', $types);
        $this->assertSame('execution.completed', end($types));
        $this->assertSame(range(1, count($events)), array_map(static fn (Event $e): ?int => $e->id, $events));
        $this->assertSame($answer['session_id'], $events[0]->sessionId());

        // after: only the later ones; include step: the whole Step in step.completed.
        $after = iterator_to_array($this->client->events($answer['session_id'], after: 3, until: Event::executionEnds($answer['execution']['id']), includeStep: true), false);
        $this->assertSame(4, $after[0]->id);
        $completed = array_values(array_filter($after, static fn (Event $e): bool => $e->event === 'step.completed'));
        $this->assertSame($answer['execution']['id'], $completed[0]->metadata()['step']['execution_id']);

        // A stream with nothing more to say ends at its timeout, without an error.
        $last = end($events)->id;
        $this->assertSame([], iterator_to_array($this->client->events($answer['session_id'], after: $last, timeout: 0.3), false));
    }

    public function testTypedErrors(): void
    {
        $missing = '01a21f9a-9aaf-73fe-9a7a-000000000000';
        try {
            $this->client->getSession($missing);
            $this->fail('an unknown session must be not_found');
        } catch (NotFoundException $e) {
            $this->assertInstanceOf(StepwiseException::class, $e);
            $this->assertSame('not_found', $e->errorCode);
            $this->assertSame(404, $e->status);
            $this->assertSame('GET', $e->method);
            $this->assertStringContainsString('404 not_found', $e->getMessage());
        }
        try {
            iterator_to_array($this->client->listSessions(pageSize: 0));
            $this->fail('limit=0 must be a 400');
        } catch (InvalidRequestException $e) {
            $this->assertSame('invalid_request', $e->errorCode);
            $this->assertSame(400, $e->status);
            $this->assertSame('limit', $e->field);
        }
        try {
            $this->client->postMessage($this->client->createSession()['id'], 'x', wait: 61);
            $this->fail('wait over 60 s must be a 400');
        } catch (InvalidRequestException $e) {
            $this->assertSame('wait', $e->field);
        }
        try {
            $this->client->sendMessage('hello', agent: 'php-nobody-runs-this');
            $this->fail('an agent type nobody runs must be unknown_agent');
        } catch (UnknownAgentException $e) {
            $this->assertInstanceOf(InvalidStateException::class, $e);
            $this->assertSame('unknown_agent', $e->errorCode);
            $this->assertSame(422, $e->status);
            $this->assertSame('agent.type', $e->field);
        }
        $name = 'php-dup-' . bin2hex(random_bytes(3));
        $this->client->createSession(name: $name);
        try {
            $this->client->createSession(name: $name);
            $this->fail('a taken name must be a conflict');
        } catch (ConflictException $e) {
            $this->assertSame('conflict', $e->errorCode);
            $this->assertSame(409, $e->status);
        }
        try {
            (new Client(self::$server->url, 'sk-not-a-key'))->listAgents();
            $this->fail('a wrong key must be unauthorized');
        } catch (UnauthorizedException $e) {
            $this->assertSame('unauthorized', $e->errorCode);
            $this->assertStringNotContainsString('sk-not-a-key', $e->getMessage());
        }
        try {
            $worker = self::$server->client(self::$server->createKey('acme', 'robot', 'worker'));
            iterator_to_array($worker->listSessions());
            $this->fail('a worker key may not list sessions');
        } catch (ForbiddenException $e) {
            $this->assertSame('forbidden', $e->errorCode);
            $this->assertSame(403, $e->status);
        }
    }
}

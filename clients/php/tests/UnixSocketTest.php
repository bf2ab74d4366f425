<?php

declare(strict_types=1);

namespace Stepwise\Tests;

use PHPUnit\Framework\TestCase;
use Stepwise\Client;
use Stepwise\ConnectionException;
use Stepwise\Event;
use Stepwise\NotFoundException;
use Stepwise\Tests\Support\LocalServer;

/** `unix:PATH`: the same calls over the server's Unix socket (`serve --listen unix:PATH`). */
final class UnixSocketTest extends TestCase
{
    public function testCallsEventsAndErrorsOverTheSocket(): void
    {
        $dir = LocalServer::tempDir('stepwise-php-unix-');
        $socket = $dir . '/stepwise.sock';
        $server = (new LocalServer(['--listen', 'unix:' . $socket]))->start();
        try {
            $client = new Client('unix:' . $socket, $server->adminKey);
            $this->assertSame('unix:' . $socket, $client->baseUrl);

            $answer = $client->sendMessage('2+3', agent: 'demo');
            $this->assertSame('5', $client->wait($answer['execution']['id'], timeout: 60)['output']);
            $events = iterator_to_array($client->events($answer['session_id'], until: Event::executionEnds($answer['execution']['id']), timeout: 60), false);
            $this->assertSame('execution.completed', end($events)->event);

            // The same session over the node's TCP port: one server, two listeners.
            $this->assertSame($answer['session_id'], $server->client()->getSession($answer['session_id'])['id']);

            try {
                $client->getSession('00000000-0000-0000-0000-000000000000');
                $this->fail('a missing session is 404');
            } catch (NotFoundException $e) {
                $this->assertSame('not_found', $e->errorCode);
            }
        } finally {
            $server->close();
        }

        // No server on the socket any more: a connection error that names it.
        $gone = new Client('unix:' . $socket, $server->adminKey, maxRetries: 0);
        try {
            $gone->getSession('00000000-0000-0000-0000-000000000000');
            $this->fail('no server answers there');
        } catch (ConnectionException $e) {
            $this->assertSame('connection_error', $e->errorCode);
            $this->assertStringContainsString($socket, $e->getMessage());
        }
        LocalServer::removeTree($dir);

        $this->expectException(\InvalidArgumentException::class);
        new Client('unix:');
    }
}

<?php

declare(strict_types=1);

namespace Stepwise\Tests;

use PHPUnit\Framework\TestCase;
use Stepwise\Client;
use Stepwise\Event;
use Stepwise\ForbiddenException;
use Stepwise\NotFoundException;
use Stepwise\Tests\Support\LocalServer;
use Stepwise\Tests\Support\SharedServer;
use Stepwise\Tests\Support\Wait;
use Stepwise\UnauthorizedException;

/** End users' tokens and keys: a user sees its own sessions; another user's are 404. */
final class UsersTest extends TestCase
{
    private static LocalServer $server;

    public static function setUpBeforeClass(): void
    {
        self::$server = SharedServer::get();
    }

    public function testAnotherUsersSessionIsNotFoundWhileTheOwnerSeesIt(): void
    {
        $admin = self::$server->client();
        $alice = $admin->createToken('alice-' . bin2hex(random_bytes(2)), ttlS: 600);
        $bob = $admin->createToken('bob-' . bin2hex(random_bytes(2)));
        $this->assertIsString($alice['token']);
        $this->assertNotEmpty($alice['expires_at']);
        $asAlice = self::$server->client($alice['token']);
        $asBob = self::$server->client($bob['token']);

        $answer = $asAlice->sendMessage('2+3', session: ['title' => "alice's"], agent: 'demo');
        $sessionId = $answer['session_id'];
        $executionId = $answer['execution']['id'];
        $session = $asAlice->getSession($sessionId);
        $this->assertSame($alice['user_id'], $session['user_id']);
        $this->assertSame('completed', $asAlice->wait($executionId, timeout: 60)['status']);

        foreach ([
            'session' => static fn (Client $c) => $c->getSession($sessionId),
            'messages' => static fn (Client $c) => iterator_to_array($c->listMessages($sessionId)),
            'execution' => static fn (Client $c) => $c->getExecution($executionId),
            'steps' => static fn (Client $c) => iterator_to_array($c->listSteps($executionId)),
            'events' => static fn (Client $c) => iterator_to_array($c->events($sessionId, timeout: 5)),
            'a message' => static fn (Client $c) => $c->postMessage($sessionId, 'let me in'),
        ] as $what => $call) {
            try {
                $call($asBob);
                $this->fail("bob reached alice's $what");
            } catch (NotFoundException $e) {
                $this->assertSame('not_found', $e->errorCode, $what);
                $this->assertSame(404, $e->status, $what);
            }
        }
        $this->assertNotContains($sessionId, array_column(iterator_to_array($asBob->listSessions(), false), 'id'));

        // The owner and the admin see it.
        $this->assertSame([$sessionId], array_column(iterator_to_array($asAlice->listSessions(), false), 'id'));
        $this->assertSame($sessionId, $admin->getSession($sessionId)['id']);
        $mine = iterator_to_array($admin->listSessions(userId: $alice['user_id']), false);
        $this->assertSame([$sessionId], array_column($mine, 'id'));
        $events = iterator_to_array($asAlice->events($sessionId, until: Event::executionEnds($executionId), timeout: 30), false);
        $this->assertSame('execution.completed', end($events)->event);

        // A user may not mint tokens or manage keys.
        try {
            $asAlice->createToken('mallory');
            $this->fail('a user token may not mint tokens');
        } catch (ForbiddenException $e) {
            $this->assertSame('forbidden', $e->errorCode);
        }
    }

    public function testKeys(): void
    {
        $admin = self::$server->client();
        $created = $admin->createKey('carol', role: 'user', name: 'carol laptop');
        $this->assertSame('user', $created['role']);
        $this->assertSame('carol laptop', $created['name']);
        $keys = iterator_to_array($admin->listKeys(), false);
        $this->assertContains($created['id'], array_column($keys, 'id'));
        foreach ($keys as $key) {
            $this->assertArrayNotHasKey('key', $key);
        }
        $asCarol = self::$server->client($created['key']);
        $session = $asCarol->createSession(title: "carol's");
        $this->assertSame('carol', $session['user_id']);

        $admin->deleteKey($created['id']);
        $this->assertNotContains($created['id'], array_column(iterator_to_array($admin->listKeys(), false), 'id'));
        try {
            $admin->deleteKey($created['id']);
            $this->fail('a deleted key is not found');
        } catch (NotFoundException $e) {
            $this->assertSame('not_found', $e->errorCode);
        }
        // A revoked key is refused within 5 s (servers cache keys that briefly).
        $refused = Wait::until(static function () use ($created): ?UnauthorizedException {
            try {
                self::$server->client($created['key'], maxRetries: 0)->listAgents();
                return null;
            } catch (UnauthorizedException $e) {
                return $e;
            }
        }, 30.0, 'the revoked key to be refused');
        $this->assertSame('unauthorized', $refused->errorCode);
        $this->assertSame(401, $refused->status);
    }
}

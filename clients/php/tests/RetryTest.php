<?php

declare(strict_types=1);

namespace Stepwise\Tests;

use PHPUnit\Framework\TestCase;
use Stepwise\Client;
use Stepwise\ConnectionException;
use Stepwise\RateLimitedException;
use Stepwise\ServerException;
use Stepwise\StepwiseException;
use Stepwise\Tests\Support\LocalServer;
use Stepwise\Tests\Support\Wait;

/**
 * Retries, Retry-After, connection errors and error bodies that are not the API's, against a
 * scripted HTTP server (`php -S` with tests/fixtures/scripted_server.php).
 */
final class RetryTest extends TestCase
{
    private const UNAVAILABLE = '{"error": {"code": "unavailable", "message": "the database does not answer", "field": null}}';
    private const LIMITED = '{"error": {"code": "rate_limited", "message": "slow down", "field": null}}';

    /** @var resource|null */
    private static $process = null;
    private static string $dir;
    private static string $url;

    public static function setUpBeforeClass(): void
    {
        self::$dir = LocalServer::tempDir('stepwise-php-scripted-');
        $port = LocalServer::freePort();
        self::$url = 'http://127.0.0.1:' . $port;
        $router = __DIR__ . '/fixtures/scripted_server.php';
        $env = ['SCRIPT_DIR' => self::$dir, 'PATH' => getenv('PATH') ?: '/usr/bin:/bin'];
        $log = self::$dir . '/php-server.log';
        self::$process = proc_open([PHP_BINARY, '-S', '127.0.0.1:' . $port, $router], [0 => ['file', '/dev/null', 'r'], 1 => ['file', $log, 'a'], 2 => ['file', $log, 'a']], $pipes, self::$dir, $env);
        Wait::until(static function () use ($port): bool {
            $socket = @stream_socket_client('tcp://127.0.0.1:' . $port, $errno, $error, 0.2);
            if ($socket === false) {
                return false;
            }
            fclose($socket);
            return true;
        }, 20.0, 'php -S to listen');
    }

    public static function tearDownAfterClass(): void
    {
        if (is_resource(self::$process)) {
            proc_terminate(self::$process, 9);
            proc_close(self::$process);
        }
        LocalServer::removeTree(self::$dir);
    }

    /** @param array<string, list<array{0: int, 1: array<string, string>, 2: string}>> $plan */
    private function script(array $plan): Client
    {
        file_put_contents(self::$dir . '/plan.json', json_encode($plan));
        @unlink(self::$dir . '/counts.json');
        @unlink(self::$dir . '/requests.log');
        return new Client(self::$url, 'sk-test', maxRetries: 3, backoff: 0.01);
    }

    /** @return list<array{0: float, 1: string}> the requests the server got: (time, "METHOD /path") */
    private function requests(): array
    {
        $lines = array_filter(explode("\n", (string) @file_get_contents(self::$dir . '/requests.log')));
        return array_map(static function (string $line): array {
            [$time, $rest] = explode(' ', $line, 2);
            return [(float) $time, $rest];
        }, array_values($lines));
    }

    public function testAReadIsRetriedOn5xxUntilItSucceeds(): void
    {
        $client = $this->script(['GET /v1/limits' => [
            [503, ['Retry-After' => '0'], self::UNAVAILABLE],
            [502, [], '<html>bad gateway</html>'],
            [504, [], ''],
            [200, [], '{"max_content_chars": 10}'],
        ]]);
        $this->assertSame(['max_content_chars' => 10], $client->limits());
        $this->assertCount(4, $this->requests());
    }

    public function testAReadGivesUpAfterMaxRetries(): void
    {
        $client = $this->script(['GET /v1/limits' => [[503, ['Retry-After' => '0'], self::UNAVAILABLE]]]);
        try {
            $client->limits();
            $this->fail('four 503s in a row must raise');
        } catch (ServerException $e) {
            $this->assertSame('unavailable', $e->errorCode);
            $this->assertSame(503, $e->status);
            $this->assertSame(0.0, $e->retryAfter);
        }
        $this->assertCount(4, $this->requests());
    }

    public function testAWriteIsNotRetriedOn5xxButIsOn429(): void
    {
        $client = $this->script([
            'POST /v1/sessions' => [[503, [], self::UNAVAILABLE]],
            'POST /v1/messages' => [[429, ['Retry-After' => '0'], self::LIMITED], [202, [], '{"session_id": "s"}']],
        ]);
        try {
            $client->createSession(title: 'once');
            $this->fail('a 503 to a write must raise');
        } catch (ServerException $e) {
            $this->assertSame('unavailable', $e->errorCode);
        }
        $this->assertSame(['session_id' => 's'], $client->sendMessage('hi'));
        $paths = array_column($this->requests(), 1);
        $this->assertSame(['POST /v1/sessions', 'POST /v1/messages', 'POST /v1/messages'], $paths);
    }

    public function testRetryAfterIsHonoured(): void
    {
        $client = $this->script(['GET /v1/agents' => [[429, ['Retry-After' => '1'], self::LIMITED], [200, [], '{"items": []}']]]);
        $this->assertSame([], $client->listAgents());
        $requests = $this->requests();
        $this->assertCount(2, $requests);
        $this->assertGreaterThanOrEqual(0.95, $requests[1][0] - $requests[0][0], 'the retry waited for Retry-After');
    }

    public function testRateLimitedAfterTheRetries(): void
    {
        $client = $this->script(['GET /v1/agents' => [[429, ['Retry-After' => '0'], self::LIMITED]]]);
        $this->expectException(RateLimitedException::class);
        $client->listAgents();
    }

    public function testAnAnswerThatIsNotTheApisShape(): void
    {
        $client = $this->script(['GET /v1/keys' => [[418, [], '<html>teapot</html>']], 'GET /v1/limits' => [[200, [], 'not json']]]);
        try {
            iterator_to_array($client->listKeys());
            $this->fail('a 418 must raise');
        } catch (StepwiseException $e) {
            $this->assertSame('http_error', $e->errorCode);
            $this->assertSame(418, $e->status);
            $this->assertStringContainsString('teapot', $e->getMessage());
        }
        try {
            $client->limits();
            $this->fail('a 200 that is not JSON must raise');
        } catch (StepwiseException $e) {
            $this->assertSame('invalid_response', $e->errorCode);
        }
    }

    public function testConnectionErrors(): void
    {
        $port = LocalServer::freePort(); // nothing listens there
        $client = new Client('http://127.0.0.1:' . $port, 'sk-secret-never-shown', maxRetries: 2, backoff: 0.01);
        try {
            $client->getSession('abc');
            $this->fail('a closed port must raise');
        } catch (ConnectionException $e) {
            $this->assertSame('connection_error', $e->errorCode);
            $this->assertNull($e->status);
            $this->assertStringContainsString('cannot connect to http://127.0.0.1:' . $port, $e->getMessage());
            $this->assertStringContainsString('[3 tries]', $e->getMessage());
            $this->assertStringNotContainsString('sk-secret-never-shown', $e->getMessage());
        }
        // A write that was never sent is retried too, and fails the same way.
        $this->expectException(ConnectionException::class);
        $client->createSession();
    }
}

<?php

declare(strict_types=1);

namespace Stepwise\Tests;

use PHPUnit\Framework\TestCase;
use Stepwise\CallError;
use Stepwise\Cancelled;
use Stepwise\Client;
use Stepwise\Retry;
use Stepwise\Run;
use Stepwise\Tests\Support\LocalServer;
use Stepwise\Tests\Support\SharedServer;
use Stepwise\Tests\Support\WorkerProcess;
use Stepwise\Worker;

/** A Worker in this process (runOnce): failures, retries, cancels, replayed errors. */
final class WorkerRunTest extends TestCase
{
    private Client $client;
    /** @var list<array{0: string, 1: string}> */
    private array $logged = [];

    protected function setUp(): void
    {
        $this->client = SharedServer::get()->client();
    }

    private function worker(string $type, callable $handler): Worker
    {
        $worker = new Worker($this->client, waitS: 10.0, logger: function (string $level, string $message): void {
            $this->logged[] = [$level, $message];
        });
        $worker->agent($type, $handler);
        $worker->announce();
        return $worker;
    }

    private static function type(string $name): string
    {
        return 'php-' . $name . '-' . bin2hex(random_bytes(3));
    }

    public function testAnExceptionFailsTheExecution(): void
    {
        $type = self::type('fail');
        $worker = $this->worker($type, static function (Run $run): never {
            $run->step(['model_output' => 'about to break']);
            throw new \DomainException("boom\nsecond line");
        });
        $id = $this->client->sendMessage('x', agent: $type)['execution']['id'];
        $this->assertSame(1, $worker->runOnce());
        $execution = $this->client->getExecution($id);
        $this->assertSame('failed', $execution['status']);
        $this->assertSame('DomainException: boom', $execution['error_message']);
        $errors = array_filter($this->logged, static fn (array $line): bool => $line[0] === 'error' && str_contains($line[1], 'boom'));
        $this->assertCount(1, $errors, 'the failure is logged once, as an error');
    }

    public function testRetryRunsTheExecutionAgainAndReplaysSavedErrors(): void
    {
        $type = self::type('retry');
        $attempts = [];
        $worker = $this->worker($type, static function (Run $run) use (&$attempts): string {
            $attempts[] = $run->attempt;
            $first = $run->call('fetch', static fn (int $n): array => ['n' => $n], 7);
            try {
                $run->call('flaky', static function (): never {
                    throw new \InvalidArgumentException('bad input');
                });
            } catch (\InvalidArgumentException $e) {
                // A replay throws the saved error again, as the same class.
                $first['error'] = $e->getMessage();
            }
            try {
                $run->call('odd', static function (): never {
                    throw new CustomArgsError(1, 2);
                });
            } catch (CustomArgsError | CallError $e) {
                $first['odd'] = $e::class;
            }
            if ($run->attempt === 1) {
                throw new Retry('try again');
            }
            return json_encode($first);
        });
        $id = $this->client->sendMessage('x', agent: $type)['execution']['id'];
        $this->assertSame(1, $worker->runOnce());
        $this->assertSame('pending', $this->client->getExecution($id)['status']);
        $this->assertSame(1, $worker->runOnce());
        $execution = $this->client->getExecution($id);
        $this->assertSame('completed', $execution['status']);
        $this->assertSame([1, 2], $attempts);
        $this->assertSame(['n' => 7, 'error' => 'bad input', 'odd' => CallError::class], json_decode($execution['output'], true));
        $steps = iterator_to_array($this->client->listSteps($id), false);
        $this->assertSame([1, 2, 3], array_column($steps, 'step_number'));
        $this->assertSame(['kind' => 'InvalidArgumentException', 'message' => 'bad input'], $steps[1]['error']);
    }

    public function testACancelledExecutionStopsItsRun(): void
    {
        $type = self::type('cancel');
        $client = $this->client;
        $reason = null;
        $worker = $this->worker($type, static function (Run $run) use ($client, &$reason): string {
            $run->step(['model_output' => 'working']);
            $client->cancelExecution($run->executionId);
            try {
                $run->heartbeat();
            } catch (Cancelled $e) {
                $reason = $e->reason;
                throw $e;
            }
            return 'never';
        });
        $id = $this->client->sendMessage('x', agent: $type)['execution']['id'];
        $this->assertSame(1, $worker->runOnce());
        $this->assertContains($reason, ['cancelled', 'lease_lost']);
        $execution = $this->client->getExecution($id);
        $this->assertSame('cancelled', $execution['status']);
        $this->assertNull($execution['output']);
    }

    public function testASubagentAndSkippingTheReplay(): void
    {
        $type = self::type('parent');
        $seen = [];
        $worker = $this->worker($type, static function (Run $run) use (&$seen): string {
            $seen[] = [$run->attempt, array_column($run->savedSteps, 'step_number'), $run->replaying()];
            if ($run->attempt === 1) {
                $run->step(['model_output' => 'first attempt']);
                throw new Retry('again');
            }
            $run->skipReplay(); // go on after the saved step instead of replaying it
            $said = $run->subagent('php-child', 'hello', timeout: 60);
            $run->step(['model_output' => 'the child said: ' . $said]);
            return $said;
        });
        $dir = LocalServer::tempDir('stepwise-php-child-');
        $child = (new WorkerProcess(SharedServer::get(), ['php-child'], $dir, 'php-child-worker', maxExecutions: 1))->waitReady();
        try {
            $posted = $this->client->sendMessage('x', agent: $type);
            $id = $posted['execution']['id'];
            $this->assertSame(1, $worker->runOnce());
            $this->assertSame(1, $worker->runOnce());
            $this->assertSame(0, $child->waitExit(), $child->output());
        } finally {
            $child->close();
            LocalServer::removeTree($dir);
        }
        $this->assertSame([[1, [], false], [2, [1], true]], $seen);
        $execution = $this->client->getExecution($id);
        $this->assertSame('completed', $execution['status'], (string) $execution['error_message']);
        $this->assertSame('child says hello', $execution['output']);
        $steps = iterator_to_array($this->client->listSteps($id), false);
        $this->assertSame(['first attempt', 'the child said: child says hello'], array_column($steps, 'model_output'));
        $children = array_filter(
            iterator_to_array($this->client->listSessionExecutions($posted['session_id']), false),
            static fn (array $e): bool => $e['parent_execution_id'] === $id,
        );
        $this->assertCount(1, $children);
        $this->assertSame('php-child', array_values($children)[0]['agent_type']);
    }

    public function testAnAgentTypeNeedsAValidName(): void
    {
        $this->expectException(\InvalidArgumentException::class);
        (new Worker($this->client))->agent('not a name', static fn (): string => '');
    }
}

/** An exception whose constructor does not take a message: replayed as a CallError. */
final class CustomArgsError extends \RuntimeException
{
    public function __construct(int $a, int $b)
    {
        parent::__construct("args $a $b");
    }
}

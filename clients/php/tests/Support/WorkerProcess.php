<?php

declare(strict_types=1);

namespace Stepwise\Tests\Support;

/**
 * A PHP worker subprocess (tests/fixtures/worker.php) for the tests: started, signalled,
 * waited for.
 */
final class WorkerProcess
{
    /** @var resource */
    private $process;
    public readonly string $outputPath;
    private ?int $exitCode = null;

    /**
     * @param list<string> $agents the fixture's agent types this worker runs
     */
    public function __construct(
        LocalServer $server,
        array $agents,
        public readonly string $fixtureDir,
        public readonly string $workerId,
        ?int $maxExecutions = null,
    ) {
        $this->outputPath = $fixtureDir . '/' . $workerId . '.out';
        $command = [PHP_BINARY, dirname(__DIR__) . '/fixtures/worker.php', implode(',', $agents)];
        if ($maxExecutions !== null) {
            $command[] = (string) $maxExecutions;
        }
        $env = [
            'PATH' => getenv('PATH') ?: '/usr/bin:/bin',
            'STEPWISE_URL' => $server->url,
            'STEPWISE_API_KEY' => $server->adminKey,
            'WORKER_ID' => $workerId,
            'FIXTURE_DIR' => $fixtureDir,
        ];
        $out = fopen($this->outputPath, 'ab');
        $process = proc_open($command, [0 => ['file', '/dev/null', 'r'], 1 => $out, 2 => $out], $pipes, $fixtureDir, $env);
        fclose($out);
        if (!is_resource($process)) {
            throw new \RuntimeException('cannot start the worker fixture');
        }
        $this->process = $process;
    }

    /** Waits until the worker printed "ready" (its agent types are announced). */
    public function waitReady(float $timeout = 30.0): self
    {
        Wait::until(fn (): bool => str_contains($this->output(), "ready\n") || !$this->running(), $timeout, 'the worker to announce itself');
        if (!str_contains($this->output(), "ready\n")) {
            throw new \RuntimeException("the worker did not start:\n" . $this->output());
        }
        return $this;
    }

    public function running(): bool
    {
        if ($this->exitCode !== null) {
            return false;
        }
        $status = proc_get_status($this->process);
        if (!$status['running']) {
            $this->exitCode = $status['signaled'] ? 128 + $status['termsig'] : $status['exitcode'];
            return false;
        }
        return true;
    }

    /** Sends a signal (9: SIGKILL, 15: SIGTERM, 2: SIGINT). */
    public function signal(int $signal): void
    {
        if ($this->running()) {
            proc_terminate($this->process, $signal);
        }
    }

    /** Waits for the process to end; returns its exit status (128 + N when signal N ended it). */
    public function waitExit(float $timeout = 60.0): int
    {
        Wait::until(fn (): bool => !$this->running(), $timeout, 'the worker process to exit');
        proc_close($this->process);
        $code = $this->exitCode ?? -1;
        return $code;
    }

    /** What it printed (stdout and stderr). */
    public function output(): string
    {
        return (string) @file_get_contents($this->outputPath);
    }

    /** Kills it if it still runs (test clean-up). */
    public function close(): void
    {
        if ($this->running()) {
            proc_terminate($this->process, 9);
            $this->waitExit(15.0);
        }
    }
}

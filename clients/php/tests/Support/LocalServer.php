<?php

declare(strict_types=1);

namespace Stepwise\Tests\Support;

use Stepwise\Client;

/**
 * A real `stepwise serve` (the binary of env STEPWISE_BIN) on a free loopback port with a
 * SQLite database in a temporary directory, for the tests.
 *
 * An admin API key of tenant `acme` (user `admin`) is made with `stepwise keys create` before
 * the server starts, so the server requires keys, as a deployment does. kill() and restart()
 * keep the port and the database.
 */
final class LocalServer
{
    public readonly string $binary;
    public readonly string $dir;
    public readonly string $database;
    public readonly string $adminKey;
    public readonly string $logPath;
    public int $port = 0;
    public string $url = '';

    /** @var resource|null */
    private $process = null;

    /**
     * @param list<string>          $args extra `stepwise serve` flags (e.g. `--lease-secs 2`)
     * @param array<string, string> $env  extra environment variables of the server
     */
    public function __construct(private readonly array $args = [], private readonly array $env = [])
    {
        $binary = getenv('STEPWISE_BIN') ?: '';
        if ($binary === '' || !is_file($binary) || !is_executable($binary)) {
            throw new \RuntimeException(sprintf('STEPWISE_BIN=%s is not an executable file', var_export($binary, true)));
        }
        $this->binary = (string) realpath($binary);
        $this->dir = self::tempDir('stepwise-php-test-');
        $this->database = 'sqlite://' . $this->dir . '/stepwise.db';
        $this->logPath = $this->dir . '/server.log';
        $this->adminKey = $this->createKey('acme', 'admin', 'admin');
    }

    /** Makes a temporary directory. */
    public static function tempDir(string $prefix): string
    {
        $dir = sys_get_temp_dir() . '/' . $prefix . bin2hex(random_bytes(4));
        if (!mkdir($dir, 0700) && !is_dir($dir)) {
            throw new \RuntimeException('cannot make ' . $dir);
        }
        return $dir;
    }

    /** A free loopback TCP port (a bind to port 0, closed again). */
    public static function freePort(): int
    {
        $socket = stream_socket_server('tcp://127.0.0.1:0', $errno, $error);
        if ($socket === false) {
            throw new \RuntimeException('cannot find a free port: ' . $error);
        }
        $name = (string) stream_socket_get_name($socket, false);
        fclose($socket);
        return (int) substr($name, strrpos($name, ':') + 1);
    }

    /** `stepwise keys create`: a new API key of `$tenant`'s `$user` with `$role`. */
    public function createKey(string $tenant, string $user, string $role): string
    {
        $command = [$this->binary, 'keys', 'create', '--database', $this->database, '--tenant', $tenant, '--user', $user, '--role', $role];
        $process = proc_open($command, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, $this->dir, $this->environment());
        if (!is_resource($process)) {
            throw new \RuntimeException('cannot run stepwise keys create');
        }
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        $status = proc_close($process);
        $lines = array_values(array_filter(array_map('trim', explode("\n", (string) $out))));
        if ($status !== 0 || $lines === []) {
            throw new \RuntimeException("stepwise keys create failed ($status): " . $err);
        }
        return $lines[count($lines) - 1];
    }

    /** Starts the server (on a free port the first time, the same one after) and waits until it is ready. */
    public function start(): self
    {
        if ($this->running()) {
            throw new \LogicException('the server runs already');
        }
        $pickPort = $this->port === 0;
        for ($try = 0; ; $try++) {
            if ($pickPort) {
                $this->port = self::freePort();
            }
            $this->url = 'http://127.0.0.1:' . $this->port;
            try {
                $this->launch();
                return $this;
            } catch (\RuntimeException $e) {
                // Another process may have taken the port between the probe and the bind.
                if (!$pickPort || $try >= 2 || !str_contains(strtolower($e->getMessage()), 'in use')) {
                    throw $e;
                }
            }
        }
    }

    private function launch(): void
    {
        $command = array_merge([
            $this->binary, 'serve',
            '--listen', '127.0.0.1:' . $this->port,
            '--database', $this->database,
            '--data-dir', $this->dir,
            '--rate-limit-per-sec', '0',
            '--max-sse-per-tenant', '0',
            '--max-sse-per-session', '0',
        ], $this->args);
        file_put_contents($this->logPath, '--- ' . implode(' ', $command) . "\n", FILE_APPEND);
        $log = fopen($this->logPath, 'ab');
        $this->process = proc_open($command, [0 => ['file', '/dev/null', 'r'], 1 => $log, 2 => $log], $pipes, $this->dir, $this->environment());
        fclose($log);
        if (!is_resource($this->process)) {
            throw new \RuntimeException('cannot start ' . $this->binary);
        }
        $deadline = microtime(true) + 60.0;
        while (true) {
            if (!$this->running()) {
                $this->process = null;
                throw new \RuntimeException('stepwise serve exited before it was ready' . $this->logTail());
            }
            if (self::ready($this->url)) {
                return;
            }
            if (microtime(true) > $deadline) {
                $this->signal(9);
                throw new \RuntimeException('stepwise serve was not ready within 60 s' . $this->logTail());
            }
            usleep(50_000);
        }
    }

    private static function ready(string $url): bool
    {
        $ch = curl_init($url . '/readyz');
        curl_setopt_array($ch, [CURLOPT_RETURNTRANSFER => true, CURLOPT_TIMEOUT_MS => 2000]);
        curl_exec($ch);
        $status = (int) curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
        curl_close($ch);
        return $status === 200;
    }

    /** Whether the server process is alive. */
    public function running(): bool
    {
        return is_resource($this->process) && proc_get_status($this->process)['running'];
    }

    /** The server's process id. */
    public function pid(): ?int
    {
        return is_resource($this->process) ? proc_get_status($this->process)['pid'] : null;
    }

    /** Kills the server at once (SIGKILL), like a crash. */
    public function kill(): void
    {
        $this->signal(9);
    }

    /** Stops the server gracefully (SIGTERM) and waits for it. */
    public function stop(): void
    {
        $this->signal(15);
    }

    /** Starts it again on the same port and database. */
    public function restart(): self
    {
        if ($this->running()) {
            $this->stop();
        }
        return $this->start();
    }

    private function signal(int $signal): void
    {
        if (!is_resource($this->process)) {
            return;
        }
        if ($this->running()) {
            proc_terminate($this->process, $signal);
            $deadline = microtime(true) + 15.0;
            while ($this->running()) {
                if (microtime(true) > $deadline) {
                    proc_terminate($this->process, 9);
                    $deadline = microtime(true) + 15.0;
                }
                usleep(20_000);
            }
        }
        proc_close($this->process);
        $this->process = null;
    }

    /** A client of this server with the admin key (or `$credential`). */
    public function client(?string $credential = null, int $maxRetries = 3): Client
    {
        return new Client($this->url, $credential ?? $this->adminKey, timeout: 30.0, maxRetries: $maxRetries);
    }

    /** The server's log so far. */
    public function log(): string
    {
        return (string) @file_get_contents($this->logPath);
    }

    private function logTail(int $lines = 30): string
    {
        $all = explode("\n", trim($this->log()));
        return "\n--- server log, last lines:\n" . implode("\n", array_slice($all, -$lines));
    }

    /** Stops the server and removes its directory. */
    public function close(): void
    {
        $this->signal(15);
        self::removeTree($this->dir);
    }

    public static function removeTree(string $dir): void
    {
        if (!is_dir($dir)) {
            return;
        }
        $items = new \RecursiveIteratorIterator(
            new \RecursiveDirectoryIterator($dir, \FilesystemIterator::SKIP_DOTS),
            \RecursiveIteratorIterator::CHILD_FIRST,
        );
        foreach ($items as $item) {
            $item->isDir() && !$item->isLink() ? @rmdir($item->getPathname()) : @unlink($item->getPathname());
        }
        @rmdir($dir);
    }

    /** @return array<string, string> the server's environment: no STEPWISE_* of the caller's but STEPWISE_LOG */
    private function environment(): array
    {
        $env = [];
        foreach (getenv() as $name => $value) {
            if (!str_starts_with($name, 'STEPWISE_') || $name === 'STEPWISE_LOG') {
                $env[$name] = $value;
            }
        }
        $env['NO_COLOR'] = '1';
        $env['STEPWISE_DEMO_STEP_MS'] = '5';
        return array_merge($env, $this->env);
    }
}

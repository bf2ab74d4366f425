<?php

declare(strict_types=1);

namespace Stepwise\Tests;

use PHPUnit\Framework\TestCase;
use Stepwise\Tests\Support\LocalServer;
use Stepwise\Tests\Support\SharedServer;

/** The README's runnable example (examples/flow.php with its worker) runs as documented. */
final class ExampleTest extends TestCase
{
    /** @return array{0: int, 1: string, 2: string} exit status, stdout, stderr */
    private static function runFlow(LocalServer $server, string $answer): array
    {
        $command = [PHP_BINARY, dirname(__DIR__) . '/examples/flow.php', '--spawn-worker', '--answer', $answer];
        $env = ['PATH' => getenv('PATH') ?: '/usr/bin:/bin', 'STEPWISE_URL' => $server->url, 'STEPWISE_API_KEY' => $server->adminKey];
        // The client needs ext-curl and ext-json only: the flow and the worker it spawns run
        // with mbstring's functions taken away (PHPUnit itself needs them).
        $ini = tempnam(sys_get_temp_dir(), 'stepwise-php-ini');
        file_put_contents($ini, 'disable_functions = ' . implode(',', get_extension_funcs('mbstring') ?: []) . "\n");
        $env['PHPRC'] = $ini;
        $process = proc_open($command, [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, dirname(__DIR__), $env);
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        $status = proc_close($process);
        unlink($ini);
        return [$status, (string) $out, (string) $err];
    }

    public function testTheShopFlowWithAYes(): void
    {
        $server = SharedServer::get();
        [$status, $out, $err] = self::runFlow($server, 'yes');
        $this->assertSame(0, $status, $out . $err);
        $this->assertStringContainsString('? Order 1042 is shipped and arrives on 2026-01-08', $out);
        $this->assertStringContainsString('  · Looking up order 1042', $out);
        $this->assertMatchesRegularExpression('/= completed: Done: order 1042 now goes to the pickup point \(reference CHG-1042-\w+\)\./', $out);
        $this->assertStringContainsString('step 5 action     change_delivery', $out);
        $this->assertStringContainsString('worker', $err);
        $this->assertStringContainsString('stopped', $err, 'the spawned worker stopped cleanly on SIGTERM');

        // What the flow printed is what the server holds.
        preg_match('/session (\S+), execution (\S+)/', $out, $ids);
        $client = $server->client();
        $execution = $client->getExecution($ids[2]);
        $this->assertSame('completed', $execution['status']);
        $this->assertSame('order', $client->getSession($ids[1])['related_type']);
        $this->assertSame('order', $execution['input']['context']['related_type']);
    }

    public function testTheShopFlowWithANo(): void
    {
        [$status, $out, $err] = self::runFlow(SharedServer::get(), 'no');
        $this->assertSame(0, $status, $out . $err);
        $this->assertStringContainsString('= completed: All right, order 1042 stays on its way to 12 Rue de la Paix, Paris.', $out);
        $this->assertStringNotContainsString('change_delivery', $out);
    }
}

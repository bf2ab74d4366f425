<?php

declare(strict_types=1);

/*
 * The PHP worker claim_start.php measures: agent type `bench-echo` (as the Python bench's
 * worker_echo.py) prints `started <execution id> <unix time>` the moment its callable starts,
 * then saves one step and answers. Env: STEPWISE_URL, STEPWISE_API_KEY.
 */

require dirname(__DIR__) . '/autoload.php';

use Stepwise\Client;
use Stepwise\Run;
use Stepwise\Worker;

$worker = new Worker(Client::fromEnvironment(), logger: static function (string $level, string $message): void {
    if ($level === 'error' || $level === 'warning') {
        fwrite(STDERR, "$level: $message\n");
    }
});
$worker->agent('bench-echo', static function (Run $run): string {
    $started = microtime(true);
    fwrite(STDOUT, sprintf("started %s %.6f\n", $run->executionId, $started));
    $run->step(['model_output' => 'Echoing', 'observations' => $run->inputText]);
    return 'Echo: ' . $run->inputText;
}, description: 'Saves one step and answers');
$worker->announce();
fwrite(STDOUT, "ready\n");
$worker->run();

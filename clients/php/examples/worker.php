<?php

declare(strict_types=1);

/*
 * The worker process of seed 002's shop assistant: runs App\Jobs\ExecuteAgentJob for every
 * execution of agent type `shop-assistant`, until SIGTERM or SIGINT.
 *
 *     STEPWISE_URL=http://127.0.0.1:7777 STEPWISE_API_KEY=... php examples/worker.php
 *
 * In a Laravel app this is an Artisan command (`php artisan stepwise:work`) kept running by
 * supervisor, like `queue:work`; see the README.
 */

require __DIR__ . '/../autoload.php';
require __DIR__ . '/ExecuteAgentJob.php';

use App\Jobs\ExecuteAgentJob;
use Stepwise\Client;
use Stepwise\Run;
use Stepwise\Worker;

$worker = new Worker(Client::fromEnvironment());
$worker->agent(
    'shop-assistant',
    static fn (Run $run): string => (new ExecuteAgentJob($run))->handle(),
    description: 'Answers questions about orders and redirects parcels',
);
$worker->run();

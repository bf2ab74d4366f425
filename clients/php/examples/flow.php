<?php

declare(strict_types=1);

/*
 * Seed 002's flow, from the app's side (a controller, a CLI): the customer's message on the
 * order page → an execution of the `shop-assistant` agent → its steps, live → its question →
 * the customer's answer → the final answer.
 *
 *     STEPWISE_URL=http://127.0.0.1:7777 STEPWISE_API_KEY=... php examples/flow.php [--answer yes] [--spawn-worker]
 *
 * `--spawn-worker` starts examples/worker.php beside it (and stops it at the end with
 * SIGTERM); otherwise run that worker yourself. Exits 0 when the execution completed.
 */

require __DIR__ . '/../autoload.php';

use Stepwise\Client;
use Stepwise\Event;

$options = getopt('', ['answer:', 'spawn-worker']);
$reply = is_string($options['answer'] ?? null) ? $options['answer'] : 'yes';
$client = Client::fromEnvironment();

$worker = null;
if (isset($options['spawn-worker'])) {
    $worker = proc_open([PHP_BINARY, __DIR__ . '/worker.php'], [0 => ['file', '/dev/null', 'r'], 1 => STDERR, 2 => STDERR], $pipes);
    $deadline = microtime(true) + 30;
    while (!in_array('shop-assistant', array_column(array_filter($client->listAgents(), static fn (array $a): bool => (int) $a['workers_online'] > 0), 'type'), true)) {
        if (microtime(true) > $deadline || !proc_get_status($worker)['running']) {
            fwrite(STDERR, "the worker did not come online\n");
            exit(1);
        }
        usleep(50_000);
    }
}

/**
 * Prints the session's events after `$after` until `$executionId` completes, fails, is
 * cancelled or pauses; returns the last event.
 */
$follow = static function (Client $client, string $sessionId, string $executionId, ?int $after): Event {
    $last = null;
    $streaming = false;
    foreach ($client->events($sessionId, after: $after, until: Event::executionEnds($executionId), timeout: 120) as $event) {
        if ($event->event === 'message.delta') {
            echo $streaming ? '' : '  … ', $event->content();
            $streaming = true;
            continue;
        }
        if ($streaming) {
            echo "\n";
            $streaming = false;
        }
        $last = $event;
        $role = $event->metadata()['role'] ?? null;
        match (true) {
            $event->event === 'message.created' && $role === 'info' => print("  · {$event->content()}\n"),
            $event->event === 'tool.completed' && $event->executionId() === $executionId => print("      → {$event->content()}\n"),
            $event->event === 'execution.paused' && $event->executionId() === $executionId => print("  ? {$event->content()}\n"),
            $event->endsExecution($executionId, orPaused: false) => print('  [' . substr($event->event, 10) . "]\n"),
            default => null,
        };
    }
    if ($last === null || !$last->endsExecution($executionId)) {
        throw new RuntimeException('the execution did not end in time');
    }
    return $last;
};

$status = 1;
try {
    // The customer writes from the order page: the message carries where it came from.
    $question = 'Where is my order 1042?';
    echo "> $question\n";
    $posted = $client->sendMessage(
        $question,
        session: ['title' => 'Order 1042', 'related_type' => 'order', 'related_id' => '1042', 'initial_context_url' => 'https://shop.example/orders/1042'],
        agent: ['type' => 'shop-assistant', 'wait' => true],
        relatedType: 'order',
        relatedId: '1042',
        contextUrl: 'https://shop.example/orders/1042',
    );
    $sessionId = $posted['session_id'];
    $executionId = $posted['execution']['id'];
    echo "  session $sessionId, execution $executionId\n";

    $end = $follow($client, $sessionId, $executionId, null);
    if ($end->event === 'execution.paused') {
        echo "> $reply\n";
        $client->postMessage($sessionId, $reply); // the answer resumes the paused execution
        $end = $follow($client, $sessionId, $executionId, $end->id);
    }

    $execution = $client->getExecution($executionId);
    echo "= {$execution['status']}: ", is_string($execution['output']) ? $execution['output'] : json_encode($execution['output']), "\n";
    foreach ($client->listSteps($executionId) as $step) {
        $tool = $step['tool_calls'][0]['name'] ?? null;
        echo sprintf("  step %d %-10s %s\n", $step['step_number'], $step['kind'], $tool ?? (string) ($step['model_output'] ?? $step['observations'] ?? ''));
    }
    $status = $execution['status'] === 'completed' ? 0 : 1;
} finally {
    if ($worker !== null) {
        proc_terminate($worker, 15); // SIGTERM: the worker stops cleanly
        proc_close($worker);
    }
}
exit($status);

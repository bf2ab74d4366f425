<?php

declare(strict_types=1);

/*
 * A worker's start latency, measured from outside against one `stepwise serve`, the way
 * clients/python/bench/bench_worker.py measures it ("start latency"):
 *
 * - post_to_callable_start: the worker waits in its claim (POST /v1/workers/claim, a long
 *   poll); a message for its agent type is posted (POST /v1/messages, a new session each);
 *   the time from just before that post to the moment the worker's callable starts (the agent
 *   prints microtime(true) as its first statement; same machine, same clock). This is the
 *   whole path a user waits for: the post, the claim's wake-up and answer, the worker reading
 *   the claim and calling the agent.
 * - message_to_started_server_clock: the same from the server's own clocks, the user message's
 *   `created_at` to the `execution.started` event's `timestamp` (the Python bench's second
 *   figure).
 * - raw_claim_answered_after_post: no worker at all, a bare claim request waits and a message
 *   is posted; the time until the claim's answer arrives (the Python bench's first figure,
 *   "claim_answered_after_post"). post_to_callable_start minus this is the worker's own cost.
 *
 * Rounds go one at a time: each waits for the previous execution to complete, then 20 ms
 * (so the worker is back in its claim, as the Python bench does), then posts. p50 and p99 in
 * milliseconds; 5 warm-up rounds are left out.
 *
 *     STEPWISE_BIN=target/debug/stepwise php clients/php/bench/claim_start.php [--rounds 200]
 *     php clients/php/bench/claim_start.php --url http://127.0.0.1:7777 [--api-key KEY]
 *
 * `--worker-cmd CMD` measures another worker the same way: any process serving agent type
 * `bench-echo` that prints `ready` once it claims, and `started <execution id> <unix time>` as
 * its agent starts (claim_start_worker.py does it for the Python worker). Prints one JSON object.
 */

require dirname(__DIR__) . '/autoload.php';
require dirname(__DIR__) . '/tests/Support/LocalServer.php';
require dirname(__DIR__) . '/tests/Support/Wait.php';

use Stepwise\Client;
use Stepwise\Tests\Support\LocalServer;

$options = getopt('', ['rounds:', 'url:', 'api-key:', 'worker-cmd:', 'server-arg:']);
$rounds = (int) ($options['rounds'] ?? 100);
$warmup = 5;
$server = null;
if (isset($options['url'])) {
    $url = (string) $options['url'];
    $key = isset($options['api-key']) ? (string) $options['api-key'] : (getenv('STEPWISE_API_KEY') ?: null);
} else {
    $server = (new LocalServer(['--workers', '16']))->start();
    $url = $server->url;
    $key = $server->adminKey;
}
$client = new Client($url, $key);

/** @param list<float> $values seconds */
function percentiles(array $values): array
{
    sort($values);
    $at = static fn (float $q): float => $values[min(count($values) - 1, (int) round($q * (count($values) - 1)))];
    return ['p50_ms' => round($at(0.5) * 1000, 3), 'p99_ms' => round($at(0.99) * 1000, 3), 'n' => count($values)];
}

function rfc3339(string $text): float
{
    $time = DateTimeImmutable::createFromFormat('Y-m-d\TH:i:s.u\Z', $text, new DateTimeZone('UTC'));
    if ($time === false) {
        throw new RuntimeException('not an RFC 3339 time: ' . $text);
    }
    return (float) $time->format('U.u');
}

/** A JSON POST as a curl handle (for curl_multi). */
function postHandle(string $url, ?string $key, string $path, array $body, float $timeout): CurlHandle
{
    $ch = curl_init($url . $path);
    $headers = ['Content-Type: application/json', 'Expect:'];
    if ($key !== null) {
        $headers[] = 'Authorization: Bearer ' . $key;
    }
    curl_setopt_array($ch, [
        CURLOPT_POST => true,
        CURLOPT_POSTFIELDS => json_encode($body),
        CURLOPT_HTTPHEADER => $headers,
        CURLOPT_RETURNTRANSFER => true,
        CURLOPT_TIMEOUT_MS => (int) ($timeout * 1000),
    ]);
    return $ch;
}

/** The bare claim's answer time after a post, as bench_worker.py's start_latency measures it. */
function rawClaimLatency(string $url, ?string $key, int $rounds): array
{
    $latencies = [];
    $claim = ['worker_id' => 'bench-raw-claimer', 'agents' => [['type' => 'bench-raw']], 'slots' => 1, 'wait_s' => 20];
    $multi = curl_multi_init();
    for ($n = 0; $n < $rounds; $n++) {
        $claimer = postHandle($url, $key, '/v1/workers/claim', $claim, 30);
        curl_multi_add_handle($multi, $claimer);
        $pumpUntil = microtime(true) + 0.02; // the claim is sent and waits
        do {
            curl_multi_exec($multi, $running);
            curl_multi_select($multi, 0.005);
        } while (microtime(true) < $pumpUntil);
        $t0 = microtime(true);
        $poster = postHandle($url, $key, '/v1/messages', ['content' => "raw $n", 'agent' => ['type' => 'bench-raw', 'wait' => true]], 30);
        curl_multi_add_handle($multi, $poster);
        $claimedAt = null;
        $posted = false;
        while ($claimedAt === null || !$posted) {
            curl_multi_exec($multi, $running);
            while ($info = curl_multi_info_read($multi)) {
                if ($info['handle'] === $claimer) {
                    $claimedAt = microtime(true);
                } elseif ($info['handle'] === $poster) {
                    $posted = true;
                }
            }
            if ($claimedAt === null || !$posted) {
                curl_multi_select($multi, 0.001);
            }
        }
        $answer = json_decode((string) curl_multi_getcontent($claimer), true);
        curl_multi_remove_handle($multi, $claimer);
        curl_multi_remove_handle($multi, $poster);
        $item = $answer['items'][0] ?? null;
        if ($item === null) {
            throw new RuntimeException('the raw claim got nothing: ' . json_encode($answer));
        }
        // Done with it: complete the execution under the claim's lease.
        $done = postHandle($url, $key, '/v1/executions/' . $item['execution']['id'] . '/complete', ['output' => 'ok'], 30);
        curl_setopt($done, CURLOPT_HTTPHEADER, array_merge(['Content-Type: application/json', 'Stepwise-Lease: ' . $item['lease']], $key !== null ? ['Authorization: Bearer ' . $key] : []));
        curl_exec($done);
        if ($n >= 5) {
            $latencies[] = $claimedAt - $t0;
        }
    }
    curl_multi_close($multi);
    return percentiles($latencies);
}

// --- the worker --------------------------------------------------------------------------------

$command = isset($options['worker-cmd'])
    ? ['/bin/sh', '-c', 'exec ' . $options['worker-cmd']]
    : [PHP_BINARY, __DIR__ . '/claim_start_worker.php'];
$env = getenv();
$env['STEPWISE_URL'] = $url;
if ($key !== null) {
    $env['STEPWISE_API_KEY'] = $key;
}
$worker = proc_open($command, [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => STDERR], $pipes, null, $env);
if (!is_resource($worker)) {
    throw new RuntimeException('cannot start the worker');
}
$out = $pipes[1];

/** The next line the worker prints, or an exception after $timeout seconds. */
$readLine = static function (float $timeout) use ($out): string {
    $read = [$out];
    $write = $except = null;
    $seconds = (int) $timeout;
    if (stream_select($read, $write, $except, $seconds, (int) (($timeout - $seconds) * 1e6)) < 1) {
        throw new RuntimeException('the worker printed nothing in time');
    }
    $line = fgets($out);
    if ($line === false) {
        throw new RuntimeException('the worker exited');
    }
    return trim($line);
};

try {
    while ($readLine(60.0) !== 'ready') {
    }
    $toCallable = [];
    $serverClock = [];
    for ($n = 0; $n < $rounds + $warmup; $n++) {
        usleep(20_000); // the worker is back in its claim
        $t0 = microtime(true);
        $posted = $client->sendMessage("m$n", agent: 'bench-echo');
        [$word, $executionId, $startedAt] = explode(' ', $readLine(30.0)) + ['', '', '0'];
        if ($word !== 'started' || $executionId !== $posted['execution']['id']) {
            throw new RuntimeException("unexpected worker line for execution {$posted['execution']['id']}: $word $executionId");
        }
        $execution = $client->wait($executionId, timeout: 30, pollInterval: 0.002);
        if ($execution['status'] !== 'completed') {
            throw new RuntimeException("execution $executionId ended {$execution['status']}: " . ($execution['error_message'] ?? ''));
        }
        if ($n < $warmup) {
            continue;
        }
        $toCallable[] = (float) $startedAt - $t0;
        foreach ($client->events($posted['session_id'], timeout: 5) as $event) {
            if ($event->event === 'execution.started') {
                $serverClock[] = rfc3339((string) $event->timestamp()) - rfc3339($posted['message']['created_at']);
                break;
            }
        }
    }
} finally {
    proc_terminate($worker, 15);
    proc_close($worker);
}

$raw = rawClaimLatency($url, $key, $rounds + $warmup);
$result = [
    'machine' => sprintf('%s, %d cores', php_uname('m'), (int) trim((string) shell_exec('nproc'))),
    'php' => PHP_VERSION,
    'server' => $server !== null ? $server->binary : $url,
    'database' => $server !== null ? 'sqlite (temporary file)' : 'the server\'s',
    'worker' => isset($options['worker-cmd']) ? (string) $options['worker-cmd'] : 'php bench/claim_start_worker.php (Stepwise\\Worker)',
    'rounds' => $rounds,
    'post_to_callable_start' => percentiles($toCallable),
    'message_to_started_server_clock' => percentiles($serverClock),
    'raw_claim_answered_after_post' => $raw,
];
$server?->close();
echo json_encode($result, JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES), "\n";

<?php

declare(strict_types=1);

namespace Stepwise\Internal;

use Stepwise\ConnectionException;
use Stepwise\StepwiseException;

/**
 * The client's transport: one keep-alive curl handle, JSON in and out, retries, and the
 * API's error shape read into typed exceptions.
 *
 * @internal
 */
final class Http
{
    public const VERSION = '0.1.0';

    /** The code used when an answer carries no error body of the API's shape. */
    private const CODES_BY_STATUS = [
        400 => 'invalid_request',
        401 => 'unauthorized',
        403 => 'forbidden',
        404 => 'not_found',
        405 => 'method_not_allowed',
        408 => 'request_timeout',
        409 => 'conflict',
        413 => 'payload_too_large',
        414 => 'uri_too_long',
        415 => 'unsupported_media_type',
        422 => 'invalid_state',
        429 => 'rate_limited',
    ];

    private ?\CurlHandle $handle = null;
    /** @var array<string, string> */
    private array $headers;

    /** The server's Unix socket (a `unix:PATH` base URL), or null over TCP. */
    private readonly ?string $socket;
    /** What request URLs start with: the base URL, or `http://localhost` over a socket. */
    private readonly string $origin;

    /**
     * @param array<string, string> $headers sent with every request
     */
    public function __construct(
        public readonly string $baseUrl,
        private readonly ?string $credential,
        public readonly float $timeout,
        public readonly float $connectTimeout,
        public readonly RetryPolicy $retry,
        array $headers = [],
    ) {
        $this->headers = ['User-Agent' => 'stepwise-php/' . self::VERSION, 'Accept' => 'application/json'] + $headers;
        // `unix:PATH`: every request goes over the server's Unix socket, to `http://localhost`.
        if (str_starts_with($baseUrl, 'unix:')) {
            $this->socket = substr($baseUrl, strlen('unix:'));
            $this->origin = 'http://localhost';
        } else {
            $this->socket = null;
            $this->origin = $baseUrl;
        }
    }

    public function __debugInfo(): array
    {
        return ['baseUrl' => $this->baseUrl]; // never the credential
    }

    public function __destruct()
    {
        $this->close();
    }

    /** Closes the kept-alive connection. */
    public function close(): void
    {
        if ($this->handle !== null) {
            curl_close($this->handle);
            $this->handle = null;
        }
    }

    /** JSON text of a request body. */
    public static function encode(mixed $value): string
    {
        try {
            return json_encode(
                $value,
                JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION | JSON_THROW_ON_ERROR,
            );
        } catch (\JsonException $e) {
            throw new \InvalidArgumentException('the request body cannot be sent as JSON: ' . $e->getMessage(), 0, $e);
        }
    }

    /**
     * The full URL of `$path` with `$query`.
     *
     * @param array<string, scalar|null> $query
     */
    public function url(string $path, array $query = []): string
    {
        $pairs = [];
        foreach ($query as $key => $value) {
            if ($value === null) {
                continue;
            }
            if (is_bool($value)) {
                $value = $value ? 'true' : 'false';
            }
            $pairs[] = rawurlencode((string) $key) . '=' . rawurlencode((string) $value);
        }
        return $this->origin . $path . ($pairs === [] ? '' : '?' . implode('&', $pairs));
    }

    /**
     * The header lines of a request: the client's, the credential, then `$extra`.
     *
     * @param array<string, string> $extra
     * @return list<string>
     */
    public function headerLines(array $extra = [], bool $withBody = false): array
    {
        $headers = $this->headers;
        if ($this->credential !== null && $this->credential !== '') {
            $headers['Authorization'] = 'Bearer ' . $this->credential;
        }
        if ($withBody) {
            $headers['Content-Type'] = 'application/json';
        }
        // curl would otherwise wait for "100 Continue" before sending a body over 1 KiB.
        $headers['Expect'] = '';
        foreach ($extra as $name => $value) {
            $headers[$name] = $value;
        }
        $lines = [];
        foreach ($headers as $name => $value) {
            $lines[] = $value === '' ? $name . ':' : $name . ': ' . $value;
        }
        return $lines;
    }

    /**
     * Sends one request, retrying it when the policy says so, and returns the parsed answer.
     *
     * `$expect` is `json` (a JSON body is required), `none` (the body is not read: a 204) or
     * `raw` (the parsed JSON, or null when empty).
     *
     * @param array<string, scalar|null> $query
     * @param array<string, string>      $headers
     * @throws StepwiseException
     */
    public function call(
        string $method,
        string $path,
        ?string $json = null,
        array $query = [],
        array $headers = [],
        bool $idempotent = false,
        ?float $timeout = null,
        string $expect = 'json',
        ?RetryPolicy $retry = null,
    ): mixed {
        $retry ??= $this->retry;
        $attempt = 0;
        while (true) {
            try {
                $response = $this->send($method, $path, $json, $query, $headers, $timeout);
                $delay = $retry->afterAnswer($response->status, $response->headers, $idempotent, $attempt);
                if ($delay === null) {
                    return $this->read($method, $path, $query, $response, $expect);
                }
            } catch (ConnectionException $e) {
                $errno = $e->getPrevious()?->getCode() ?? 0;
                $delay = $retry->afterError((int) $errno, $idempotent, $attempt);
                if ($delay === null) {
                    if ($attempt > 0) {
                        throw new ConnectionException(
                            'connection_error',
                            $e->errorMessage . ' [' . ($attempt + 1) . ' tries]',
                            method: $method,
                            url: $e->url,
                            previous: $e->getPrevious(),
                        );
                    }
                    throw $e;
                }
            }
            usleep((int) round($delay * 1e6));
            $attempt++;
        }
    }

    /**
     * Sends one request once and returns the answer, whatever its status.
     *
     * @param array<string, scalar|null> $query
     * @param array<string, string>      $headers
     * @throws ConnectionException when no answer arrived
     */
    public function send(
        string $method,
        string $path,
        ?string $json = null,
        array $query = [],
        array $headers = [],
        ?float $timeout = null,
    ): Response {
        $this->handle ??= curl_init();
        $ch = $this->handle;
        curl_reset($ch);
        $received = [];
        $this->configure($ch, $method, $path, $json, $query, $headers, $timeout ?? $this->timeout, $received);
        curl_setopt($ch, CURLOPT_RETURNTRANSFER, true);
        $body = curl_exec($ch);
        if ($body === false) {
            $errno = curl_errno($ch);
            $error = curl_error($ch);
            // A broken connection is not kept for the next request.
            $this->close();
            throw $this->connectionError($method, $path, $errno, $error);
        }
        return new Response((int) curl_getinfo($ch, CURLINFO_RESPONSE_CODE), $received['headers'], (string) $body);
    }

    /**
     * Sends one request on a handle of its own, polling `$shouldStop` while it waits for the
     * answer: when it says true the request is abandoned and null returned (a long poll that a
     * stopping worker cuts short).
     *
     * @param array<string, string> $headers
     * @param callable(): bool      $shouldStop
     * @throws ConnectionException when no answer arrived
     */
    public function sendAbortable(
        string $method,
        string $path,
        ?string $json,
        array $headers,
        float $timeout,
        callable $shouldStop,
    ): ?Response {
        $ch = curl_init();
        $received = [];
        $this->configure($ch, $method, $path, $json, [], $headers, $timeout, $received);
        curl_setopt($ch, CURLOPT_RETURNTRANSFER, true);
        $multi = curl_multi_init();
        curl_multi_add_handle($multi, $ch);
        try {
            $running = 1;
            while (true) {
                do {
                    $status = curl_multi_exec($multi, $running);
                } while ($status === CURLM_CALL_MULTI_PERFORM);
                if ($running === 0 || $status !== CURLM_OK) {
                    break;
                }
                if ($shouldStop()) {
                    return null;
                }
                if (curl_multi_select($multi, 0.2) === -1) {
                    usleep(20_000);
                }
                if ($shouldStop()) {
                    return null;
                }
            }
            $info = curl_multi_info_read($multi);
            $errno = is_array($info) ? (int) $info['result'] : curl_errno($ch);
            if ($errno !== 0) {
                throw $this->connectionError($method, $path, $errno, curl_error($ch) ?: curl_strerror($errno));
            }
            return new Response(
                (int) curl_getinfo($ch, CURLINFO_RESPONSE_CODE),
                $received['headers'],
                (string) curl_multi_getcontent($ch),
            );
        } finally {
            curl_multi_remove_handle($multi, $ch);
            curl_multi_close($multi);
            curl_close($ch);
        }
    }

    /**
     * Sets a handle up for a request; `$received['headers']` collects the answer's headers.
     *
     * @param array<string, scalar|null> $query
     * @param array<string, string>      $headers
     * @param array<string, mixed>       $received
     */
    public function configure(
        \CurlHandle $ch,
        string $method,
        string $path,
        ?string $json,
        array $query,
        array $headers,
        float $timeout,
        array &$received,
    ): void {
        $received['headers'] = [];
        curl_setopt_array($ch, [
            CURLOPT_URL => $this->url($path, $query),
            CURLOPT_CUSTOMREQUEST => $method,
            CURLOPT_HTTPHEADER => $this->headerLines($headers, $json !== null),
            CURLOPT_CONNECTTIMEOUT_MS => (int) round(min($this->connectTimeout, $timeout) * 1000),
            CURLOPT_TIMEOUT_MS => (int) round($timeout * 1000),
            CURLOPT_NOSIGNAL => true,
            CURLOPT_FOLLOWLOCATION => false,
            CURLOPT_HEADERFUNCTION => static function ($handle, string $line) use (&$received): int {
                $colon = strpos($line, ':');
                if ($colon !== false) {
                    $received['headers'][strtolower(trim(substr($line, 0, $colon)))] = trim(substr($line, $colon + 1));
                } elseif (str_starts_with($line, 'HTTP/')) {
                    $received['headers'] = []; // a new answer (after a 100 Continue)
                }
                return strlen($line);
            },
        ]);
        if ($this->socket !== null) {
            curl_setopt($ch, CURLOPT_UNIX_SOCKET_PATH, $this->socket);
        }
        if ($method === 'HEAD') {
            curl_setopt($ch, CURLOPT_NOBODY, true);
        }
        if ($json !== null) {
            curl_setopt($ch, CURLOPT_POSTFIELDS, $json);
        } elseif (in_array($method, ['POST', 'PUT', 'PATCH'], true)) {
            curl_setopt($ch, CURLOPT_POSTFIELDS, '');
        }
    }

    /** The error for a request that got no answer, saying what to check. */
    public function connectionError(string $method, string $path, int $errno, string $error): ConnectionException
    {
        $where = $method . ' ' . $path;
        $detail = $error !== '' ? $error : curl_strerror($errno);
        $message = match ($errno) {
            6, 7 => sprintf(
                'cannot connect to %s (%s): %s; is the server running (`stepwise serve`) and the URL right?',
                $this->baseUrl,
                $where,
                $detail,
            ),
            28 => sprintf('no answer from %s to %s in time: %s', $this->baseUrl, $where, $detail),
            default => sprintf('the connection to %s failed during %s: %s (curl error %d)', $this->baseUrl, $where, $detail, $errno),
        };
        return new ConnectionException(
            'connection_error',
            $message,
            method: $method,
            url: $this->baseUrl . $path,
            previous: new \RuntimeException($detail, $errno),
        );
    }

    /**
     * The parsed body of a 2xx answer; the typed StepwiseException for any other.
     *
     * @param array<string, scalar|null> $query
     * @throws StepwiseException
     */
    public function read(string $method, string $path, array $query, Response $response, string $expect = 'json'): mixed
    {
        $status = $response->status;
        $ok = $status >= 200 && $status < 300;
        if ($ok && $expect === 'none') {
            return null;
        }
        $parsed = null;
        $parseFailed = false;
        if ($response->body !== '') {
            try {
                $parsed = json_decode($response->body, true, 512, JSON_THROW_ON_ERROR);
            } catch (\JsonException) {
                $parseFailed = true;
            }
        }
        $url = $this->baseUrl . $path;
        if (!$ok) {
            throw self::errorFromAnswer($status, $parsed, $parseFailed ? $response->body : '', $response->headers, $method, $url);
        }
        if ($parseFailed) {
            throw new StepwiseException(
                'invalid_response',
                sprintf('the answer to %s %s is not JSON: %s', $method, $path, self::snippet($response->body)),
                $status,
                method: $method,
                url: $url,
            );
        }
        if ($expect === 'json' && $parsed === null) {
            throw new StepwiseException(
                'invalid_response',
                sprintf('the answer to %s %s has no body', $method, $path),
                $status,
                method: $method,
                url: $url,
            );
        }
        return $parsed;
    }

    /**
     * The exception for a non-2xx answer, from the API's error shape when it has one.
     *
     * @param array<string, string> $headers
     */
    public static function errorFromAnswer(
        int $status,
        mixed $body,
        string $text,
        array $headers,
        ?string $method,
        ?string $url,
    ): StepwiseException {
        $retryAfter = RetryPolicy::retryAfterSeconds($headers);
        $error = is_array($body) ? ($body['error'] ?? null) : null;
        if (is_array($error) && is_string($error['code'] ?? null)) {
            $field = $error['field'] ?? null;
            $message = $error['message'] ?? null;
            return StepwiseException::fromAnswer(
                $error['code'],
                is_string($message) && $message !== '' ? $message : 'error',
                $status,
                is_string($field) ? $field : null,
                $method,
                $url,
                $body,
                $retryAfter,
            );
        }
        $code = self::CODES_BY_STATUS[$status] ?? ($status >= 500 ? 'server_error' : 'http_error');
        $message = 'HTTP ' . $status;
        if ($text !== '') {
            $message .= ': ' . self::snippet($text);
        }
        if ($method !== null && $url !== null) {
            $message .= sprintf(' (%s %s)', $method, $url);
        }
        return StepwiseException::fromAnswer($code, $message, $status, null, $method, $url, $body, $retryAfter);
    }

    private static function snippet(string $text): string
    {
        $text = trim((string) preg_replace('/\s+/', ' ', $text));
        return strlen($text) > 200 ? substr($text, 0, 200) . '...' : $text;
    }
}

<?php

declare(strict_types=1);

namespace Stepwise\Internal;

/**
 * When to retry a request, and how long to wait first: exponential backoff with jitter,
 * honouring `Retry-After` (the Python client's policy).
 *
 * An idempotent call (a read, or a write that is safe to repeat) is retried on any connection
 * failure, on 500, 502, 503 and 504, and on 429. A call that could write twice is retried only
 * when it certainly wrote nothing: when the connection could not be opened (the request was
 * never sent), or on 429 (the server refused it before doing anything).
 *
 * @internal
 */
final class RetryPolicy
{
    /** Answers worth another try for an idempotent call; 429 for every call. */
    public const RETRY_STATUSES = [429, 500, 502, 503, 504];

    /** curl errors where the request never left this process: safe to retry whatever it does. */
    private const NOT_SENT = [
        5,  // CURLE_COULDNT_RESOLVE_PROXY
        6,  // CURLE_COULDNT_RESOLVE_HOST
        7,  // CURLE_COULDNT_CONNECT
    ];

    /** curl errors no retry can fix. */
    private const PERMANENT = [
        1,  // CURLE_UNSUPPORTED_PROTOCOL
        3,  // CURLE_URL_MALFORMAT
        60, // CURLE_PEER_FAILED_VERIFICATION
        58, // CURLE_SSL_CERTPROBLEM
        77, // CURLE_SSL_CACERT_BADFILE
    ];

    public function __construct(
        public readonly int $maxRetries = 3,
        public readonly float $backoff = 0.25,
        public readonly float $maxBackoff = 8.0,
        public readonly float $maxRetryAfter = 60.0,
    ) {
        if ($maxRetries < 0) {
            throw new \InvalidArgumentException('maxRetries must be >= 0, got ' . $maxRetries);
        }
    }

    /** The wait before retry number `$attempt + 1`: exponential, with jitter in [50%, 100%]. */
    public function backoffDelay(int $attempt): float
    {
        $delay = min($this->maxBackoff, $this->backoff * (2 ** $attempt));
        return $delay * (0.5 + mt_rand() / mt_getrandmax() / 2);
    }

    /** The wait before another try after curl error `$errno`, or null to give up. */
    public function afterError(int $errno, bool $idempotent, int $attempt): ?float
    {
        if ($attempt >= $this->maxRetries || in_array($errno, self::PERMANENT, true)) {
            return null;
        }
        if (!$idempotent && !in_array($errno, self::NOT_SENT, true)) {
            return null;
        }
        return $this->backoffDelay($attempt);
    }

    /**
     * The wait before another try after an answer with `$status`, or null to take the answer.
     *
     * @param array<string, string> $headers the answer's headers, names in lower case
     */
    public function afterAnswer(int $status, array $headers, bool $idempotent, int $attempt): ?float
    {
        if (!in_array($status, self::RETRY_STATUSES, true) || $attempt >= $this->maxRetries) {
            return null;
        }
        if (!$idempotent && $status !== 429) {
            return null;
        }
        $after = self::retryAfterSeconds($headers);
        if ($after !== null) {
            return min($after, $this->maxRetryAfter);
        }
        return $this->backoffDelay($attempt);
    }

    /**
     * Reads `Retry-After` (seconds, or an HTTP date); null when absent or unreadable.
     *
     * @param array<string, string> $headers names in lower case
     */
    public static function retryAfterSeconds(array $headers, ?float $now = null): ?float
    {
        $value = trim($headers['retry-after'] ?? '');
        if ($value === '') {
            return null;
        }
        if (is_numeric($value)) {
            return max(0.0, (float) $value);
        }
        $when = strtotime($value);
        if ($when === false) {
            return null;
        }
        return max(0.0, $when - ($now ?? microtime(true)));
    }
}

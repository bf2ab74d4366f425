<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * An error answer of the Stepwise API, or no answer at all.
 *
 * Every error this client raises is a StepwiseException (or a subclass: NotFoundException,
 * ConflictException, LeaseLostException, ...). Read `errorCode` to tell them apart:
 *
 * ```php
 * try {
 *     $client->getSession($id);
 * } catch (StepwiseException $e) {
 *     if ($e->errorCode === 'not_found') { ... }
 * }
 * ```
 *
 * `getMessage()` reads like `404 not_found: session not found (field: id)`.
 */
class StepwiseException extends \RuntimeException
{
    /**
     * @param string      $errorCode    the API's snake_case `error.code` (`not_found`, `conflict`,
     *                                  `invalid_request`, `invalid_state`, `unknown_agent`,
     *                                  `lease_lost`, `rate_limited`, ...), or `connection_error` when
     *                                  the server could not be reached or did not answer
     * @param string      $errorMessage the server's human sentence (or what went wrong on the way)
     * @param int|null    $status       the HTTP status; null when no answer arrived
     * @param string|null $field        the request field at fault, when the server names one
     * @param string|null $method       the request's method, when known
     * @param string|null $url          the request's URL (never with a credential in it)
     * @param mixed       $body         the parsed error body (null when it was not JSON)
     * @param float|null  $retryAfter   the answer's `Retry-After`, in seconds, when it had one
     */
    public function __construct(
        public readonly string $errorCode,
        public readonly string $errorMessage,
        public readonly ?int $status = null,
        public readonly ?string $field = null,
        public readonly ?string $method = null,
        public readonly ?string $url = null,
        public readonly mixed $body = null,
        public readonly ?float $retryAfter = null,
        ?\Throwable $previous = null,
    ) {
        $text = $errorCode . ': ' . $errorMessage;
        if ($status !== null) {
            $text = $status . ' ' . $text;
        }
        if ($field !== null && $field !== '') {
            $text .= ' (field: ' . $field . ')';
        }
        parent::__construct($text, $status ?? 0, $previous);
    }

    /**
     * The exception for an error answer: the subclass that fits its code and status.
     *
     * @internal used by the client to read answers
     */
    public static function fromAnswer(
        string $errorCode,
        string $errorMessage,
        int $status,
        ?string $field = null,
        ?string $method = null,
        ?string $url = null,
        mixed $body = null,
        ?float $retryAfter = null,
    ): self {
        $class = match (true) {
            $errorCode === 'lease_lost' => LeaseLostException::class,
            $errorCode === 'unknown_agent' => UnknownAgentException::class,
            $errorCode === 'not_found' || $status === 404 => NotFoundException::class,
            $errorCode === 'unauthorized' || $status === 401 => UnauthorizedException::class,
            $errorCode === 'forbidden' || $status === 403 => ForbiddenException::class,
            $errorCode === 'conflict' || $status === 409 => ConflictException::class,
            $errorCode === 'rate_limited' || $status === 429 => RateLimitedException::class,
            $status === 400 => InvalidRequestException::class,
            $status === 422 => InvalidStateException::class,
            $status >= 500 => ServerException::class,
            default => self::class,
        };
        return new $class($errorCode, $errorMessage, $status, $field, $method, $url, $body, $retryAfter);
    }
}

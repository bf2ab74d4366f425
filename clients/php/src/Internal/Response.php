<?php

declare(strict_types=1);

namespace Stepwise\Internal;

/**
 * One HTTP answer as read off the wire.
 *
 * @internal
 */
final class Response
{
    /**
     * @param array<string, string> $headers names in lower case
     */
    public function __construct(
        public readonly int $status,
        public readonly array $headers,
        public readonly string $body,
    ) {
    }
}

<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * A 5xx answer: `storage_full`, `too_many_connections` or `unavailable` (503), or a bug of the
 * server (any other 5xx). Reads and safe writes are retried before one is raised.
 */
class ServerException extends StepwiseException
{
}

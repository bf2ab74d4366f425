<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * A 429 answer (`rate_limited`); `retryAfter` says how many seconds to wait. The client retries
 * these by itself (`maxRetries`) before raising one.
 */
class RateLimitedException extends StepwiseException
{
}

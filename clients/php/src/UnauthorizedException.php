<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * A 401 answer (`unauthorized`): no credential, or one the server does not accept (a revoked
 * key, an expired token).
 */
class UnauthorizedException extends StepwiseException
{
}

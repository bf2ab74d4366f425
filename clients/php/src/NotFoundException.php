<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * A 404 answer (`not_found`): no such id, or one of another tenant or another user (both look
 * exactly like an id that does not exist).
 */
class NotFoundException extends StepwiseException
{
}

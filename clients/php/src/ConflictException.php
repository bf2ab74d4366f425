<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * A 409 answer (`conflict`): the write clashes with what is stored (a session name taken, a
 * step number saved with another body, cancelling a finished execution). LeaseLostException
 * is the 409 of a lease that is no longer current.
 */
class ConflictException extends StepwiseException
{
}

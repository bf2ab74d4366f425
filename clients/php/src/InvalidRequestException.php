<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * A 400 answer (`invalid_request`): a field is missing, malformed or out of range; `field`
 * names it when the server does.
 */
class InvalidRequestException extends StepwiseException
{
}

<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * A 422 answer: the request is well formed but the state does not allow it
 * (`invalid_state`), or it names an agent type nobody runs (`unknown_agent`, see
 * UnknownAgentException).
 */
class InvalidStateException extends StepwiseException
{
}

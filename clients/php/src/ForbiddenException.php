<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * A 403 answer (`forbidden`): the credential is valid, but its role may not do this (a `user`
 * token minting tokens, a `worker` key listing sessions). Another user's session is not
 * forbidden but not found (NotFoundException).
 */
class ForbiddenException extends StepwiseException
{
}

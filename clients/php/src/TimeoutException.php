<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * A wait of this client ran out of time (Client::wait() with a `timeout`): `errorCode` is
 * `timeout`, `status` null. Nothing was changed on the server.
 */
class TimeoutException extends StepwiseException
{
}

<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * No answer: the server could not be reached, the connection broke, or it did not answer in
 * time. `errorCode` is `connection_error` and `status` is null.
 */
class ConnectionException extends StepwiseException
{
}

<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * A 409 `lease_lost` answer: the lease sent with a write or heartbeat is not the execution's
 * current one (it expired and another worker took the execution over; the execution was
 * cancelled, paused or finished). Nothing was written; write nothing more to it.
 */
class LeaseLostException extends ConflictException
{
}

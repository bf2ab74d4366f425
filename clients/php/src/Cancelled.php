<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * The run must stop: the execution was cancelled (`cancelled`), another worker holds it now
 * (`lease_lost`), or this worker is shutting down (`shutdown`: the execution goes back to the
 * queue and a later claim replays it). Run::check() and the writes of a Run throw it; let it
 * propagate out of your agent callable (rethrow it from a `catch (\Throwable)`). The Worker
 * catches it: nothing more is written for that run.
 */
class Cancelled extends \RuntimeException
{
    public function __construct(public readonly string $reason = 'cancelled', ?\Throwable $previous = null)
    {
        parent::__construct('the run must stop: ' . $reason, 0, $previous);
    }
}

<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * Throw it from an agent callable to fail this attempt with `retry: true`: the execution goes
 * back to the queue and the next claim (on any worker) continues from its saved steps, until
 * the server's `--max-attempts`.
 */
class Retry extends \RuntimeException
{
}

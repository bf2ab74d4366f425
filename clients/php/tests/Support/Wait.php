<?php

declare(strict_types=1);

namespace Stepwise\Tests\Support;

/** Waits on a condition with a deadline (never a bare sleep). */
final class Wait
{
    /**
     * Polls `$condition` until it returns a truthy value, which is returned; fails the test
     * (a RuntimeException naming `$what`) after `$timeout` seconds.
     */
    public static function until(callable $condition, float $timeout, string $what): mixed
    {
        $deadline = microtime(true) + $timeout;
        $delay = 5_000;
        while (true) {
            $value = $condition();
            if ($value) {
                return $value;
            }
            if (microtime(true) > $deadline) {
                throw new \RuntimeException(sprintf('timed out after %s s waiting for %s', $timeout, $what));
            }
            usleep($delay);
            $delay = min($delay * 2, 50_000);
        }
    }
}

<?php

declare(strict_types=1);

namespace Stepwise\Tests\Support;

/** One server for the test classes that do not restart theirs, stopped when PHPUnit ends. */
final class SharedServer
{
    private static ?LocalServer $server = null;

    public static function get(): LocalServer
    {
        if (self::$server === null) {
            self::$server = (new LocalServer())->start();
            register_shutdown_function(static function (): void {
                self::$server?->close();
                self::$server = null;
            });
        }
        return self::$server;
    }
}

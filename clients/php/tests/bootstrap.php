<?php

declare(strict_types=1);

// PSR-4 without Composer: Stepwise\Tests\ is tests/ (registered first), Stepwise\ is src/.
spl_autoload_register(static function (string $class): void {
    $prefix = 'Stepwise\\Tests\\';
    if (str_starts_with($class, $prefix)) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
require dirname(__DIR__) . '/autoload.php';

if ((getenv('STEPWISE_BIN') ?: '') === '') {
    fwrite(STDERR, "STEPWISE_BIN is not set: point it at the stepwise binary (e.g. target/debug/stepwise)\n");
    exit(2);
}

<?php

declare(strict_types=1);

/*
 * The autoloader for an app without Composer: `require '/path/to/clients/php/autoload.php';`
 * loads the Stepwise\ classes from src/ (PSR-4). With Composer, `composer.json`'s autoload
 * does the same.
 */
spl_autoload_register(static function (string $class): void {
    if (!str_starts_with($class, 'Stepwise\\')) {
        return;
    }
    $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, strlen('Stepwise\\'))) . '.php';
    if (is_file($file)) {
        require $file;
    }
});

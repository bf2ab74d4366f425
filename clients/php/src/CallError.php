<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * The saved error of a Run::call() replayed on a later claim, when its exception class cannot
 * be made again (it is not loaded, or does not take its message as its first argument).
 */
class CallError extends \RuntimeException
{
    public function __construct(
        public readonly string $name,
        public readonly string $errorType,
        public readonly string $errorMessage,
    ) {
        parent::__construct($name . ': ' . $errorType . ($errorMessage !== '' ? ': ' . $errorMessage : ''));
    }
}

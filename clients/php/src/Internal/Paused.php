<?php

declare(strict_types=1);

namespace Stepwise\Internal;

/**
 * Thrown by Run::pause() once the pause is recorded; the Worker catches it. Not an \Exception,
 * so that an agent's `catch (\Exception)` lets it through.
 *
 * @internal
 */
final class Paused extends \Error
{
}

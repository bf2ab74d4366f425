<?php

declare(strict_types=1);

namespace Stepwise;

/**
 * A 422 `unknown_agent` answer: the message names an agent type that is not built in and that
 * no worker of the tenant announced in the last 24 hours (`field` is `agent.type`; the message
 * names the closest known types). Nothing was written. Send `agent: ['type' => ..., 'wait' =>
 * true]` to queue it anyway until a worker of that type connects.
 */
class UnknownAgentException extends InvalidStateException
{
}

<?php

declare(strict_types=1);

namespace App\Jobs;

use Stepwise\Run;

/**
 * Seed 002's `ExecuteAgentJob`: the shop assistant's agent, run by a Stepwise worker for each
 * execution of agent type `shop-assistant`.
 *
 * It looks the order up (a durable call: saved as a step, never repeated on a resume), plans,
 * asks the customer whether to redirect the parcel (the execution pauses until they answer),
 * acts on the answer, streams its reply token by token, saves a final snapshot and returns
 * the reply (the session's assistant message). In a Laravel app the order lookups would be
 * Eloquent queries, injected into handle(); here they are a static array.
 */
final class ExecuteAgentJob
{
    /** The shop's orders, standing in for the `orders` table. */
    private const ORDERS = [
        '1042' => ['id' => '1042', 'status' => 'shipped', 'carrier' => 'DHL', 'address' => '12 Rue de la Paix, Paris', 'eta' => '2026-01-08'],
        '1043' => ['id' => '1043', 'status' => 'packing', 'carrier' => 'UPS', 'address' => '1 Main St, Leeds', 'eta' => '2026-01-10'],
    ];

    public function __construct(private readonly Run $run)
    {
    }

    public function handle(): string
    {
        $run = $this->run;
        // The page the customer wrote from (related_type/related_id of their message), else the text.
        $orderId = ($run->context['related_type'] ?? null) === 'order'
            ? (string) $run->context['related_id']
            : (preg_match('/\d{4}/', $run->inputText, $m) ? $m[0] : '');
        $run->info("Looking up order $orderId");
        $order = $run->call('lookup_order', [self::class, 'lookupOrder'], $orderId);
        if ($order === null) {
            return "I could not find order $orderId. Could you check the number?";
        }
        $run->step([
            'kind' => 'planning',
            'model_output' => sprintf('Order %s is %s with %s, due %s: offer the pickup point.', $order['id'], $order['status'], $order['carrier'], $order['eta']),
        ]);

        $reply = $run->ask(sprintf(
            'Order %s is %s and arrives on %s at %s. Shall I send it to your pickup point instead? (yes/no)',
            $order['id'],
            $order['status'],
            $order['eta'],
            $order['address'],
        ));

        if (preg_match('/^\s*(y|yes|oui|ja)\b/i', $reply)) {
            $change = $run->call('change_delivery', [self::class, 'changeDelivery'], $order['id'], 'pickup point');
            $text = sprintf('Done: order %s now goes to the %s (reference %s).', $order['id'], $change['to'], $change['reference']);
        } else {
            $text = sprintf('All right, order %s stays on its way to %s.', $order['id'], $order['address']);
        }
        // The reply as live tokens (message.delta), as an LLM would stream it.
        foreach (preg_split('/(?<= )/', $text) ?: [] as $token) {
            $run->delta($token);
        }
        $run->saveSnapshot(['order' => $order, 'customer_reply' => $reply, 'answer' => $text], ['is_final' => true, 'agent_name' => 'shop-assistant']);
        return $text;
    }

    /** @return array<string, string>|null */
    public static function lookupOrder(string $orderId): ?array
    {
        return self::ORDERS[$orderId] ?? null;
    }

    /** @return array{to: string, reference: string} */
    public static function changeDelivery(string $orderId, string $to): array
    {
        return ['to' => $to, 'reference' => 'CHG-' . $orderId . '-' . substr(md5($orderId . $to), 0, 6)];
    }
}

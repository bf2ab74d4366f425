<?php

declare(strict_types=1);

namespace Stepwise\Tests;

use PHPUnit\Framework\TestCase;
use Stepwise\Tests\Support\LocalServer;
use Stepwise\Tests\Support\SharedServer;

/** Lists follow next_cursor page after page, lazily. */
final class PaginationTest extends TestCase
{
    private static LocalServer $server;

    public static function setUpBeforeClass(): void
    {
        self::$server = SharedServer::get();
    }

    public function testSessionsAcrossPages(): void
    {
        $client = self::$server->client();
        $batch = 'pages-' . bin2hex(random_bytes(3));
        $made = [];
        for ($n = 0; $n < 7; $n++) {
            $made[] = $client->createSession(title: "page $n", metadata: ['batch' => $batch])['id'];
        }
        $listed = iterator_to_array($client->listSessions(metadata: ['batch' => $batch], pageSize: 2), false);
        // Newest updated_at first: the reverse of the order they were made in.
        $this->assertSame(array_reverse($made), array_column($listed, 'id'));

        // The same list page by page, as the server gives it: 4 pages of at most 2.
        $pages = [];
        $cursor = null;
        do {
            $query = ['metadata.batch' => $batch, 'limit' => 2, 'cursor' => $cursor];
            $page = $client->request('GET', '/v1/sessions', query: $query);
            $pages[] = array_column($page['items'], 'id');
            $cursor = $page['next_cursor'];
        } while ($cursor !== null);
        $this->assertCount(4, $pages);
        $this->assertSame(array_column($listed, 'id'), array_merge(...$pages));
    }

    public function testLazyAndMessagesAcrossPages(): void
    {
        $client = self::$server->client();
        $session = $client->createSession(title: 'many messages');
        $list = $client->listMessages($session['id'], roles: 'user', pageSize: 2);
        // Nothing is requested before the loop starts: messages posted now are listed.
        $posted = [];
        for ($n = 0; $n < 5; $n++) {
            $answer = $client->postMessage($session['id'], "message $n", agent: 'demo');
            $client->wait($answer['execution']['id'], timeout: 60);
            $posted[] = $answer['message']['id'];
        }
        $this->assertSame($posted, array_column(iterator_to_array($list, false), 'id'));

        // Breaking out early fetches no more pages than needed.
        $first = [];
        foreach ($client->listMessages($session['id'], pageSize: 1) as $message) {
            $first[] = $message['id'];
            if (count($first) === 3) {
                break;
            }
        }
        $this->assertCount(3, $first);
        $this->assertSame($posted[0], $first[0]);
    }
}

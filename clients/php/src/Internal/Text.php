<?php

declare(strict_types=1);

namespace Stepwise\Internal;

/**
 * Lengths and cuts of UTF-8 text in characters, with PCRE and JSON (always in PHP) instead
 * of the mbstring extension, which the client does not require. Bytes that are not UTF-8
 * count, and are kept, as U+FFFD (as mbstring's functions would).
 *
 * @internal
 */
final class Text
{
    /** The most characters `cut` keeps (PCRE's largest repeat count). */
    public const MAX_CUT = 65535;

    /** `$text` with each byte that is not UTF-8 replaced by U+FFFD. */
    public static function scrub(string $text): string
    {
        if (preg_match('//u', $text) === 1) {
            return $text;
        }
        $json = json_encode($text, JSON_INVALID_UTF8_SUBSTITUTE | JSON_UNESCAPED_UNICODE);
        return $json === false ? '' : (string) json_decode($json);
    }

    /** The number of characters of `$text`. */
    public static function length(string $text): int
    {
        return (int) preg_match_all('/./su', self::scrub($text));
    }

    /** The first `$max` characters (at most `MAX_CUT`) of `$text`. */
    public static function cut(string $text, int $max): string
    {
        $text = self::scrub($text);
        $max = max(0, min($max, self::MAX_CUT));
        if (strlen($text) <= $max) {
            return $text;
        }
        return preg_match('/^.{0,' . $max . '}/su', $text, $match) === 1 ? $match[0] : '';
    }
}

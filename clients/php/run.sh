#!/usr/bin/env bash
# The PHP client's tests, for CI: installs PHP and PHPUnit with apt when they are missing,
# checks the extensions, then runs PHPUnit against a real server (the binary in STEPWISE_BIN,
# required: the tests start it on free loopback ports with temporary SQLite databases).
#
#   STEPWISE_BIN=target/debug/stepwise bash clients/php/run.sh [phpunit arguments]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [ -z "${STEPWISE_BIN:-}" ]; then
  echo "clients/php/run.sh: set STEPWISE_BIN to the stepwise binary (e.g. target/debug/stepwise)" >&2
  exit 2
fi
if [ ! -x "$STEPWISE_BIN" ]; then
  echo "clients/php/run.sh: STEPWISE_BIN=$STEPWISE_BIN is not an executable file" >&2
  exit 2
fi
STEPWISE_BIN="$(cd "$(dirname "$STEPWISE_BIN")" && pwd)/$(basename "$STEPWISE_BIN")"
export STEPWISE_BIN

# (php -m is read whole first: grep -q would cut the pipe, which pipefail reports.)
modules() { php -m 2>/dev/null || true; }
if ! command -v php >/dev/null || ! command -v phpunit >/dev/null || ! grep -qx curl <<<"$(modules)"; then
  if [ "$(id -u)" = 0 ]; then sudo_cmd=(); else sudo_cmd=(sudo); fi
  echo "clients/php/run.sh: installing php-cli php-curl phpunit" >&2
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends php-cli php-curl phpunit >/dev/null
fi

for extension in curl json; do
  if ! grep -qx "$extension" <<<"$(modules)"; then
    echo "clients/php/run.sh: PHP has no $extension extension (php -m)" >&2
    exit 1
  fi
done
if ! php -r 'exit(PHP_VERSION_ID >= 80100 ? 0 : 1);'; then
  echo "clients/php/run.sh: PHP 8.1 or newer is needed, found $(php -r 'echo PHP_VERSION;')" >&2
  exit 1
fi

# Tests must not pick up a developer's settings.
unset STEPWISE_URL STEPWISE_API_KEY STEPWISE_TOKEN || true

cd "$here"
for file in autoload.php src/*.php src/Internal/*.php tests/*.php tests/*/*.php examples/*.php bench/*.php; do
  php -l "$file" >/dev/null
done
exec phpunit --configuration phpunit.xml "$@"

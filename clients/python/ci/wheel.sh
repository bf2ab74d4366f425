#!/usr/bin/env bash
# Builds the wheel that carries the server (maturin, `bindings = "bin"`, the repository's root
# pyproject.toml) once, checks it with maturin's own platform audit, installs it into a fresh
# virtualenv with no Rust toolchain on PATH and no STEPWISE_BIN, and runs the local-mode tests
# (clients/python/tests/test_local.py) against the binary the wheel installed.
#
#   clients/python/ci/wheel.sh            # wheel in target/wheels, virtualenv in target/wheel-venv
#
# Prints the wheel's size and the time `pip install` of it took. Extra arguments go to pytest.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
python="${PYTHON:-python3}"
build_venv="$repo/target/maturin-venv"
venv="$repo/target/wheel-venv"
out="$repo/target/wheels"

say() { printf '== %s\n' "$*" >&2; }

if [ ! -x "$build_venv/bin/maturin" ]; then
  say "installing maturin into $build_venv"
  "$python" -m venv "$build_venv"
  "$build_venv/bin/python" -m pip install -q "maturin>=1.7,<2"
fi

say "building the wheel ($("$build_venv/bin/maturin" --version); release profile, audited for its platform tag)"
rm -rf "$out"
(cd "$repo" && "$build_venv/bin/maturin" build --release --auditwheel check -o "$out")
wheel="$(ls "$out"/stepwise_client-*.whl)"
say "wheel: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB"

# A machine with Python and nothing of Rust: PATH holds only the system's directories.
clean_path="/usr/local/bin:/usr/bin:/bin"
if PATH="$clean_path" command -v cargo >/dev/null 2>&1 || PATH="$clean_path" command -v rustc >/dev/null 2>&1; then
  echo "clients/python/ci/wheel.sh: cargo or rustc is on $clean_path; the wheel must be tested without them" >&2
  exit 1
fi
py="$(command -v "$python")"
# The rest of the environment (pip's index, certificates, proxies) is kept; what could reach a
# Rust toolchain or another server binary is not.
without_rust() {
  env -u STEPWISE_BIN -u CARGO -u RUSTC -u RUSTUP_TOOLCHAIN PATH="$venv/bin:$clean_path" "$@"
}
rm -rf "$venv"
without_rust "$py" -m venv "$venv"
without_rust "$venv/bin/python" -m pip install -q --upgrade pip
# The test tools and the OpenAI Agents SDK first (the adapters' test uses StepwiseSession), so
# the install timed below is the wheel's own.
without_rust "$venv/bin/python" -m pip install -q \
  "pytest>=8" "pytest-asyncio>=0.24" "httpx>=0.27,<1" "openai-agents==0.24.0"
start=$(date +%s%N)
without_rust "$venv/bin/python" -m pip install -q --no-deps "$wheel"
end=$(date +%s%N)
say "pip install of the wheel: $(( (end - start) / 1000000 )) ms"
test -x "$venv/bin/stepwise"
without_rust stepwise --version

say "local-mode tests against the wheel's binary (no STEPWISE_BIN, no Rust on PATH)"
cd "$repo/clients/python"
without_rust env STEPWISE_REQUIRE_WHEEL=1 \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider --noconftest \
  tests/test_local.py tests/test_packaging.py "$@"

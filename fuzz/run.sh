#!/usr/bin/env bash
# Fuzzes Stepwise's decoders of untrusted bytes for a short fixed time each, starting from
# the committed corpus (fuzz/corpus/<target>/), and fails if any target crashes (a panic,
# a failed round-trip assertion, a timeout or running out of memory).
#
#   fuzz/run.sh                          # every target, 60 s each (FUZZ_SECONDS to change)
#   FUZZ_SECONDS=600 fuzz/run.sh document
#
# Targets: `document` (session documents: parse_document, format-0 upgrade, round trip),
# `step_payload` (stored step/snapshot payloads: v1 upgrade, v2, LZ4, zstd, the inflation limit),
# `step_roundtrip` (structured steps: encode then decode gives the same step).
#
# Toolchain: works on stable Rust. cargo-fuzz's default AddressSanitizer needs nightly
# (`-Zsanitizer`), so targets are built with `--sanitizer none`; Stepwise has no unsafe
# code, and cargo-fuzz still builds with debug assertions and overflow checks on, so a
# panic or an arithmetic overflow is a crash. No RUSTC_BOOTSTRAP is needed. libfuzzer-sys
# compiles libFuzzer's C++ sources, so a C++ compiler (g++) must be installed.
#
# New inputs found during a run go to fuzz/target/corpus-run/<target>/ (not committed);
# crashing inputs to fuzz/artifacts/<target>/, with the command to reproduce them. After a
# long run, `fuzz/minimise.py TARGET BUDGET` folds the new inputs into the committed corpus.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
seconds="${FUZZ_SECONDS:-60}"
all_targets=(document step_payload step_roundtrip)
if [ "$#" -gt 0 ]; then targets=("$@"); else targets=("${all_targets[@]}"); fi

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz/run.sh: installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked
fi
cargo fuzz --version

# Debug assertions and overflow checks are cargo-fuzz's default in its optimised build.
cargo fuzz build --sanitizer none
triple="$(rustc -vV | sed -n 's/^host: //p')"
bin_dir="$here/target/$triple/release"

# All targets at once: libFuzzer uses one core per target, and they share the run time.
pids=()
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "target/corpus-run/$t" "artifacts/$t"
  rm -f "artifacts/$t"/*
  dict=()
  # JSON tokens and field names help the byte-level targets; step_roundtrip takes structured input.
  [ "$t" = step_roundtrip ] || dict=(-dict=dict/json.dict)
  # The first directory receives new inputs; the committed corpus is only read.
  "$bin_dir/$t" "target/corpus-run/$t" "corpus/$t" "${dict[@]}" \
    -max_total_time="$seconds" -print_final_stats=1 \
    -timeout=30 -rss_limit_mb=2048 -error_exitcode=77 -timeout_exitcode=78 \
    -artifact_prefix="artifacts/$t/" \
    >"target/fuzz-$t.log" 2>&1 &
  pids+=("$!")
done

failed=0
i=0
for t in "${targets[@]}"; do
  status=0
  wait "${pids[$i]}" || status=$?
  i=$((i + 1))
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "target/fuzz-$t.log" | tail -n 1)"
  crashes="$(find "artifacts/$t" -type f | wc -l)"
  corpus="$(find "corpus/$t" -type f | wc -l)"
  echo "fuzz $t: ${execs:-?} executions in ${seconds} s over ${corpus} corpus inputs, ${crashes} crashes (exit ${status})"
  if [ "$status" -ne 0 ] || [ "$crashes" -ne 0 ] || [ -z "$execs" ]; then
    failed=1
    echo "--- fuzz/target/fuzz-$t.log (last 60 lines)" >&2
    tail -n 60 "target/fuzz-$t.log" >&2
    for f in "artifacts/$t"/*; do
      [ -f "$f" ] || continue
      echo "--- crashing input fuzz/$f; reproduce: cd fuzz && cargo fuzz run -s none $t $f" >&2
      head -c 2000 "$f" | od -c | head -n 20 >&2
    done
  fi
done
exit "$failed"

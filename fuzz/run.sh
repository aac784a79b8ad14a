#!/usr/bin/env bash
# Builds every fuzz target with libFuzzer on the stable toolchain and runs each one for
# a bounded time, starting from the committed seed corpus.
#
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]
#
# SECONDS_PER_TARGET defaults to 30. Targets default to all of them. Every target runs;
# the script exits non-zero if any found a crash, a leak, a timeout or an out-of-memory
# input, which is kept under fuzz/artifacts/<target>/.
#
# How it works without nightly: sanitizer-coverage instrumentation is requested with
# stable codegen flags (-Cpasses=sancov-module and -Cllvm-args=...), and AddressSanitizer
# with -Zsanitizer=address, which RUSTC_BOOTSTRAP=1 unlocks on a stable rustc. These are
# the flags `cargo fuzz build` passes. Set FUZZ_ASAN=0 to build without AddressSanitizer.
set -euo pipefail

cd "$(dirname "$0")"
SECONDS_PER_TARGET="${1:-30}"
shift || true
ALL_TARGETS=(pipeline tail_cut generation_config stop grammar tokenizer_json request chain batch)
if [ "$#" -gt 0 ]; then TARGETS=("$@"); else TARGETS=("${ALL_TARGETS[@]}"); fi

HOST="$(rustc -vV | sed -n 's/^host: //p')"
FLAGS="-Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares \
--cfg fuzzing -Cdebug-assertions -Coverflow-checks -Cforce-frame-pointers"
if [ "${FUZZ_ASAN:-1}" = "1" ]; then
    FLAGS="$FLAGS -Zsanitizer=address"
fi
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$PWD/target}"
# --target keeps the instrumentation off build scripts and proc macros.
RUSTC_BOOTSTRAP=1 RUSTFLAGS="$FLAGS" cargo build --release --target "$HOST" --bins
BIN="$CARGO_TARGET_DIR/$HOST/release"

status=0
for t in "${TARGETS[@]}"; do
    corpus="corpus/$t"
    mkdir -p "$corpus" "artifacts/$t"
    echo "== $t: ${SECONDS_PER_TARGET}s"
    # The committed seeds are read, never written: new inputs go to corpus/ (ignored by git).
    if ! "$BIN/$t" "$corpus" "seeds/$t" \
        -max_total_time="$SECONDS_PER_TARGET" \
        -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
        -artifact_prefix="artifacts/$t/" -print_final_stats=1 2>"artifacts/$t/log.txt"; then
        tail -n 60 "artifacts/$t/log.txt"
        echo "== $t FAILED: see fuzz/artifacts/$t/"
        status=1
        continue
    fi
    grep -E "^(stat::number_of_executed_units|Done)" "artifacts/$t/log.txt" || tail -n 3 "artifacts/$t/log.txt"
done
exit "$status"

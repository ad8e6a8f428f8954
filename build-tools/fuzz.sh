#!/usr/bin/env bash
# Builds every libFuzzer target in tests/fuzz/ with clang, ASan and UBSan, and
# runs each over its seed corpus plus a bounded number of new inputs: RUNS
# (default 1,000,000) or SECONDS per target (default 20), whichever ends
# first, so make test's share stays bounded as targets are added (the slowest
# parser, gpucheck's image reader, runs ~4,000 inputs a second here); `make
# fuzz-long` runs each target for longer. A crash, leak or UB report fails
# the run and leaves the input under OUT/crashes.
# usage: fuzz.sh CLANG OUT [RUNS [SECONDS]]
set -euo pipefail
# The targets that run models load libdnnl.so.2 (ops/dnnl.c): see the Makefile's SAN_ENV.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}intercept_tls_get_addr=0"
clang=$1 out=$2 runs=${3:-${EMBER_FUZZ_RUNS:-1000000}} seconds=${4:-${EMBER_FUZZ_SECONDS:-20}}
if [ -z "$clang" ]; then echo "fuzz: clang not found: skipped" >&2; exit 0; fi
mkdir -p "$out/crashes"
flags=(-std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -Iinclude -Iruntime -Iarch_table -Ibuild/gen)
for src in ${EMBER_FUZZ_ONLY:-tests/fuzz/fuzz_*.c}; do
  [ -e "$src" ] || continue
  name=$(basename "$src" .c)
  # A target lists the library sources it needs on a line "// fuzz-sources: a.c b.c".
  deps=$(sed -n 's|^// fuzz-sources: ||p' "$src")
  "$clang" "${flags[@]}" "$src" $deps -lelf -lzstd -llz4 -ljansson -lpthread -lm -o "$out/$name"
  corpus=tests/fuzz/corpus/${name#fuzz_}
  work=$(mktemp -d)
  [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/ 2>/dev/null || true
  if ! "$out/$name" -runs="$runs" -max_total_time="$seconds" -artifact_prefix="$out/crashes/$name-" "$work" >"$out/$name.log" 2>&1; then
    tail -n 30 "$out/$name.log"
    echo "fuzz: $name found a problem; input saved under $out/crashes" >&2
    rm -rf "$work"
    exit 1
  fi
  rm -rf "$work"
  echo "fuzz: $name clean after $(grep -o 'Done [0-9]* runs' "$out/$name.log" | head -1 | cut -d' ' -f2) runs \
(limit $runs runs or $seconds s)"
done

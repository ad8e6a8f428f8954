#!/usr/bin/env bash
# The sweep's own failure paths (part of `make test-toolchains`): a sweep that
# cannot fail proves nothing.
#
#   1. the committed docs/nvrtc-sm.md plus a column sm_1 that says ok for every
#      NVRTC: no NVRTC offers sm_1, so every row loaded is a regression
#      ("was ok, now not offered") and the sweep must fail;
#   2. an --nvrtc file that exists but is no NVRTC (libember.so itself): Ember's
#      loader refuses it, and the sweep must fail rather than skip it.
#
# usage: sweep_selftest.sh SWEEP LIBEMBER.so TABLE [NVRTC]...
#   NVRTC: the libraries make passes to the sweep; the first one present (else
#   the system's) is the one case 1 compiles with.
set -uo pipefail
sweep=$1 lib=$2 table=$3
shift 3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ember-sweep-selftest-XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/noptx"

nv=(--nvrtc-system)
for n in "$@"; do
  if [ -e "$n" ]; then nv=(--nvrtc "$n"); break; fi
done

fail=0
# 1. An ok cell for an SM nobody offers.
awk '/^\| NVRTC \|/ { print $0 " sm_1 |"; next }
     /^\|---\|/    { print $0 "---|"; next }
     /^\| [0-9]+\.[0-9]+ \|/ { print $0 " ok |"; next }
     { print }' "$table" > "$tmp/table.md"
"$sweep" --lib "$lib" "${nv[@]}" --ptx-dir "$tmp/noptx" --jobs 2 --table "$tmp/table.md" > "$tmp/out1.txt" 2>&1
rc=$?
if grep -q "skip system NVRTC: none found\|skip NVRTC" "$tmp/out1.txt" && ! grep -q "^toolchains: NVRTC [0-9]" "$tmp/out1.txt"; then
  echo "toolchains selftest: no NVRTC to test the table comparison with (skipped)"
elif grep -q "^toolchains: new: NVRTC [0-9.]* is not in" "$tmp/out1.txt"; then
  echo "toolchains selftest: the NVRTC found is not in $table: nothing to compare (skipped)"
elif [ $rc -ne 1 ] || ! grep -q "REGRESSION: NVRTC .* sm_1 was ok .*, now not offered" "$tmp/out1.txt"; then
  echo "toolchains selftest: FAIL: an ok cell the NVRTC does not offer passed the sweep (exit $rc):"
  cat "$tmp/out1.txt"
  fail=1
fi

# 2. An NVRTC file Ember's loader refuses.
"$sweep" --lib "$lib" --nvrtc "$lib" --ptx-dir "$tmp/noptx" > "$tmp/out2.txt" 2>&1
rc=$?
if [ $rc -ne 1 ] || ! grep -q "FAIL: NVRTC .*the file exists but Ember's loader did not load it" "$tmp/out2.txt"; then
  echo "toolchains selftest: FAIL: an NVRTC file the loader refuses did not fail the sweep (exit $rc):"
  cat "$tmp/out2.txt"
  fail=1
fi

[ $fail -eq 0 ] && echo "toolchains selftest: a not-offered ok cell and a refused NVRTC both fail the sweep"
exit $fail

#!/usr/bin/env bash
# Fails when the committed ptx/ no longer matches kernels/:
#  - always: the sources hash recorded in ptx/STAMP.mk must match kernels/;
#  - with the same nvcc and clang that made ptx/: regenerating must give the
#    same bytes;
#  - with ptxas: the legacy PTX must assemble for sm_75 and sm_90.
# usage: check_ptx.sh NVCC CLANG "EMBER_ARCHS" PTXAS
set -euo pipefail
nvcc=$1 clang=$2 archs=$3 ptxas=$4
stamp=ptx/STAMP.mk
val() { sed -n "s/^$1 := //p" "$stamp"; }

[ -f "$stamp" ] || { echo "check-ptx: $stamp missing: run 'make ptx'" >&2; exit 1; }
want=$(val PTX_SOURCES_SHA256)
have=$(bash build-tools/kernel_sources_hash.sh)
if [ "$want" != "$have" ]; then
  echo "check-ptx: ptx/ is stale: kernels/ changed since it was generated. Run 'make ptx' and commit ptx/." >&2
  exit 1
fi

if [ -n "$nvcc" ] && [ -n "$clang" ]; then
  nv=$("$nvcc" --version | sed -n 's/.*release [0-9.]*, V\([0-9.]*\).*/\1/p')
  cl=$("$clang" --version | sed -n '1s/.*version \([0-9.]*\).*/\1/p')
  if [ "$nv" = "$(val PTX_NVCC_VERSION)" ] && [ "$cl" = "$(val PTX_CLANG_VERSION)" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    bash build-tools/make_ptx.sh "$tmp" "$nvcc" "$clang" "$archs" >/dev/null
    if ! diff -r -q -x STAMP.mk -x README.md ptx "$tmp" >/dev/null; then
      diff -r -q -x STAMP.mk -x README.md ptx "$tmp" >&2 || true
      echo "check-ptx: regenerating ptx/ gives different PTX. Run 'make ptx' and commit ptx/." >&2
      exit 1
    fi
    echo "check-ptx: ptx/ matches kernels/ (regenerated with nvcc $nv and clang $cl)"
  else
    echo "check-ptx: sources hash matches; compilers differ from ptx/STAMP.mk (nvcc $nv, clang $cl), byte comparison skipped"
  fi
else
  echo "check-ptx: sources hash matches (nvcc or clang absent: byte comparison skipped)"
fi

if [ -n "$ptxas" ]; then
  for f in ptx/*.sm_35.ptx; do
    for sm in 75 90; do
      "$ptxas" -arch=sm_$sm "$f" -o /dev/null || { echo "check-ptx: ptxas rejects $f for sm_$sm" >&2; exit 1; }
    done
  done
  echo "check-ptx: legacy PTX assembles with ptxas for sm_75 and sm_90"
fi

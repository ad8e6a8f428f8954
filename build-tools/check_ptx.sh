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
    # nvcc 13 does not always number virtual registers the same way for the
    # same source (binary.cu and unary.cu gave two numberings in five runs),
    # so a file that differs is compared again with register numbers and
    # counts left out: any other difference (an instruction, an operand, a
    # name) still fails.
    norm() { sed -E 's/%(rd|rs|r|fd|f|p|h|hh)[0-9]+/%\1#/g; s/(%[a-z]+)<[0-9]+>/\1<#>/g' "$1"; }
    bad=0
    for f in ptx/*.ptx "$tmp"/*.ptx; do
      b=$(basename "$f")
      if [ ! -f "ptx/$b" ] || [ ! -f "$tmp/$b" ]; then
        echo "check-ptx: $b is in only one of ptx/ and the regenerated set" >&2
        bad=1
      elif ! cmp -s "ptx/$b" "$tmp/$b" && ! cmp -s <(norm "ptx/$b") <(norm "$tmp/$b"); then
        echo "check-ptx: $b differs" >&2
        bad=1
      fi
    done
    if [ $bad -ne 0 ]; then
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

#!/usr/bin/env bash
# Regenerates the committed PTX (ptx/) from kernels/:
#   <module>.sm_35.ptx        legacy PTX from clang's NVPTX back end (old ISA,
#                             JIT-able by every driver since Kepler)
#   <module>.compute_XY.ptx   PTX from nvcc for the newest arch in EMBER_ARCHS
#                             that nvcc supports (best code for future GPUs),
#                             and for the oldest (so every GPU nvcc targets,
#                             Hopper included, has a PTX path too)
# and ptx/STAMP.mk, which records the compilers and a hash of the sources so
# `make check-ptx` can tell when ptx/ is stale.
# usage: make_ptx.sh OUTDIR NVCC CLANG "ARCHS" [MODULE...]
# ARCHS: the Makefile's default SM list (never a narrowed EMBER_ARCHS: the
# committed PTX must not depend on one build's choice). MODULEs: regenerate
# only those (default: every kernels/*.cu). Files are written to a temporary
# folder and moved into place one by one, so a build running meanwhile never
# sees a missing or half-written PTX file.
set -euo pipefail
out=$1 nvcc=$2 clang=$3 archs=$4
shift 4
modules=("$@")
if [ ${#modules[@]} -eq 0 ]; then
  for cu in kernels/*.cu; do modules+=("$(basename "$cu" .cu)"); done
fi

if [ -z "$nvcc" ] || [ -z "$clang" ]; then
  echo "make ptx: needs both nvcc (${nvcc:-not found}) and clang (${clang:-not found})" >&2
  exit 1
fi
mkdir -p "$out"
supported=$("$nvcc" --list-gpu-arch | sed -n 's/^compute_\([0-9]*\)$/\1/p')
newest=0 oldest=0
for a in $archs; do
  echo "$supported" | grep -qx "$a" || continue
  if [ "$a" -gt "$newest" ]; then newest=$a; fi
  if [ "$oldest" -eq 0 ] || [ "$a" -lt "$oldest" ]; then oldest=$a; fi
done
if [ "$newest" -eq 0 ]; then echo "make ptx: nvcc supports none of EMBER_ARCHS ($archs)" >&2; exit 1; fi

tmp=$(mktemp -d "$out/.make_ptx.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for m in "${modules[@]}"; do
  cu=kernels/$m.cu
  [ -f "$cu" ] || { echo "make ptx: no kernel module $cu" >&2; exit 1; }
  "$clang" -x cuda --cuda-device-only --cuda-gpu-arch=sm_35 -nocudainc -nocudalib -O3 \
    -ffp-contract=off -Wno-unknown-cuda-version -Ikernels -S "$cu" -o "$tmp/$m.sm_35.ptx"
  for a in $oldest $newest; do
    "$nvcc" -ptx -arch=compute_$a --fmad=false -O3 -Ikernels "$cu" -o "$tmp/$m.compute_$a.ptx"
  done
done
mv -f "$tmp"/*.ptx "$out"/
# PTX of modules that no longer exist, or of archs no longer chosen, goes.
for f in "$out"/*.ptx; do
  b=$(basename "$f" .ptx) m=${b%%.*} t=${b#*.}
  if [ ! -f "kernels/$m.cu" ] || { [ "$t" != sm_35 ] && [ "$t" != "compute_$oldest" ] && [ "$t" != "compute_$newest" ]; }; then
    rm -f "$f"
  fi
done

nvcc_version=$("$nvcc" --version | sed -n 's/.*release [0-9.]*, V\([0-9.]*\).*/\1/p')
nvcc_major=${nvcc_version%%.*}
nvcc_minor=$(echo "$nvcc_version" | cut -d. -f2)
clang_version=$("$clang" --version | sed -n '1s/.*version \([0-9.]*\).*/\1/p')
{
  echo "# Written by build-tools/make_ptx.sh: what made the PTX in this folder."
  echo "PTX_NVCC_VERSION := $nvcc_version"
  echo "PTX_NVCC_TOOLKIT := $((nvcc_major * 1000 + nvcc_minor * 10))"
  echo "PTX_NVCC_ARCHS := $oldest $newest"
  echo "PTX_CLANG_VERSION := $clang_version"
  echo "PTX_SOURCES_SHA256 := $(bash build-tools/kernel_sources_hash.sh)"
} > "$tmp/STAMP.mk"
mv -f "$tmp/STAMP.mk" "$out/STAMP.mk"
echo "make ptx: wrote the PTX of ${#modules[@]} module(s) to $out (nvcc $nvcc_version compute_$oldest and compute_$newest, clang $clang_version sm_35)"

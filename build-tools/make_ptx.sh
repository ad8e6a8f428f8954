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
# usage: make_ptx.sh OUTDIR NVCC CLANG "EMBER_ARCHS"
set -euo pipefail
out=$1 nvcc=$2 clang=$3 archs=$4

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

rm -f "$out"/*.ptx
for cu in kernels/*.cu; do
  m=$(basename "$cu" .cu)
  "$clang" -x cuda --cuda-device-only --cuda-gpu-arch=sm_35 -nocudainc -nocudalib -O3 \
    -ffp-contract=off -Wno-unknown-cuda-version -Ikernels -S "$cu" -o "$out/$m.sm_35.ptx"
  for a in $oldest $newest; do
    "$nvcc" -ptx -arch=compute_$a --fmad=false -O3 -Ikernels "$cu" -o "$out/$m.compute_$a.ptx"
  done
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
} > "$out/STAMP.mk"
echo "make ptx: wrote $(ls "$out"/*.ptx | wc -l) PTX files to $out (nvcc $nvcc_version compute_$oldest and compute_$newest, clang $clang_version sm_35)"

#!/usr/bin/env bash
# `make demo`: what Ember sees on this machine, then the same library on a
# pretend fleet (Ember's test double of the CUDA driver), then the self-test.
# usage: demo.sh BUILD
set -uo pipefail
build=$1
ember=$build/bin/ember
fake=$(pwd)/$build/tests/fakecuda/libcuda.so.1
CC_FOR_DEMO=${CC:-gcc}
hr() { printf '\n==== %s ====\n' "$1"; }

hr "The image table embedded in $build/lib/libember.so"
"$ember" images

hr "This machine"
"$ember" devices
"$ember" selftest

hr "A mixed fleet, through Ember's test double of libcuda"
echo "K80 (3.7) + T4 (7.5) + H100 (9.0) + RTX 5090 (12.0) on an R470 driver (CUDA 11.4):"
EMBER_LIBCUDA=$fake FAKECUDA_DRIVER=11040 \
  FAKECUDA_DEVICES="3.7=Tesla K80,7.5=Tesla T4,9.0=NVIDIA H100 80GB HBM3,12.0=NVIDIA GeForce RTX 5090" \
  EMBER_CACHE_DIR=$(mktemp -d) "$ember" devices
echo
echo "The same GPUs on an R580 driver (CUDA 13.0):"
EMBER_LIBCUDA=$fake FAKECUDA_DRIVER=13000 \
  FAKECUDA_DEVICES="3.7=Tesla K80,7.5=Tesla T4,9.0=NVIDIA H100 80GB HBM3,12.0=NVIDIA GeForce RTX 5090" \
  EMBER_CACHE_DIR=$(mktemp -d) "$ember" devices

hr "Self-test through the test double: every kernel, loaded along its plan, run and compared with the CPU bit for bit"
echo "(the double runs each kernel's host build: every thread a fiber, real barriers, checked device pointers)"
for drv in 11040 13000; do
  echo
  echo "K80 + T4 + H100 + RTX 5090, driver $drv:"
  EMBER_LIBCUDA=$fake FAKECUDA_DRIVER=$drv \
    FAKECUDA_DEVICES="3.7=Tesla K80,7.5=Tesla T4,9.0=NVIDIA H100 80GB HBM3,12.0=NVIDIA GeForce RTX 5090" \
    EMBER_CACHE_DIR=$(mktemp -d) "$ember" selftest
done

hr "Training on the CPU: examples/train_mlp.c (graph, autodiff, executor, save/load)"
"$CC_FOR_DEMO" -std=c11 -Iinclude examples/train_mlp.c "$build/lib/libember.a" -fopenmp -lopenblas -lelf -lzstd \
  -llz4 -lprotobuf-c -ldl -lpthread -lm -o "$build/bin/train_mlp" && "$build/bin/train_mlp"

hr "EMBER_STRICT=1 on a K80 with the JIT disabled: the CPU fallback becomes an error"
EMBER_LIBCUDA=$fake FAKECUDA_DRIVER=11040 FAKECUDA_DEVICES="3.7=Tesla K80" CUDA_DISABLE_PTX_JIT=1 EMBER_STRICT=1 \
  "$ember" devices
echo "(exit status $?)"
exit 0

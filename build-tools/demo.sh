#!/usr/bin/env bash
# `make demo`: what Ember sees on this machine, the same library on a
# pretend fleet (Ember's test double of the CUDA driver), a self-test, then
# the main event: a CNN (LeNet) trained on Fashion-MNIST on the best device
# of this machine, with the progress bar, its test accuracy and where each
# kernel's code came from. The Makefile's demo target has installed what
# was missing (build-tools/deps.sh, the data set included) and built.
# usage: demo.sh BUILD
#
# The training's settings: LeNet with 16 and 32 channels, dense layers of
# 128 and 64 and batch normalisation (the zoo's default LeNet, 32 / 64
# channels and 256 / 128, does 4x the arithmetic: about one epoch in the
# demo's 3 minutes on 2 CPU cores), 3 epochs of Adam (learning rate 2e-3, cosine to
# 0) in minibatches of 64, inputs standardised. Measured on a 2-core machine
# without a GPU: 90.96% test accuracy in 192 CPU-seconds (about 2 minutes of
# wall time when nobody else uses the cores; 11 minutes on the shared machine
# it was measured on, at a load average of 8-16). EMBER_DEMO_EPOCHS overrides
# the epochs.
set -uo pipefail
build=$1
ember=$build/bin/ember
fake=$(pwd)/$build/tests/fakecuda/libcuda.so.1
data=${EMBER_DEMO_DATA:-/usr/share/datasets/fashion-mnist}
epochs=${EMBER_DEMO_EPOCHS:-3}
hr() { printf '\n==== %s ====\n' "$1"; }
# The pretend fleet's JIT caches and the checkpoint live here, removed at the end.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Idle OpenMP threads sleep instead of spinning: on a shared or small
# machine spinning threads take the cores the training needs.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

hr "The image table embedded in $build/lib/libember.so"
"$ember" images

hr "This machine"
"$ember" devices
"$ember" selftest

hr "A mixed fleet, through Ember's test double of libcuda"
echo "K80 (3.7) + T4 (7.5) + H100 (9.0) + RTX 5090 (12.0) on an R470 driver (CUDA 11.4):"
EMBER_LIBCUDA=$fake FAKECUDA_DRIVER=11040 \
  FAKECUDA_DEVICES="3.7=Tesla K80,7.5=Tesla T4,9.0=NVIDIA H100 80GB HBM3,12.0=NVIDIA GeForce RTX 5090" \
  EMBER_CACHE_DIR=$(mktemp -d -p "$work") "$ember" devices
echo
echo "The same GPUs on an R580 driver (CUDA 13.0):"
EMBER_LIBCUDA=$fake FAKECUDA_DRIVER=13000 \
  FAKECUDA_DEVICES="3.7=Tesla K80,7.5=Tesla T4,9.0=NVIDIA H100 80GB HBM3,12.0=NVIDIA GeForce RTX 5090" \
  EMBER_CACHE_DIR=$(mktemp -d -p "$work") "$ember" devices

hr "Self-test through the test double: every kernel, loaded along its plan, run and compared with the CPU bit for bit"
echo "(the double runs each kernel's host build: every thread a fiber, real barriers, checked device pointers)"
for drv in 11040 13000; do
  echo
  echo "K80 + T4 + H100 + RTX 5090, driver $drv:"
  EMBER_LIBCUDA=$fake FAKECUDA_DRIVER=$drv \
    FAKECUDA_DEVICES="3.7=Tesla K80,7.5=Tesla T4,9.0=NVIDIA H100 80GB HBM3,12.0=NVIDIA GeForce RTX 5090" \
    EMBER_CACHE_DIR=$(mktemp -d -p "$work") "$ember" selftest
done

hr "EMBER_STRICT=1 on a K80 with the JIT disabled: the CPU fallback becomes an error"
EMBER_LIBCUDA=$fake FAKECUDA_DRIVER=11040 FAKECUDA_DEVICES="3.7=Tesla K80" CUDA_DISABLE_PTX_JIT=1 EMBER_STRICT=1 \
  "$ember" devices
echo "(exit status $?)"

hr "Training a CNN (LeNet) on Fashion-MNIST on the best device of this machine"
ckdir=$work
args=(--model lenet --channels 16,32 --hidden 128,64 --batch-norm --data "$data" --device auto --epochs "$epochs"
      --batch 64 --learner adam --lr 0.002 --schedule cosine --checkpoint "$ckdir/lenet.ckpt")
echo "ember train ${args[*]}"
start=$SECONDS
"$ember" train "${args[@]}"
rc=$?
echo "(training and testing took $((SECONDS - start)) s; exit status $rc)"
if [ $rc -eq 0 ]; then
  echo
  echo "The checkpoint, evaluated again by a fresh process: ember eval --checkpoint $ckdir/lenet.ckpt"
  "$ember" eval --checkpoint "$ckdir/lenet.ckpt" --data "$data" --device auto || rc=$?
fi
exit $rc

#!/usr/bin/env bash
# `make gpu-bundle`: packs what `make test-gpu` needs for a GPU machine that
# has none of our Debian packages and no registry to get them from (the lent
# GPU machines of tests/gpu/README.md): bin/ember, bin/bench_gpu, bin/bench_fast, the GPU
# test programs, lib/libember.so and every shared library they load that is not part of the C library itself, in one
# compressed archive. On the GPU machine:
#   mkdir -p /tmp/ember && tar -xzf .device/ember-gpu.tar.gz -C /tmp/ember
#   bash tests/gpu/run.sh /tmp/ember
# (bin/ember finds its libraries through its run path, $ORIGIN/../lib).
#
# With KIND "train" (`make train-bundle`) it packs instead what training on
# the GPU needs (tests/gpu/train_machine.sh): bin/ember, the libraries and
# Debian's Fashion-MNIST, into ember-train.tar.gz (about 35 MB: the data set
# does not fit beside the test programs in one call's 64 MiB).
# usage: gpu_bundle.sh BUILD OUT_DIR [KIND]
set -euo pipefail
build=$1 out=$2 kind=${3:-tests}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$out"
mkdir -p "$stage/tests/unit" "$stage/share"
cp -a "$build"/lib/libember.so* "$stage/lib/"
programs=("$build/bin/ember")
cp "$build/bin/ember" "$stage/bin/"
if [ "$kind" = train ]; then
  data=${EMBER_BUNDLE_DATA:-/usr/share/datasets/fashion-mnist}
  mkdir -p "$stage/share/fashion-mnist"
  cp "$data"/*-ubyte.gz "$stage/share/fashion-mnist/"
else
  # The test programs that compare every op, the training (the engine's, the
  # learners' and the model zoo's) and the ONNX node tests between the CPU and
  # the GPU (tests/gpu/run.sh runs them), with the node tests' data.
  # the GPU benchmarks (bench/run_gpu.sh, bench/run_fast.sh)
  for b in bench_gpu bench_fast; do
    cp "$build/bin/$b" "$stage/bin/"
    programs+=("$build/bin/$b")
  done
  for t in test_ops_devices test_train_devices test_learners test_layers test_onnx_conformance; do
    cp "$build/tests/unit/$t" "$stage/tests/unit/"
    programs+=("$build/tests/unit/$t")
  done
  onnx_data=${EMBER_ONNX_TESTDATA:-/usr/share/libonnx-testdata/data/node}
  [ -d "$onnx_data" ] && cp -a "$onnx_data" "$stage/share/onnx-node"
fi
# Libraries Ember opens itself (dlopen), which ldd cannot see: OpenBLAS
# (ops/blas.c; tests/gpu/run.sh and train_machine.sh put lib/ on
# LD_LIBRARY_PATH, where dlopen finds it), listed as ldd would, with its own
# dependencies. oneDNN (ops/dnnl.c) is not carried: at 40 MB it would not fit
# the device tool's 64 MB with the rest, and it is optional (the CPU's
# convolutions then take Ember's own path there; test_dnnl says it skipped).
opened() {
  local blas
  blas=$(ldconfig -p | awk '/libopenblas\.so\.0 .*x86-64/ {print $NF; exit}')
  [ -n "$blas" ] || { echo "gpu_bundle: libopenblas.so.0 not found (apt install libopenblas0)" >&2; return 1; }
  echo "libopenblas.so.0 => $blas (0)"
  ldd "$blas"
}
# The C library and the loader come with every system; everything else goes.
{ for p in "${programs[@]}"; do ldd "$p"; done; opened; } | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*) ;;
    libember.so*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
# Debug information stays here (a backtrace there still names functions): the
# test programs link libember.a with -g, ~10 MB each, and the bundle with
# OpenBLAS (35 MB unpacked) must fit one call's 64 MiB with the tree.
find "$stage/bin" "$stage/tests" "$stage/lib" -type f \( -perm -u+x -o -name '*.so*' \) -exec strip --strip-debug {} + 2>/dev/null || true
{
  echo "Ember GPU bundle, made $(date -u +%Y-%m-%dT%H:%MZ) from commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "on $(uname -m), $(ldd --version | head -1)"
  ls -l "$stage/bin" "$stage/lib"
} >"$stage/BUNDLE.txt"
name=ember-gpu.tar.gz
[ "$kind" = train ] && name=ember-train.tar.gz
tar -czf "$out/$name" -C "$stage" .
echo "gpu-bundle: $out/$name ($(du -h "$out/$name" | cut -f1)); on the GPU machine:"
if [ "$kind" = train ]; then
  echo "  bash tests/gpu/train_machine.sh $out/$name \$OUT [DEADLINE_S]"
else
  echo "  mkdir -p /tmp/ember && tar -xzf $out/$name -C /tmp/ember && bash tests/gpu/run.sh /tmp/ember"
fi

#!/usr/bin/env bash
# Installs the Debian packages Ember needs to build and test, when missing.
# As root it runs apt-get itself; otherwise it prints the exact command and
# fails, so nothing depends on what someone installed by hand.
set -euo pipefail

# The CUDA tools Ember takes from PyPI into .tools/ (ptxas 11.8, NVRTC 11.8 and
# 12.x): installed when missing; when they cannot be, one line says so and the
# build goes on without them.
bash "$(dirname "$0")/pypi_tools.sh" --report

PACKAGES=(
  gcc make pkg-config          # toolchain
  libelf-dev                   # cubin / ELF reading (runtime, gpucheck)
  libzstd-dev liblz4-dev       # compressed fatbin entries
  zlib1g-dev                   # gzipped IDX data sets (training readers)
  libxxhash-dev                # image and cache hashes (header-only use)
  libjansson-dev               # JSON output and input of the tools
  libcmocka-dev                # the test framework
  clang libclang-rt-14-dev     # legacy sm_35 PTX, libFuzzer targets
  libprotobuf-c-dev protobuf-c-compiler  # ONNX reader: protobuf-c and protoc-c
  libonnx-dev                  # onnx.proto, compiled by protoc-c at build time
  libonnx-testdata             # ONNX backend node tests (conformance, reader survey)
  libopenblas-dev              # GEMM for matmul and convolution on the CPU (cblas.h; loaded at run time: ops/blas.c)
  libdnnl-dev                  # oneDNN 2: the fast CPU convolutions (headers; loaded at run time, optional: ops/dnnl.c)
  valgrind                     # the memory check of the unit tests
  dataset-fashion-mnist        # the data set make demo and the training tests use
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "ember: missing Debian packages: ${missing[*]}" >&2
  echo "ember: run as root:  apt-get update && $cmd" >&2
  exit 1
fi
echo "ember: installing missing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

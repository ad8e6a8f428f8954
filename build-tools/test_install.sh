#!/usr/bin/env bash
# Installs Ember into a temporary prefix, then builds and runs examples/*.c
# against it through pkg-config, as a user of the library would.
# usage: test_install.sh BUILD
set -euo pipefail
build=$1
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
make --no-print-directory -s install BUILD="$build" PREFIX="$prefix" >/dev/null
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
for src in examples/*.c; do
  exe=$prefix/$(basename "$src" .c)
  # The installed .pc names the install prefix: nothing from the source tree is used.
  # -lm: the examples themselves use libm.
  cc -std=c11 -Wall -Wextra -Werror "$src" $(pkg-config --cflags --libs ember) -lm -o "$exe"
  LD_LIBRARY_PATH=$prefix/lib "$exe" >/dev/null || { echo "install test: $src failed against the installed library" >&2; exit 1; }
done
readelf -d "$prefix/lib/libember.so" | grep -Eiq 'NEEDED.*(libcuda|libcudart|libnvrtc|libcublas|libcudnn|libnccl)' &&
  { echo "install test: libember.so links a CUDA library" >&2; exit 1; }
echo "install test: installed into a temporary prefix; examples built with pkg-config and ran; no CUDA library linked"

#!/usr/bin/env bash
# `make gpu-bundle`: packs what `make test-gpu` needs for a GPU machine that
# has none of our Debian packages and no registry to get them from (the lent
# GPU machines of tests/gpu/README.md): bin/ember, lib/libember.so and every
# shared library they load that is not part of the C library itself, in one
# compressed archive. On the GPU machine:
#   mkdir -p /tmp/ember && tar -xzf .device/ember-gpu.tar.gz -C /tmp/ember
#   bash tests/gpu/run.sh /tmp/ember
# (bin/ember finds its libraries through its run path, $ORIGIN/../lib).
# usage: gpu_bundle.sh BUILD OUT_DIR
set -euo pipefail
build=$1 out=$2
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$out"
cp "$build/bin/ember" "$stage/bin/"
cp -a "$build"/lib/libember.so* "$stage/lib/"
# The C library and the loader come with every system; everything else goes.
ldd "$build/bin/ember" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*) ;;
    libember.so*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
{
  echo "Ember GPU bundle, made $(date -u +%Y-%m-%dT%H:%MZ) from commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "on $(uname -m), $(ldd --version | head -1)"
  ls -l "$stage/bin" "$stage/lib"
} >"$stage/BUNDLE.txt"
tar -czf "$out/ember-gpu.tar.gz" -C "$stage" .
echo "gpu-bundle: $out/ember-gpu.tar.gz ($(du -h "$out/ember-gpu.tar.gz" | cut -f1)); on the GPU machine:"
echo "  mkdir -p /tmp/ember && tar -xzf $out/ember-gpu.tar.gz -C /tmp/ember && bash tests/gpu/run.sh /tmp/ember"

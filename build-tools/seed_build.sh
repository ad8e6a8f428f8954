#!/usr/bin/env bash
# Seeds the build folder TO with FROM's compiled host code (obj/, gen/), times
# kept, so a second build of the same sources with other kernel images (make
# test-nocuda: committed PTX only) compiles nothing again: no object of the
# library, the test double or the tests depends on which CUDA compilers the
# build found; only the image table (gen/images.bin, the packer's argument
# list, obj/runtime/image_section.o) does, and that is left for TO's build to
# make. Make still rebuilds anything older than its sources.
# usage: seed_build.sh FROM TO
set -euo pipefail
from=$1 to=$2
[ -d "$from/obj" ] || exit 0
mkdir -p "$to"
cp -a "$from/obj" "$from/gen" "$to"/
rm -f "$to/gen/images.bin" "$to/gen/pack-args.txt" "$to/obj/runtime/image_section.o" "$to/obj/runtime/image_section.d"

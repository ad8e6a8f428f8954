#!/usr/bin/env bash
# One hash over every file in kernels/ that the PTX is made from.
set -euo pipefail
cat $(ls kernels/*.cu kernels/*.h | LC_ALL=C sort) | sha256sum | cut -d' ' -f1

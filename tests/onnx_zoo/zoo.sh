#!/usr/bin/env bash
# Makes the ONNX model zoo of tests/unit/test_onnx_zoo.c in OUT (the Makefile
# runs it once per build folder, again only when make_zoo.py changes): the
# Python packages are installed into .tools/ when missing
# (build-tools/pypi_python.sh), then make_zoo.py exports the models.
#
# When the packages cannot be had (no network, no pip), OUT gets no
# manifest.txt but an UNAVAILABLE file with the reason, this script prints it
# and exits 0: the test then skips, printing the reason. A failure of
# make_zoo.py itself (onnxruntime disagreeing with torch, say) is an error.
# usage: zoo.sh OUT
set -uo pipefail
out=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "${out:?}"
mkdir -p "$out"

if ! why=$(bash "$root/build-tools/pypi_python.sh"); then
  why=$(echo "$why" | grep '^ember:' | tail -n 1)
  echo "${why:-ember: PyTorch, onnx or onnxruntime missing}" >"$out/UNAVAILABLE"
  echo "ONNX model zoo SKIPPED: ${why:-PyTorch, onnx or onnxruntime missing}"
  exit 0
fi
echo "  ZOO      $out (tests/onnx_zoo/make_zoo.py: torch exports, onnxruntime's outputs)"
# The exporters are chatty: their output goes to the log, shown on failure.
if ! PYTHONPATH="$root/.tools/torch:$root/.tools/onnxpy" OMP_NUM_THREADS=1 \
    python3 "$root/tests/onnx_zoo/make_zoo.py" "$out" >"$out/make_zoo.log" 2>&1; then
  tail -n 30 "$out/make_zoo.log"
  echo "tests/onnx_zoo/make_zoo.py failed (log: $out/make_zoo.log)"
  rm -f "$out/manifest.txt"
  exit 1
fi
sed 's/^/  ZOO      not exported: /' "$out/exporters.txt"

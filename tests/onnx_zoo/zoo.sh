#!/usr/bin/env bash
# Makes the ONNX model zoo of tests/unit/test_onnx_zoo.c in OUT (the Makefile
# runs it once per build folder, again when the zoo's scripts or committed
# models change):
#   1. the models: exported now by torch where torch imports or installs
#      (build-tools/pypi_python.sh torch), else copied from tests/onnx_zoo/models,
#      the committed export of the same zoo_models.py (`make zoo-models`);
#   2. the expected values: onnxruntime's outputs (make_zoo.py reference),
#      with onnx and onnxruntime from PyPI (pypi_python.sh onnx).
#
# Without onnxruntime (no network, no pip) OUT gets no manifest.txt but an
# UNAVAILABLE file with the reason, this script prints it and exits 0: the
# test then skips, printing the reason. A failure of make_zoo.py itself
# (onnxruntime disagreeing with torch, say), or committed models exported
# from another zoo_models.py than this one, is an error.
# usage: zoo.sh OUT
set -uo pipefail
out=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
committed=$here/models
rm -rf "${out:?}"
mkdir -p "$out"

unavailable() {
  echo "$1" >"$out/UNAVAILABLE"
  echo "ONNX model zoo SKIPPED: $1"
  exit 0
}
# Runs make_zoo.py STEP into OUT; its chatter goes to a log, shown on failure.
make_zoo() {
  if ! PYTHONPATH="$root/.tools/torch:$root/.tools/onnxpy" OMP_NUM_THREADS=1 \
      python3 "$here/make_zoo.py" "$1" "$out" >"$out/make_zoo-$1.log" 2>&1; then
    tail -n 30 "$out/make_zoo-$1.log"
    echo "tests/onnx_zoo/make_zoo.py $1 failed (log: $out/make_zoo-$1.log)"
    rm -f "$out/manifest.txt"
    exit 1
  fi
}

if ! why=$(bash "$root/build-tools/pypi_python.sh" onnx); then
  why=$(echo "$why" | grep '^ember:' | tail -n 1)
  unavailable "${why:-ember: onnx or onnxruntime missing}"
fi

if why=$(bash "$root/build-tools/pypi_python.sh" torch); then
  echo "  ZOO      $out: exporting the models of tests/onnx_zoo/zoo_models.py with torch"
  make_zoo export
else
  sha=$(sha256sum "$here/zoo_models.py" | cut -d' ' -f1)
  first=$(head -n 1 "$committed/exports.txt" 2>/dev/null)
  case $first in
    *"zoo_models.py sha256 $sha"*) ;;
    *) echo "tests/onnx_zoo/models was not exported from this tests/onnx_zoo/zoo_models.py (sha256 $sha;" \
            "models/exports.txt says: ${first:-nothing}): run make zoo-models where torch is installed, and commit"
       exit 1 ;;
  esac
  echo "  ZOO      $out: the committed models of tests/onnx_zoo/models (${first#\# }): torch is not here" \
       "(${why#ember: })"
  cp -r "$committed/." "$out/"
fi
sed 's/^/  ZOO      not exported: /' "$out/exporters.txt"
echo "  ZOO      $out: onnxruntime's outputs (tests/onnx_zoo/make_zoo.py reference)"
make_zoo reference

#!/usr/bin/env bash
# Installs the Python packages of the ONNX tests into .tools/ at the
# repository root (git-ignored; never into the system), one group at a time:
#   onnx    .tools/onnxpy  onnx, onnxscript, onnxruntime (PyPI): onnx.checker
#                          and the reference outputs (tests/onnx_zoo,
#                          test_onnx_export)
#   torch   .tools/torch   torch, the CPU build from PyTorch's CPU index (~200 MB
#                          instead of PyPI's CUDA build with 3 GB of CUDA wheels):
#                          exports the zoo's models afresh (tests/onnx_zoo)
# when python3 cannot import them with PYTHONPATH=.tools/torch:.tools/onnxpy.
# Packages already in a folder are kept (pip --target does not replace an
# existing package without --upgrade): a second run only checks the imports.
#
# Exit 0: the group imports (prints nothing). Exit 1: something is missing
# and could not be installed (no python3, no pip, the index unreachable, pip
# failed); stdout then has one line saying what and why, and the command that
# installs it. Never fatal to the build: tests/onnx_zoo/zoo.sh falls back to
# the committed models without torch, and skips the zoo, printing that line,
# without onnxruntime.
# usage: pypi_python.sh onnx|torch
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

tools=.tools
torch_dir=$tools/torch
onnx_dir=$tools/onnxpy
# PyTorch's own index has the CPU-only wheels.
torch_index=${EMBER_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
onnx_pkgs=(onnx onnxscript onnxruntime)

group=${1:-}
case $group in
  onnx)  modules="onnx, onnxscript, onnxruntime, numpy"; dir=$onnx_dir; what="${onnx_pkgs[*]}"
         install_args=("${onnx_pkgs[@]}") ;;
  torch) modules="torch"; dir=$torch_dir; what="PyTorch (CPU)"
         install_args=(--index-url "$torch_index" torch) ;;
  *) echo "usage: pypi_python.sh onnx|torch" >&2; exit 2 ;;
esac

imports() { PYTHONPATH=$torch_dir:$onnx_dir python3 -c "import $modules" >/dev/null 2>&1; }
command -v python3 >/dev/null 2>&1 || { echo "ember: no python3: cannot use $what"; exit 1; }
imports && exit 0

if python3 -m pip --version >/dev/null 2>&1; then pip="python3 -m pip"
else
  echo "ember: no pip for python3: cannot install $what into $dir (apt-get install python3-pip)"
  exit 1
fi

mkdir -p "$tools"
# One installer at a time (pypi_tools.sh takes the same lock).
exec 9>"$tools/.lock"
flock 9
imports && exit 0 # another installer did it while this one waited

cmd="$pip install --target $dir ${install_args[*]}"
# Short timeouts: without network the tests must go on at once (saying
# what they skip), not retry for minutes.
quiet=(--quiet --disable-pip-version-check --no-warn-script-location --timeout 20 --retries 1)
log=$tools/.pip-$group.log
echo "  PYPI     $what -> $dir" >&2
$pip install "${quiet[@]}" --target "$dir" "${install_args[@]}" >"$log" 2>&1 ||
  { echo "ember: cannot install $what (see $log; no network?); to add it run: $cmd"; exit 1; }
imports || { echo "ember: installed, but python3 still cannot import $modules from $torch_dir:$onnx_dir; try: $cmd"; exit 1; }
exit 0
